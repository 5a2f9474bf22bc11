"""A backfilled occurrence of a job that is behind its schedule, and the tick's order.

Found by the fault campaign (docs/reliability.md, *Found and fixed: backfilled runs waited
while their job was behind*): a backfilled row of a job under any overlap but ``allow`` is
released only while nothing else of its job is unfinished. When each tick claimed before it
released, a job whose run ended after its next occurrence fell due had that occurrence claimed
first, on every tick while it stayed behind, and its backfill never ran, although
docs/commands.md says backfilled runs run oldest first. The tick releases first now
(``Dispatcher._tick``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from config.celery import app
from scheduling import api
from scheduling.models import Execution, ExecutionStatus, Job
from scheduling.scheduler.loop import Dispatcher
from scheduling.stages import attempts, claims
from tests.factories import create_job

HOUR = timedelta(hours=1)


@pytest.mark.django_db(transaction=True)  # the tick runs as a scheduler runs it
def test_a_job_due_again_when_its_run_ends_lets_its_oldest_backfilled_run_go_first(
    owner: Any, publish_under_prefix: str
) -> None:
    now = timezone.now()
    start = now.replace(minute=0, second=0, microsecond=0) - 10 * HOUR
    job = create_job(owner=owner, name="behind", task="scheduling.diagnostics.noop",
                     every="PT1H", start=start, overlap="forbid", now=now)  # fmt: skip
    api.backfill(job.pk, start=start, end=start + 2 * HOUR, now=now)
    oldest = Execution.objects.filter(job=job).order_by("scheduled_for").first()
    assert oldest is not None and oldest.status == ExecutionStatus.WAITING

    due = job.next_due_at
    claims.claim_due_jobs(now=due, limit=10)
    own = Execution.objects.get(job=job, scheduled_for=job.next_occurrence_at)
    attempts.start_execution(execution_id=own.pk, worker="w@h", pid=1, now=due)
    # The run ends after the job's next occurrence fell due: the job is behind.
    late = due + HOUR + timedelta(seconds=1)
    attempts.complete_execution(execution_id=own.pk, now=late)

    dispatcher = Dispatcher(app, max_sleep=0)
    try:
        dispatcher.tick(late)
    finally:
        dispatcher.close()
    oldest.refresh_from_db()
    assert oldest.status in (ExecutionStatus.PENDING, ExecutionStatus.QUEUED), (
        "the oldest backfilled run takes the turn"
    )
    assert Job.objects.get(pk=job.pk).current_execution_id == oldest.pk
    # The job's own occurrence waits for it, as for any run of a forbid job: not claimed yet,
    # not lost either (still due).
    assert not Execution.objects.filter(job=job, scheduled_for__gt=own.scheduled_for).exclude(
        status=ExecutionStatus.WAITING
    ).exclude(pk=oldest.pk).exists()
    assert Job.objects.get(pk=job.pk).next_due_at <= late
