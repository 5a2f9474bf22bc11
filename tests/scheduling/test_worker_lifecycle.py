"""The execution lifecycle on real ``celery worker`` processes, PostgreSQL and Redis.

Every promise here is checked on the rows the signal receivers write: the history of a run that
completed, failed, retried (by an error or by ``self.retry()``), timed out, or resumed from a
checkpoint after its worker was killed. Retries are rows that the scheduler process publishes
again; the broker never holds an ETA message for them.

The two tasks below exist for these tests only. Workers load them with ``-I`` (this module) and
the scheduler imports them too, because it checks a job's target before it claims the job.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
from billiard.exceptions import SoftTimeLimitExceeded
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.api import Fenced
from scheduling.models import Attempt, Execution, ExecutionStatus, Job
from scheduling.worker.heartbeat import HeartbeatThread
from scheduling.worker.taskbase import schedulable_task
from tests.conftest import celery_worker_command, scheduler_command, wait_for
from tests.factories import create_job
from tests.polling import logged

pytestmark = [pytest.mark.spread, pytest.mark.django_db(transaction=True)]

logger = logging.getLogger("scheduling")

#: Deadlines are generous: other suites load this 2-core machine at the same time.
SLOW = 60.0

#: The scheduler's longest sleep in the tests that wait for it to publish a retry or reap a
#: run (SCHEDULING_MAX_SLEEP, 1 s by default): a retry falls due between two ticks, and the
#: tick that publishes it comes at most this long after its retry_at.
TICK = "0.2"
#: The retry backoff of the retry tests (SCHEDULING_RETRY_BACKOFF_BASE and _CAP): the same
#: shape as the engine's default, doubling from the base and capped on the third retry
#: (0.2, 0.4, 0.4 s before jitter), kept short because every test waits through it three times.
BACKOFF = (0.2, 0.4)
#: The heartbeat interval of the heartbeat and checkpoint tests (SCHEDULING_HEARTBEAT_INTERVAL;
#: process_env's is 1 s). docs/operations.md asks for at least three beats in the fence window,
#: FENCE_AT (0.5) of STALE_AFTER: 0.5 s fits any STALE_AFTER from 3 s.
BEAT = 0.5


def retry_env(process_env: dict[str, str], **knobs: str) -> dict[str, str]:
    """``process_env`` with the short backoff and tick of the retry tests, and ``knobs``."""
    base, cap = BACKOFF
    return {
        **process_env,
        "SCHEDULING_MAX_SLEEP": TICK,
        "SCHEDULING_RETRY_BACKOFF_BASE": str(base),
        "SCHEDULING_RETRY_BACKOFF_CAP": str(cap),
        **{f"SCHEDULING_{name}": value for name, value in knobs.items()},
    }


# --- tasks for these tests only -------------------------------------------------------------


@schedulable_task(name="tests.lifecycle.retry_itself", bind=True)
def retry_itself(self: Any) -> None:
    """Ask for another attempt the Celery way, with the cause attached."""
    raise self.retry(exc=RuntimeError("the task asked to be retried"))


@schedulable_task(name="tests.lifecycle.ignore_soft_limit", bind=True)
def ignore_soft_limit(self: Any, seconds: float = 30.0) -> float:
    """Swallow the soft time limit, so only the hard limit (a killed pool process) stops it.

    A fence is obeyed, as the docs ask of every body: once the hard limit has ended the run,
    the pool process may still beat once before it is killed, find the run no longer its own
    and fence the body (``Fenced`` is a ``SoftTimeLimitExceeded``).
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            time.sleep(0.2)
        except Fenced:
            raise
        except SoftTimeLimitExceeded:
            logger.info("tests.soft_limit_ignored execution=%s", self.execution_id)
    return seconds


# --- helpers shared with test_worker_crashes ------------------------------------------------


def worker_command(
    name: str,
    *,
    concurrency: int = 1,
    pool: str = "prefork",
    queues: str = "celery",
    test_tasks: bool = False,
) -> list[str]:
    command = celery_worker_command(name=name, concurrency=concurrency, pool=pool, queues=queues)
    if test_tasks:
        command += ["-I", __name__]
    return command


