"""End to end on PostgreSQL and Redis: a calendar job runs on a real worker at its occurrences."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from scheduling.models import Execution, ExecutionStatus
from tests.conftest import celery_worker_command, scheduler_command, wait_for
from tests.factories import create_job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: Every fifth second of each minute (a calendar, not an interval: BYSECOND picks the seconds),
#: read in a zone whose offset has half and quarter hours. Five seconds apart, so two
#: occurrences fall due within ten seconds of the job's creation.
STEP = 5
RULE = "FREQ=MINUTELY;BYSECOND=" + ",".join(str(s) for s in range(0, 60, STEP))


def test_a_calendar_job_runs_at_its_occurrences_on_a_real_worker(
    owner: Any, processes: Any, process_env: Any
) -> None:
    now = timezone.now()
    job = create_job(owner=owner, name="quarters", task="scheduling.diagnostics.noop",
                     rrule=RULE, tz="Pacific/Chatham", now=now)  # fmt: skip
    first = job.next_occurrence_at
    assert first is not None and first.second % STEP == 0
    assert first - now <= timedelta(seconds=STEP)
    processes.start(celery_worker_command(name="calendar"), env=process_env, name="worker")
    processes.start(scheduler_command(), env=process_env, name="scheduler")
    done = wait_for(
        lambda: list(
            Execution.objects.filter(job=job, status=ExecutionStatus.COMPLETED)
            .order_by("scheduled_for")
        )[:2] if Execution.objects.filter(
            job=job, status=ExecutionStatus.COMPLETED
        ).count() >= 2 else None,
        timeout=90,
        message="two occurrences of the calendar complete",
    )  # fmt: skip
    assert done[0].scheduled_for == first
    assert done[1].scheduled_for == first + timedelta(seconds=STEP)
    assert all(e.scheduled_for.astimezone(ZoneInfo("Pacific/Chatham")).second % STEP == 0
               for e in done)  # fmt: skip
    assert all(e.worker.startswith("calendar@") and e.attempts.count() == 1 for e in done)
