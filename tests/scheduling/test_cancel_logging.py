"""An intended cancel is logged as what it is: at INFO with its reason, never as an error.

Under ``cancel_other`` every run still going when the next occurrence comes due is cancelled,
and its body is stopped with the soft time limit's exception. Celery logged each such stop as
``ERROR ... raised unexpected: SoftTimeLimitExceeded()`` with a traceback, so a healthy job
filled the worker's log with errors. A real worker and scheduler run such a job here, and the
worker's log is read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from scheduling.models import Execution, ExecutionStatus, Job, JobStatus
from tests.conftest import Processes, scheduler_command, wait_for
from tests.factories import create_job
from tests.polling import logged, matching
from tests.scheduling.test_worker_lifecycle import SLOW, start_worker
from tests.tasktable_app.tasks import sleep_noting

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def env(process_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return {
        **process_env,
        "SCHEDULING_MAX_SLEEP": "0.2",
        "DUECOURSE_TEST_BODY_LOG": str(tmp_path / "bodies.log"),
    }


def test_a_run_cancelled_by_the_next_occurrence_is_logged_at_info_with_its_reason(
    owner: Any, processes: Processes, env: dict[str, str]
) -> None:
    processes.start(scheduler_command(), env=env, name="scheduler")
    worker = start_worker(processes, env, "pool", concurrency=2)
    # A 3 s body due every second: each run is cancelled by the next occurrence while it runs.
    job = create_job(owner=owner, name="cancel", task=sleep_noting.name,
                     kwargs={"seconds": 3}, every="PT1S", overlap="cancel_other",
                     misfire="skip", timeout=30, now=timezone.now())  # fmt: skip

    def stopped_runs() -> list[Execution]:
        return [
            run
            for run in Execution.objects.filter(job=job, status=ExecutionStatus.CANCELLED)
            if run.attempts.exists()
        ]

    wait_for(lambda: len(stopped_runs()) >= 2, timeout=2 * SLOW,
             message="two running runs are cancelled by the next occurrence")  # fmt: skip
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PAUSED)
    wait_for(
        lambda: not Execution.objects.filter(job=job).unfinished().exists(),
        timeout=SLOW,
        message="every run of the paused job ends",
    )
    stopped = stopped_runs()
    log = logged(
        lambda: processes.log_of(worker),
        r"execution\.body_stopped",
        count=len(stopped),
        timeout=SLOW,
        message="the worker logs each stopped body",
    )
    for run in stopped:
        [line] = matching(log, rf"execution\.body_stopped execution={run.pk} ")
        assert re.search(r"\bINFO\b", line), line
        assert line.endswith(f"reason={run.last_error}"), line
        assert run.last_error.startswith("cancelled by the occurrence of ")
        [celery_line] = matching(log, rf"\[{run.task_id}\] raised expected: RunCancelled")
        assert re.search(r"\bINFO/", celery_line) and run.last_error in celery_line, celery_line
    assert not matching(log, r"\b(ERROR|CRITICAL)\b"), log
    assert "Traceback" not in log
    assert "SoftTimeLimitExceeded" not in log
    assert not re.search(r"raised unexpected", log)