def scheduler_with_test_tasks() -> list[str]:
    """``manage.py runscheduler``, in a process that has also registered this module's tasks."""
    code = (
        "import os, django;"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings');"
        f"django.setup(); import {__name__};"
        "from django.core.management import call_command; call_command('runscheduler')"
    )
    return [sys.executable, "-c", code]


def launch_worker(processes: Any, env: dict[str, str], name: str, **options: Any) -> Any:
    return processes.start(worker_command(name, **options), env=env, name=name)


def wait_ready(processes: Any, *workers: Any) -> None:
    """Wait until every worker consumes (its ``worker_ready`` receiver logged)."""
    for worker in workers:
        wait_for(
            lambda w=worker: "worker.ready" in processes.log_of(w) or w.poll() is not None,
            timeout=SLOW,
            message="the worker is ready",
        )
        assert worker.poll() is None, processes.log_of(worker)


def start_worker(processes: Any, env: dict[str, str], name: str, **options: Any) -> Any:
    worker = launch_worker(processes, env, name, **options)
    wait_ready(processes, worker)
    return worker


def due_job(owner: Any, name: str, task: str, **options: Any) -> Job:
    """A job due now that runs every hour, so the test sees only its first occurrence."""
    options.setdefault("every", "PT1H")
    return create_job(owner=owner, name=name, task=task, now=timezone.now(), **options)


def execution_of(job: Job) -> Execution | None:
    return Execution.objects.filter(job=job).order_by("scheduled_for").first()


def finished(job: Job, status: str = ExecutionStatus.COMPLETED) -> Callable[[], Any]:
    def check() -> Execution | None:
        return Execution.objects.filter(job=job, status=status).first()

    return check


def running_attempt(job: Job, number: int = 1) -> Callable[[], Any]:
    def check() -> Attempt | None:
        return Attempt.objects.filter(execution__job=job, number=number, outcome="running").first()

    return check


def broker_messages(env: dict[str, str]) -> list[dict[str, Any]]:
    """Every task message this test's broker holds: waiting in a queue or delivered, unacked.

    An ETA message (such as Celery's own ``retry``) would sit in the unacked hash of the
    worker that reserved it, so both places are read.
    """
    client = redis.Redis.from_url(env["CELERY_BROKER_URL"])
    prefix = env["CELERY_REDIS_KEY_PREFIX"]
    raw: list[Any] = []
    for key in client.scan_iter(match=f"{prefix}*"):
        kind = client.type(key)
        if kind == b"list":
            raw.extend(json.loads(item) for item in client.lrange(key, 0, -1))
        elif kind == b"hash" and key.endswith(b"unacked"):
            raw.extend(json.loads(item)[0] for item in client.hvals(key))
    return [item for item in raw if isinstance(item, dict) and "headers" in item]


def log_lines(text: str, pattern: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(pattern, line)]


def succeeded_logged(processes: Any, worker: Any, task_id: Any) -> str:
    """Wait for the worker's ``succeeded`` line of ``task_id``; return its log.

    Celery logs it after the ``task_success`` receiver has completed the execution, so the
    line may come a moment after the row a test waited for.
    """
    return logged(
        lambda: processes.log_of(worker),
        rf"\[{task_id}\] succeeded",
        timeout=SLOW,
        message=f"the worker logs task {task_id} succeeded",
    )


def endings_logged(processes: Any, worker: Any, jobs: list[Job], count: int) -> str:
    """Wait until the worker has logged ``count`` attempt endings (``execution.retry`` and
    ``execution.failed`` lines) of each job's execution; return its log.

    Each line is written right after the row it reports, so the last one may come a moment
    after the failed row a test waited for.
    """
    for job in jobs:
        execution = execution_of(job)
        assert execution is not None
        logged(
            lambda: processes.log_of(worker),
            rf"execution\.(retry|failed) execution={execution.pk} ",
            count=count,
            timeout=SLOW,
            message=f"the worker logs {count} endings of execution {execution.pk}",
        )
    return str(processes.log_of(worker))


