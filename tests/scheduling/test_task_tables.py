"""A task-table row runs on a real worker with its ``RunContext`` and resumes from a checkpoint.

Neither test stops a process: both run on one worker and one scheduler, started for the
module (``shared_processes``).
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduling import api
from scheduling.models import Execution, ExecutionStatus
from tests.conftest import (
    Processes,
    celery_worker_command,
    processes_environment,
    scheduler_command,
    wait_for,
)
from tests.tasktable_app.models import Chore

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("rows_worker_and_scheduler", "sharing"),
]


@pytest.fixture(scope="module")
def rows_worker_and_scheduler(shared_processes: Processes, module_broker_prefix: str) -> None:
    env = processes_environment(module_broker_prefix)
    shared_processes.start(celery_worker_command(name="rows"), env=env, name="worker")
    shared_processes.start(scheduler_command(), env=env, name="scheduler")


def test_a_row_runs_with_its_run_context_and_a_retry_sees_the_checkpoint() -> None:
    chore = Chore.objects.create(name="flaky", fail_first=1)
    job = api.schedule_row(
        chore,
        timing=api.Every("PT1H"),
        policies=api.Policies(max_retries=2, retry_backoff=0.2),
        now=timezone.now(),
    )

    execution = wait_for(
        lambda: Execution.objects.filter(job_id=job.id, status=ExecutionStatus.COMPLETED).first(),
        timeout=40,
        message="the occurrence completes on its second attempt",
    )

    first, second = Chore.objects.get(pk=chore.pk).runs
    assert [first["attempt"], second["attempt"]] == [1, 2]
    assert first["execution_id"] == second["execution_id"] == execution.pk
    assert first["job_id"] == job.id
    assert first["scheduled_for"] == second["scheduled_for"] == execution.scheduled_for.isoformat()
    assert first["checkpoint"] is None
    assert second["checkpoint"] == {"attempt": 1}  # saved by the failed attempt's progress()
    assert execution.retry_count == 1 and execution.attempts.count() == 2


def test_a_permanent_error_fails_the_run_without_retries() -> None:
    chore = Chore.objects.create(name="permanent")
    job = api.schedule_row(
        chore, timing=api.Every("PT1H"), policies=api.Policies(max_retries=5), now=timezone.now()
    )

    execution = wait_for(
        lambda: Execution.objects.filter(job_id=job.id, status=ExecutionStatus.FAILED).first(),
        timeout=40,
        message="the occurrence fails at once",
    )
    assert "PermanentError: this chore can never succeed" in execution.last_error
    assert execution.retry_count == 0 and execution.attempts.count() == 1
