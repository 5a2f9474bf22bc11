"""End to end on PostgreSQL and Redis: a due job runs on a real worker and is recorded."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from scheduling.models import Execution, ExecutionStatus
from tests.conftest import celery_worker_command, scheduler_command, wait_for
from tests.factories import create_job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_due_job_runs_once_on_a_real_worker(owner: Any, processes: Any, process_env: Any) -> None:
    job = create_job(
        owner=owner, name="smoke", task="scheduling.diagnostics.noop", every="PT1H",
        now=timezone.now(),
    )
    processes.start(celery_worker_command(name="smoke"), env=process_env, name="worker")
    processes.start(scheduler_command(), env=process_env, name="scheduler")
    execution = wait_for(
        lambda: Execution.objects.filter(job=job, status=ExecutionStatus.COMPLETED).first(),
        timeout=30,
        message="the first occurrence completes",
    )
    assert execution.attempts.count() == 1
    assert execution.worker.startswith("smoke@")
    job.refresh_from_db()
    assert job.execute_count == 1