# --- A. history from signals ----------------------------------------------------------------


@pytest.mark.slow
def test_completed_run_records_its_history(
    owner: Any, processes: Any, process_env: dict[str, str]
) -> None:
    job = due_job(owner, "completes", "scheduling.diagnostics.noop")
    start_worker(processes, process_env, "done")
    processes.start(scheduler_command(), env=process_env, name="scheduler")

    execution = wait_for(finished(job), timeout=SLOW, message="the occurrence completes")

    assert execution.worker.startswith("done@")
    assert execution.started_at is not None and execution.finished_at is not None
    assert execution.started_at <= execution.finished_at
    assert execution.retry_count == 0 and execution.last_error == ""
    (attempt,) = execution.attempts.all()
    assert attempt.outcome == "completed" and attempt.number == 1
    assert attempt.worker == execution.worker and attempt.pid
    assert attempt.finished_at == execution.finished_at
    job.refresh_from_db()
    assert job.execute_count == 1
    assert job.last_keepalive_at is not None and job.last_keepalive_at >= execution.started_at
    assert job.current_execution_id is None


def send_message(env: dict[str, str], task: str, **options: Any) -> Any:
    """Publish a task message from this process to the test's own (prefixed) broker keys."""
    from config.celery import app

    transport = {
        **app.conf.broker_transport_options,
        "global_keyprefix": env["CELERY_REDIS_KEY_PREFIX"],
    }
    with app.connection_for_write(env["CELERY_BROKER_URL"], transport_options=transport) as conn:
        return app.send_task(task, connection=conn, **options)


RETRY_LINE = re.compile(
    r"execution\.retry execution=(?P<execution>\d+) outcome=\w+ retry_count=(?P<count>\d+) "
    r"retry_at=(?P<at>.+?) error="
)


def logged_retries(text: str, execution_id: int) -> dict[int, Any]:
    """retry_count -> retry_at, as the worker logged them when it failed an attempt."""
    from datetime import datetime

    return {
        int(m["count"]): datetime.fromisoformat(m["at"])
        for m in RETRY_LINE.finditer(text)
        if int(m["execution"]) == execution_id
    }


def assert_retried_then_failed(
    execution: Execution, *, outcome: str, error: str, log: str, backoff: tuple[float, float]
) -> None:
    """Three retries with capped exponential backoff, then failed; every attempt's error kept."""
    from scheduling.timing.schedules import retry_delay

    assert execution.status == ExecutionStatus.FAILED
    assert execution.retry_count == 3 and execution.retry_at is None
    attempts = list(execution.attempts.order_by("number"))
    assert [a.number for a in attempts] == [1, 2, 3, 4]
    assert [a.outcome for a in attempts] == [outcome] * 4
    for attempt in attempts:
        assert attempt.error.startswith(error), attempt.error
        assert attempt.finished_at is not None
    assert execution.last_error == attempts[-1].error
    base, cap = backoff
    planned = logged_retries(log, execution.pk)
    assert sorted(planned) == [1, 2, 3], log
    for count in (1, 2, 3):
        delay = retry_delay(attempt=count, base=base, cap=cap, key=execution.pk)
        assert delay <= timedelta(seconds=cap)
        failed, retried = attempts[count - 1], attempts[count]
        assert planned[count] - failed.finished_at == delay
        # Started by the republished row, never before its retry_at.
        assert retried.started_at >= planned[count]


# --- A. failures and retries ----------------------------------------------------------------


