"""The overlap policies with real workers and the real scheduler: a body that outlasts its
interval, under buffer_all, buffer_one and cancel_other.

A worker pool and a scheduler run side by side (the first three tests share them: none stops
a process; the last beats faster and starts its own, once they are stopped); each test makes a
job due every second whose body runs 1.5 to 3.5 s, lets it run until a few of its runs have
ended, pauses it, waits for every run to end, and then reads the whole history: which
occurrences ran, in which order, which were superseded or cancelled and by which, that none is
missing and none ran twice. The body (``tests.overlap.sleep_noting``) notes its start, its end,
or the clean-up it did when it was stopped, in a file the test reads.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from scheduling.models import AttemptOutcome, Execution, ExecutionStatus, Job, JobStatus
from scheduling.stages import overlaps
from tests.conftest import Processes, processes_environment, scheduler_command, wait_for
from tests.factories import create_job
from tests.scheduling.test_worker_lifecycle import SLOW, start_worker
from tests.tasktable_app.tasks import sleep_ignoring_stop, sleep_noting

pytestmark = [pytest.mark.slow, pytest.mark.mariadb_faults, pytest.mark.django_db(transaction=True)]


def history(job: Job) -> list[Execution]:
    return list(Execution.objects.filter(job=job).order_by("scheduled_for"))


def statuses(job: Job, status: str) -> Callable[[], int]:
    return lambda: Execution.objects.filter(job=job, status=status).count()


def start_pool(processes: Processes, env: dict[str, str]) -> Any:
    """Start a scheduler and a worker pool side by side; return the scheduler once the pool
    consumes. A test makes its job after this, so its first run never waits for a worker."""
    scheduler = processes.start(scheduler_command(), env=env, name="scheduler")
    start_worker(processes, env, "pool", concurrency=2)
    return scheduler


def run_then_pause(
    job: Job, *, scheduler: Any, until: Callable[[], Any], message: str
) -> list[Execution]:
    """Run the job (``start_pool``'s scheduler and pool are up) until ``until``; pause it; wait
    for its last run to end; return its history, oldest first."""
    # Polled often: a buffered occurrence is claimed within a tick of the run before it ending,
    # and a pause that comes later lets one more run start (and adds its body to the test).
    wait_for(until, timeout=2 * SLOW, interval=0.02, message=message)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PAUSED)
    wait_for(
        lambda: not Execution.objects.filter(job=job).unfinished().exists(),
        timeout=SLOW,
        message="every run of the paused job ends",
    )
    assert scheduler.poll() is None
    return history(job)


def assert_every_occurrence_once(runs: list[Execution], interval: timedelta) -> None:
    """Nothing lost: one execution per occurrence, from the first to the last, no gap."""
    due = [run.scheduled_for for run in runs]
    assert due == sorted(set(due))
    assert all(b - a == interval for a, b in itertools.pairwise(due)), due


def assert_one_at_a_time_in_order(ran: list[Execution]) -> None:
    """Each run started once, after the one before it ended, in the order of its occurrence."""
    assert all(run.attempts.count() == 1 for run in ran), "none ran twice"
    by_start = sorted(ran, key=lambda run: run.started_at)
    assert [run.scheduled_for for run in by_start] == [run.scheduled_for for run in ran]
    for before, after in itertools.pairwise(by_start):
        assert before.finished_at <= after.started_at, "never two of them at once"


def body_log(tmp_path: Path) -> Callable[[], list[str]]:
    path = tmp_path / "bodies.log"
    return lambda: path.read_text().splitlines() if path.exists() else []


def pool_env(env: dict[str, str], folder: Path) -> dict[str, str]:
    return {
        **env,
        "SCHEDULING_MAX_SLEEP": "0.2",
        "DUECOURSE_TEST_BODY_LOG": str(folder / "bodies.log"),
    }


@pytest.fixture
def env(process_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return pool_env(process_env, tmp_path)


@dataclass(frozen=True)
class Pool:
    scheduler: Any
    folder: Path


@pytest.fixture(scope="module")
def shared_pool(
    shared_processes: Processes, module_broker_prefix: str, tmp_path_factory: Any
) -> Pool:
    """``start_pool``'s scheduler and pool, once for the tests that share them."""
    folder = tmp_path_factory.mktemp("overlap")
    env = pool_env(processes_environment(module_broker_prefix), folder)
    return Pool(start_pool(shared_processes, env), folder)


@pytest.fixture
def pool(sharing: Processes, shared_pool: Pool) -> Pool:
    """The shared pool, its body log emptied of an earlier test's lines."""
    (shared_pool.folder / "bodies.log").unlink(missing_ok=True)
    return shared_pool


def test_buffer_all_runs_every_occurrence_due_during_a_run_after_it_in_order(
    owner: Any, pool: Pool
) -> None:
    scheduler, tmp_path = pool.scheduler, pool.folder
    # 1.5 s: each run outlasts the interval, so one or two occurrences come due during it.
    job = create_job(owner=owner, name="all", task=sleep_noting.name, kwargs={"seconds": 1.5},
                     every="PT1S", overlap="buffer_all", misfire="skip",
                     now=timezone.now())  # fmt: skip
    runs = run_then_pause(
        job,
        scheduler=scheduler,
        until=lambda: statuses(job, ExecutionStatus.COMPLETED)() >= 3,
        message="three runs of a 1.5 s body due every second complete",
    )
    assert_every_occurrence_once(runs, timedelta(seconds=1))
    assert {run.status for run in runs} == {ExecutionStatus.COMPLETED}, "every one ran"
    assert_one_at_a_time_in_order(runs)
    ends = [line for line in body_log(tmp_path)() if line.startswith("end ")]
    assert ends == [f"end {run.task_id}" for run in runs]


def test_buffer_one_runs_the_latest_occurrence_due_during_a_run_and_supersedes_the_rest(
    owner: Any, pool: Pool
) -> None:
    scheduler = pool.scheduler
    # 2 s: at least two occurrences come due while each run goes on, so every run leaves at
    # least one behind it superseded.
    job = create_job(owner=owner, name="one", task=sleep_noting.name, kwargs={"seconds": 2},
                     every="PT1S", overlap="buffer_one", misfire="skip",
                     now=timezone.now())  # fmt: skip
    runs = run_then_pause(
        job,
        scheduler=scheduler,
        until=lambda: statuses(job, ExecutionStatus.COMPLETED)() >= 3,
        message="three runs of a 2 s body due every second complete",
    )
    assert_every_occurrence_once(runs, timedelta(seconds=1))
    assert {run.status for run in runs} <= {ExecutionStatus.COMPLETED, ExecutionStatus.SUPERSEDED}
    ran = [run for run in runs if run.status == ExecutionStatus.COMPLETED]
    superseded = [run for run in runs if run.status == ExecutionStatus.SUPERSEDED]
    assert_one_at_a_time_in_order(ran)
    # The occurrences due before the scheduler's first claim are superseded by the run it made;
    # after that, a 2 s body due every second leaves occurrences behind each run.
    assert any(run.scheduled_for > ran[0].scheduled_for for run in superseded)
    for run in superseded:
        # Superseded by the first run after it, which ran in its place; it never ran itself.
        winner = next(r for r in ran if r.scheduled_for > run.scheduled_for)
        assert run.last_error == overlaps.superseded_note(winner.scheduled_for)
        assert not run.attempts.exists()


def test_cancel_other_stops_the_running_one_when_the_next_occurrence_comes_due(
    owner: Any, pool: Pool
) -> None:
    scheduler, tmp_path = pool.scheduler, pool.folder
    # A 3 s body due every second: the next occurrence comes due at least 2 s before a run
    # would end (a 6 s body due every 2 s had 4 s), time for the claim that cancels it and the
    # stop signal; the last run, with no successor, ends after 3 s.
    job = create_job(owner=owner, name="cancel", task=sleep_noting.name,
                     kwargs={"seconds": 3}, every="PT1S", overlap="cancel_other",
                     misfire="skip", timeout=30, now=timezone.now())  # fmt: skip
    bodies = body_log(tmp_path)
    runs = run_then_pause(
        job,
        scheduler=scheduler,
        until=lambda: statuses(job, ExecutionStatus.CANCELLED)() >= 3,
        message="three runs of a 3 s body due every second are cancelled by the next",
    )
    assert_every_occurrence_once(runs, timedelta(seconds=1))
    cancelled = [run for run in runs if run.status == ExecutionStatus.CANCELLED]
    # Every run but the last was cancelled by the occurrence after it (or, had the scheduler
    # fallen a whole interval behind, superseded by a later one without running).
    for run, after in itertools.pairwise(runs):
        if run.status == ExecutionStatus.CANCELLED:
            winner = next(r for r in runs if r.scheduled_for > run.scheduled_for
                          and r.status != ExecutionStatus.SUPERSEDED)  # fmt: skip
            assert run.last_error == overlaps.cancelled_note(winner.scheduled_for)
            outcomes = [a.outcome for a in run.attempts.all()]
            assert outcomes in ([], [AttemptOutcome.CANCELLED])
        else:
            assert run.status == ExecutionStatus.SUPERSEDED, (run.status, after.status)
    assert runs[-1].status == ExecutionStatus.COMPLETED, "the last, with no successor, ends"
    assert len(cancelled) >= 3
    started = [run for run in cancelled if run.attempts.exists()]
    assert started, "the next occurrence cancelled runs that were running"
    # Each body that was running got the soft time limit's exception and cleaned up; none of
    # them ended on its own, and none is recorded as completed.
    wait_for(
        lambda: {f"cleanup {run.task_id}" for run in started} <= set(bodies()),
        timeout=SLOW,
        message="every stopped body cleaned up",
    )
    for run in started:
        assert f"end {run.task_id}" not in bodies()
    assert_started_once(runs)


def assert_started_once(runs: list[Execution]) -> None:
    for run in runs:
        assert run.attempts.count() <= 1, f"{run.scheduled_for} started twice"


@pytest.mark.usefixtures("shared_processes_stopped")
def test_a_cancelled_body_that_swallows_the_signal_is_fenced_and_never_recorded_as_done(
    owner: Any, processes: Processes, env: dict[str, str], tmp_path: Path
) -> None:
    """A body that catches the soft time limit's exception and goes on: its heartbeat finds
    the run taken, the lease fence stops it, and the run stays cancelled.

    Heartbeats every 0.5 s (process_env's 1 s and this one both fit three beats in the fence
    window, FENCE_AT of STALE_AFTER 10 s): a cancelled body is fenced at the next beat, within
    half a second. A 3.5 s body due every second is cancelled about 1 s after its start, so the
    beat that fences it comes 2 s before it would end (an 8 s body due every 3 s with a beat
    every second had 4 s), and the last run, with no successor, ends after 3.5 s.
    """
    env = {**env, "SCHEDULING_HEARTBEAT_INTERVAL": "0.5"}
    scheduler = start_pool(processes, env)
    job = create_job(owner=owner, name="stubborn", task=sleep_ignoring_stop.name,
                     kwargs={"seconds": 3.5}, every="PT1S", overlap="cancel_other",
                     misfire="skip", timeout=30, now=timezone.now())  # fmt: skip
    bodies = body_log(tmp_path)
    runs = run_then_pause(
        job,
        scheduler=scheduler,
        until=lambda: (
            Execution.objects.filter(
                job=job, status=ExecutionStatus.CANCELLED, attempts__isnull=False
            ).count()
            >= 2
        ),
        message="two running bodies that ignore the stop are cancelled by the next occurrence",
    )
    assert_every_occurrence_once(runs, timedelta(seconds=1))
    started = [
        run for run in runs if run.status == ExecutionStatus.CANCELLED and run.attempts.exists()
    ]
    assert len(started) >= 2
    assert all(run.status != ExecutionStatus.COMPLETED for run in runs[:-1])
    wait_for(
        lambda: {f"fenced {run.task_id}" for run in started} <= set(bodies()),
        timeout=SLOW,
        message="every body that ignored the stop is fenced",
    )
    for run in started:
        # The stop signal and the fence race: whichever reaches the body first, it ends fenced
        # (a body that saw the signal first swallowed it before the fence came).
        lines = bodies()
        if f"ignored {run.task_id}" in lines:
            assert lines.index(f"ignored {run.task_id}") < lines.index(f"fenced {run.task_id}")
        assert f"end {run.task_id}" not in lines
        assert [a.outcome for a in run.attempts.all()] == [AttemptOutcome.CANCELLED]
        assert Execution.objects.get(pk=run.pk).status == ExecutionStatus.CANCELLED
    assert_started_once(runs)
