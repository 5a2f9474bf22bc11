"""Several schedulers and a real worker on MariaDB: every occurrence once.

The MariaDB pass runs the in-process specification; this is its one real-process scenario:
two ``runscheduler`` processes contend for the same due rows (``SELECT … FOR UPDATE SKIP
LOCKED`` through the ORM, MariaDB having no ``UPDATE … RETURNING``) and a prefork worker runs
what they publish. A job due every second for ten seconds, with a body of one second and
``overlap=allow`` (so one occurrence never waits for the one before), must leave ten
executions, each completed by exactly one attempt, and both schedulers must have ticked.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from scheduling.models import Attempt, Execution, ExecutionStatus, SchedulerState
from tests.conftest import celery_worker_command, scheduler_command, wait_for
from tests.factories import create_job

pytestmark = [pytest.mark.slow, pytest.mark.mysql, pytest.mark.django_db(transaction=True)]

OCCURRENCES = 10
SECOND = timedelta(seconds=1)


def test_two_schedulers_and_a_worker_run_each_occurrence_exactly_once(
    owner: Any, processes: Any, process_env: dict[str, str]
) -> None:
    processes.start(celery_worker_command(name="maria", concurrency=3), env=process_env,
                    name="worker")  # fmt: skip
    schedulers = [
        processes.start(scheduler_command("--batch-size", "5"), env=process_env, name=f"s{i}")
        for i in range(2)
    ]
    wait_for(
        lambda: SchedulerState.objects.count() >= 2,
        timeout=60,
        message="both schedulers have ticked",
    )
    first = timezone.now().replace(microsecond=0) + 3 * SECOND
    job = create_job(
        owner=owner,
        name="every-second",
        task="scheduling.diagnostics.sleep",
        kwargs={"seconds": 1.0},
        every="PT1S",
        start=first,
        end=first + (OCCURRENCES - 1) * SECOND,
        overlap="allow",
        now=timezone.now(),
    )
    wait_for(
        lambda: Execution.objects.filter(job=job, status=ExecutionStatus.COMPLETED).count()
        >= OCCURRENCES,
        timeout=90,
        interval=0.5,
        message=f"{OCCURRENCES} occurrences completed",
    )
    for child in schedulers:
        assert child.poll() is None, processes.log_of(child)[-3000:]
    executions = list(Execution.objects.filter(job=job).order_by("scheduled_for"))
    assert [e.scheduled_for for e in executions] == [
        first + n * SECOND for n in range(OCCURRENCES)
    ]
    assert all(e.status == ExecutionStatus.COMPLETED for e in executions)
    attempts = Attempt.objects.filter(execution__job=job)
    assert attempts.count() == OCCURRENCES
    assert sorted(attempts.values_list("execution_id", flat=True)) == sorted(
        e.pk for e in executions
    )