@pytest.mark.slow
def test_failures_retry_from_rows_with_backoff_then_fail(
    owner: Any, processes: Any, process_env: dict[str, str]
) -> None:
    env = retry_env(process_env)
    failing = due_job(owner, "fails", "scheduling.diagnostics.fail", kwargs={"message": "boom"})
    permanent = due_job(
        owner,
        "fails-for-good",
        "scheduling.diagnostics.fail",
        kwargs={"message": "cannot work", "permanent": True},
    )
    asks = due_job(owner, "asks-for-retry", "tests.lifecycle.retry_itself")
    processes.start(scheduler_with_test_tasks(), env=env, name="scheduler")
    worker = start_worker(processes, env, "failing", concurrency=3, test_tasks=True)

    seen: list[dict[str, Any]] = []
    waits_seen = 0

    def all_failed() -> bool:
        nonlocal waits_seen
        seen.extend(broker_messages(env))
        rows = list(Execution.objects.filter(job__in=[failing, permanent, asks]))
        waits_seen += sum(row.status == ExecutionStatus.RETRY for row in rows)
        return len(rows) == 3 and all(row.status == ExecutionStatus.FAILED for row in rows)

    wait_for(all_failed, timeout=SLOW, interval=0.05, message="all three executions fail")
    log = endings_logged(processes, worker, [failing, asks], count=1 + 3)

    # A retryable error: 1 + 3 attempts, each error kept with its class and a short traceback.
    execution = execution_of(failing)
    assert execution is not None
    assert_retried_then_failed(
        execution, outcome="failed", error="RuntimeError: boom\n", log=log, backoff=BACKOFF
    )
    for attempt in execution.attempts.all():
        assert 'diagnostics.py", line' in attempt.error and "raise RuntimeError" in attempt.error
        assert len(attempt.error.splitlines()) <= 1 + 6 * 2  # the head and at most six frames

    # A permanent error fails at once.
    execution = execution_of(permanent)
    assert execution is not None
    assert execution.status == ExecutionStatus.FAILED and execution.retry_count == 0
    (attempt,) = execution.attempts.all()
    assert attempt.outcome == "failed"
    assert attempt.error.startswith("PermanentError: cannot work\n")
    assert execution.last_error == attempt.error

    # self.retry() inside the task is counted exactly like an error.
    execution = execution_of(asks)
    assert execution is not None
    assert_retried_then_failed(
        execution,
        outcome="failed",
        error="RuntimeError: the task asked to be retried",
        log=log,
        backoff=BACKOFF,
    )

    # Every retry was a row the scheduler published again: the broker never held an ETA
    # message or a message of Celery's own retry (``retries`` > 0), also while rows waited.
    assert waits_seen > 0
    assert all(m["headers"].get("eta") is None for m in seen), seen
    assert all(m["headers"].get("retries", 0) == 0 for m in seen), seen
    for job in (failing, permanent, asks):
        job.refresh_from_db()
        assert job.execute_count == 0 and job.current_execution_id is None


# --- B. timeouts ----------------------------------------------------------------------------


