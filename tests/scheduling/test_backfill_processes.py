"""Backfilled occurrences run through the scheduler's own path, with real processes.

A real ``runscheduler`` releases the waiting rows a backfill wrote and publishes them; a real
``celery worker`` (more pool processes than any limit allows) runs them. A forbid job runs
its backfill one at a time, oldest first, each once; an allow job with ``max_running = 2``
runs side by side, never more than two at once. Neither test stops a process: both run on one
worker and one scheduler, started for the module (``shared_processes``).
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from scheduling import api
from scheduling.models import Execution, ExecutionStatus, Job
from tests.conftest import Processes, processes_environment, scheduler_command, wait_for
from tests.factories import create_job
from tests.scheduling.test_worker_lifecycle import SLOW, start_worker

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("sharing"),
]

HOUR = timedelta(hours=1)
SLEEP = "scheduling.diagnostics.sleep"


def past_hourly(owner: Any, name: str, count: int, **options: Any) -> tuple[Job, datetime]:
    """An hourly job whose first ``count`` occurrences are past and whose own next one is half
    an hour ahead, so only the backfill runs during the test; and its first occurrence."""
    now = timezone.now()
    start = now - count * HOUR + HOUR / 2
    job = create_job(owner=owner, name=name, task=SLEEP, every="PT1H", start=start, now=now,
                     **options)  # fmt: skip
    assert job.next_occurrence_at == start + count * HOUR
    return job, start


@pytest.fixture(scope="module")
def scheduler(shared_processes: Processes, module_broker_prefix: str) -> Any:
    """The module's scheduler, beside a worker of three pool processes (more than any limit
    here allows)."""
    env = {**processes_environment(module_broker_prefix), "SCHEDULING_MAX_SLEEP": "0.2"}
    start_worker(shared_processes, env, "pool", concurrency=3)
    return shared_processes.start(scheduler_command(), env=env, name="scheduler")


def run_them(shared: Processes, scheduler: Any, job: Job, count: int) -> list[Any]:
    wait_for(
        lambda: Execution.objects.filter(job=job, status=ExecutionStatus.COMPLETED).count()
        == count,
        timeout=4 * SLOW,
        message="every backfilled occurrence completes",
    )
    assert scheduler.poll() is None, shared.log_of(scheduler)
    return list(Execution.objects.filter(job=job).order_by("started_at"))


def most_at_once(runs: list[Any]) -> int:
    """The most runs whose bodies were going at one moment (from their start and end)."""
    edges = sorted(
        [(run.started_at, 1) for run in runs] + [(run.finished_at, -1) for run in runs],
        key=lambda edge: (edge[0], edge[1]),  # an end before a start at the same instant
    )
    going = most = 0
    for _, step in edges:
        going += step
        most = max(most, going)
    return most


def test_a_forbid_job_backfilled_for_five_past_occurrences_runs_each_once_oldest_first(
    owner: Any, sharing: Processes, scheduler: Any
) -> None:
    job, first = past_hourly(owner, "nightly-report", 5, kwargs={"seconds": 0.5},
                             overlap="forbid")  # fmt: skip
    made = api.backfill(job.pk, start=first, end=timezone.now(), now=timezone.now())
    assert list(made.instants) == [first + i * HOUR for i in range(5)]

    runs = run_them(sharing, scheduler, job, 5)
    assert len(runs) == 5, "nothing made besides the backfill"
    assert [run.scheduled_for for run in runs] == list(made.instants), "oldest first"
    assert all(run.attempts.count() == 1 for run in runs), "each run once"
    for before, after in itertools.pairwise(runs):
        assert before.finished_at <= after.started_at, "one at a time"
    job.refresh_from_db()
    assert job.current_execution_id is None, "the job's own next occurrence is free to run"
    assert job.next_occurrence_at == first + 5 * HOUR, "and it is still the one ahead"


def test_an_allow_job_with_max_running_two_never_runs_more_than_two_at_once(
    owner: Any, sharing: Processes, scheduler: Any
) -> None:
    job, first = past_hourly(owner, "fan-out", 6, kwargs={"seconds": 2}, overlap="allow",
                             max_running=2)  # fmt: skip
    made = api.backfill(job.pk, start=first, end=timezone.now(), now=timezone.now())
    assert made.count == 6

    runs = run_them(sharing, scheduler, job, 6)
    assert all(run.attempts.count() == 1 for run in runs), "each run once"
    assert most_at_once(runs) == 2, "side by side, within the limit, with a pool of three"