@pytest.mark.slow
def test_attempts_past_their_timeout_are_stopped_retried_then_failed(
    owner: Any, processes: Any, process_env: dict[str, str]
) -> None:
    """Soft limit (the task is interrupted) and hard limit (its pool process is killed).

    Celery 5.7 sends ``task_failure`` twice for a hard limit, from the worker's main process;
    the second finds the attempt already ended and changes nothing.
    """
    # The shortest limits a job and the knob take (whole seconds): each attempt is stopped at
    # 1 s, and the hard limit comes one second later, so the body that swallows the soft
    # limit is seen doing it first.
    env = retry_env(process_env, HARD_TIMEOUT_GRACE="1")
    soft = due_job(
        owner, "sleeps-too-long", "scheduling.diagnostics.sleep", kwargs={"seconds": 30}, timeout=1
    )
    hard = due_job(
        owner,
        "ignores-its-limit",
        "tests.lifecycle.ignore_soft_limit",
        kwargs={"seconds": 30},
        timeout=1,
    )
    processes.start(scheduler_with_test_tasks(), env=env, name="scheduler")
    # A third pool process: an attempt published again need not wait while the pool replaces
    # the process a hard limit killed.
    worker = start_worker(processes, env, "timeouts", concurrency=3, test_tasks=True)

    def both_failed() -> bool:
        rows = Execution.objects.filter(job__in=[soft, hard], status=ExecutionStatus.FAILED)
        return rows.count() == 2

    wait_for(both_failed, timeout=SLOW * 2, message="both executions time out four times")
    log = endings_logged(processes, worker, [soft, hard], count=4)

    execution = execution_of(soft)
    assert execution is not None
    assert_retried_then_failed(
        execution,
        outcome="timeout",
        error="timeout: SoftTimeLimitExceeded",
        log=log,
        backoff=BACKOFF,
    )
    for attempt in execution.attempts.all():
        # Stopped at its 1 s limit, with the 1.5 s of slack it had at a limit of 2 s.
        assert attempt.finished_at - attempt.started_at < timedelta(seconds=1 + 1.5)

    execution = execution_of(hard)
    assert execution is not None
    assert_retried_then_failed(
        execution,
        outcome="timeout",
        error="timeout: TimeLimitExceeded",
        log=log,
        backoff=BACKOFF,
    )
    hard_kills = log_lines(log, rf"Hard time limit \(2s\) exceeded for .*{execution.task_id}")
    assert len(hard_kills) == 4, log
    assert len(log_lines(log, r"tests\.soft_limit_ignored")) == 4
    # One ending recorded per attempt although task_failure fired twice for each.
    endings = log_lines(log, rf"execution\.(retry|failed) execution={execution.pk} ")
    assert len(endings) == 4, endings


# --- C. heartbeats and keep-alive -----------------------------------------------------------


@pytest.mark.slow
def test_heartbeat_and_keepalive_advance_while_a_task_runs(
    owner: Any, processes: Any, process_env: dict[str, str]
) -> None:
    """With HEARTBEAT_INTERVAL=0.5 a running execution's heartbeat moves every half second or so.

    The gaps must stay well under STALE_AFTER (10 s here), or the reaper would take a live
    execution away; the job's keep-alive moves in the same statement. The sleep lasts seven
    intervals (3.5 s), room for the start and four beats.
    """
    env = {**process_env, "SCHEDULING_HEARTBEAT_INTERVAL": str(BEAT)}
    job = due_job(owner, "sleeps", "scheduling.diagnostics.sleep", kwargs={"seconds": 7 * BEAT})
    processes.start(scheduler_command(), env=env, name="scheduler")
    start_worker(processes, env, "beats")
    attempt = wait_for(running_attempt(job), timeout=SLOW, message="the sleep starts")

    beats: list[tuple[Any, Any]] = []

    def four_beats() -> bool:
        row = Execution.objects.filter(pk=attempt.execution_id).values(
            "status", "last_heartbeat_at", "job__last_keepalive_at"
        )[0]
        if row["status"] == ExecutionStatus.RUNNING:
            pair = (row["last_heartbeat_at"], row["job__last_keepalive_at"])
            if not beats or beats[-1] != pair:
                beats.append(pair)
        return len(beats) >= 5

    wait_for(four_beats, timeout=SLOW, interval=0.05, message="four heartbeats after the start")
    heartbeats = [beat for beat, _ in beats]
    # Every beat stamps the job's keep-alive with it (the start, the first proof of life,
    # stamps only the execution: one write less on every task's way in).
    assert all(beat == keepalive for beat, keepalive in beats[1:]), beats
    # The start is the first proof of life, stamped on the database's clock (the lease).
    assert timedelta(0) <= heartbeats[0] - attempt.started_at < timedelta(seconds=1)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(heartbeats)]
    # 0.9 to 4 intervals: the bounds of 0.9 s and 4 s this test had at an interval of 1 s.
    assert all(0.9 * BEAT <= gap < 4.0 * BEAT for gap in gaps), gaps

    execution = wait_for(finished(job), timeout=SLOW, message="the sleep completes")
    assert execution.attempts.get().outcome == "completed"
    assert execution.last_heartbeat_at >= heartbeats[-1]


@pytest.mark.slow
def test_one_heartbeat_statement_serves_every_task_of_a_process(
    owner: Any, processes: Any, process_env: dict[str, str]
) -> None:
    """Eight sleeps on one thread-pool worker share each beat: one UPDATE, one timestamp.

    Each sleep lasts six heartbeat intervals (3 s at 0.5 s), room for all eight to start and
    for a beat after the last start while every one still runs.
    """
    env = {**process_env, "SCHEDULING_HEARTBEAT_INTERVAL": str(BEAT)}
    jobs = [
        due_job(owner, f"sleep-{n}", "scheduling.diagnostics.sleep", kwargs={"seconds": 6 * BEAT})
        for n in range(8)
    ]
    processes.start(scheduler_command(), env=env, name="scheduler")
    start_worker(processes, env, "threads", pool="threads", concurrency=8)

    def all_running() -> bool:
        running = Execution.objects.filter(job__in=jobs, status=ExecutionStatus.RUNNING)
        return running.count() == 8

    wait_for(all_running, timeout=SLOW, interval=0.05, message="all eight sleeps run at once")

    def shared_beat() -> Any:
        rows = list(
            Execution.objects.filter(job__in=jobs).values(
                "status", "started_at", "last_heartbeat_at", "job__last_keepalive_at"
            )
        )
        stamps = {row["last_heartbeat_at"] for row in rows}
        keepalives = {row["job__last_keepalive_at"] for row in rows}
        latest_start = max(row["started_at"] for row in rows)
        running = all(row["status"] == ExecutionStatus.RUNNING for row in rows)
        if running and len(stamps) == 1 and stamps == keepalives and stamps.pop() > latest_start:
            return rows
        return None

    wait_for(shared_beat, timeout=SLOW, interval=0.05, message="one beat stamps all eight")

    def all_completed() -> bool:
        done = Execution.objects.filter(job__in=jobs, status=ExecutionStatus.COMPLETED)
        return done.count() == 8

    wait_for(all_completed, timeout=SLOW, message="all eight sleeps complete")


def test_a_beat_is_one_update_whatever_the_number_of_executions(
    owner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proof of the per-process cost: the same statements for 1 and for 50 executions."""
    job = due_job(owner, "many", "scheduling.diagnostics.noop")
    start = timezone.now() - timedelta(minutes=5)
    rows = Execution.objects.bulk_create(
        Execution(
            job=job,
            task=job.task,
            scheduled_for=start + timedelta(seconds=n),
            status=ExecutionStatus.RUNNING,
            started_at=start,
            last_heartbeat_at=start,
        )
        for n in range(50)
    )
    statements: dict[int, list[str]] = {}
    for size in (1, 50):
        heartbeat = HeartbeatThread()
        monkeypatch.setattr(heartbeat, "_run", lambda: None)  # beat by hand, not in a thread
        for row in rows[:size]:
            heartbeat.track(row.pk)
        with CaptureQueriesContext(connection) as queries:
            assert heartbeat.beat_once() == size
        statements[size] = [q["sql"] for q in queries.captured_queries]
        beaten = Execution.objects.filter(pk__in=[r.pk for r in rows], last_heartbeat_at__gt=start)
        assert beaten.count() == size

    assert len(statements[1]) == len(statements[50]), statements
    updates = [sql for sql in statements[50] if sql.startswith("UPDATE")]
    execution_updates = [sql for sql in updates if '"scheduling_execution"' in sql.split("SET")[0]]
    assert len(execution_updates) == 1, updates
    job.refresh_from_db()
    assert job.last_keepalive_at is not None and job.last_keepalive_at > start


# --- E. checkpoints -------------------------------------------------------------------------


@pytest.mark.slow
def test_a_retried_attempt_resumes_after_the_last_checkpointed_step(
    owner: Any, processes: Any, process_env: dict[str, str]
) -> None:
    """Seed 002's PARAMETER: the worker dies after step 2; the next attempt runs 3 and 4 only.

    Steps of 1 s; the killed run is reaped after a lease (STALE_AFTER) of 5 s, renewed every
    half second (ten beats to a lease, as process_env's 1 s and 10 s); the scheduler ticks
    every 0.2 s. The second worker starts once the first is dead, and is ready well before
    the reaped run is published again.
    """
    env = {
        **process_env,
        "SCHEDULING_HEARTBEAT_INTERVAL": str(BEAT),
        "SCHEDULING_STALE_AFTER": "5",
        "SCHEDULING_MAX_SLEEP": TICK,
    }
    job = due_job(
        owner, "four-steps", "scheduling.diagnostics.steps", kwargs={"count": 4, "seconds": 1}
    )
    processes.start(scheduler_command(), env=env, name="scheduler")
    first = start_worker(processes, env, "first")
    attempt = wait_for(running_attempt(job), timeout=SLOW, message="the steps start")

    def two_steps_saved() -> bool:
        execution = Execution.objects.get(pk=attempt.execution_id)
        return execution.checkpoint == {"done": [1, 2]}

    wait_for(two_steps_saved, timeout=SLOW, interval=0.02, message="step 2 is checkpointed")
    # The body logs a step just after it saves it: the line is in the log before the kill.
    logged(
        lambda: processes.log_of(first),
        rf"diagnostics\.step execution={attempt.execution_id} step=2$",
        timeout=SLOW,
    )
    processes.kill(first)  # SIGKILL to the worker's whole process group, mid step 3
    first.wait(timeout=10)
    # Started after the kill, so its boot never competes with the first worker's step 3 for
    # the cores; it is up well within the lease the reaper waits out.
    second = launch_worker(processes, env, "second")
    wait_ready(processes, second)

    execution = wait_for(finished(job), timeout=SLOW, message="the retried attempt completes")
    assert execution.checkpoint == {"done": [1, 2, 3, 4]}
    assert execution.retry_count == 1
    assert [a.outcome for a in execution.attempts.order_by("number")] == ["abandoned", "completed"]
    assert execution.worker.startswith("second@")

    step = rf"diagnostics\.step execution={execution.pk} step="
    before, after = processes.log_of(first), succeeded_logged(processes, second, execution.task_id)
    assert len(log_lines(before, step + "[12]$")) == 2 and not log_lines(before, step + "[34]$")
    assert not log_lines(after, step + "[12]$")
    assert len(log_lines(after, step + "3$")) == 1 and len(log_lines(after, step + "4$")) == 1
    assert log_lines(after, r"diagnostics\.steps\[.*\] succeeded in .*: \[1, 2, 3, 4\]")


# --- F. ad-hoc calls ------------------------------------------------------------------------


@pytest.mark.slow
def test_ad_hoc_calls_are_recorded_only_when_asked(
    processes: Any, process_env: dict[str, str]
) -> None:
    recording = {**process_env, "SCHEDULING_RECORD_ADHOC": "true"}
    on = launch_worker(processes, recording, "recording", queues="recorded")
    off = launch_worker(processes, process_env, "plain", queues="plain")
    wait_ready(processes, on, off)

    recorded = send_message(process_env, "scheduling.diagnostics.noop", queue="recorded")
    plain = send_message(process_env, "scheduling.diagnostics.noop", queue="plain")

    execution = wait_for(
        lambda: Execution.objects.filter(
            task_id=recorded.id, status=ExecutionStatus.COMPLETED
        ).first(),
        timeout=SLOW,
        message="the recorded ad-hoc call completes",
    )
    assert execution.job_id is None
    assert execution.task == "scheduling.diagnostics.noop"
    assert execution.worker.startswith("recording@")
    assert [a.outcome for a in execution.attempts.all()] == ["completed"]
    succeeded_logged(processes, on, recorded.id)

    wait_for(
        lambda: log_lines(processes.log_of(off), rf"noop\[{plain.id}\] succeeded"),
        timeout=SLOW,
        message="the unrecorded ad-hoc call runs",
    )
    assert not Execution.objects.filter(task_id=plain.id).exists()
    assert Execution.objects.count() == 1
