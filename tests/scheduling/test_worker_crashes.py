"""Crashes under a running execution, on real ``celery worker`` processes, PostgreSQL and Redis.

Whatever dies (the whole worker, only its pool process, the worker on a warm shutdown, the
database) or arrives twice (the same message while the first run is alive), each occurrence is
completed exactly once and its history says what happened. A task that exceeds its timeout on
every attempt (three retries, then failed, each attempt's error kept) is covered by
``test_worker_lifecycle.test_attempts_past_their_timeout_are_stopped_retried_then_failed``.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import kombu
import psycopg
import pytest
from django.utils import timezone

from scheduling.models import Execution, ExecutionStatus
from scheduling.rules.registry import EXECUTION_HEADER
from tests.conftest import database_engine, free_port, scheduler_command, wait_for
from tests.polling import logged
from tests.private_mariadb import PrivateMariaDB, private_mariadb  # noqa: F401 (a fixture)
from tests.scheduling.test_worker_lifecycle import (
    SLOW,
    broker_messages,
    due_job,
    finished,
    launch_worker,
    log_lines,
    running_attempt,
    send_message,
    start_worker,
    succeeded_logged,
    wait_ready,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.spread,
    pytest.mark.mariadb_faults,
    pytest.mark.django_db(transaction=True),
]


def completed_runs(processes: Any, execution: Execution) -> list[str]:
    """The "succeeded" lines of this execution's task id, across every worker's log.

    Celery logs the line after the execution's row is completed: this waits for the first one.
    """
    logged(
        lambda: "\n".join(processes.log_of(child) for child, _ in processes.children),
        rf"\[{execution.task_id}\] succeeded",
        timeout=SLOW,
        message="a worker logs the run succeeded",
    )
    lines: list[str] = []
    for child, _ in processes.children:
        lines += log_lines(processes.log_of(child), rf"\[{execution.task_id}\] succeeded")
    return lines


# --- D1. a worker killed with SIGKILL -------------------------------------------------------


#: Whether kombu looks for a dead worker's unacknowledged messages soon after their visibility
#: timeout: 5.7 every ``unacked_restore_interval`` (1 s here). Earlier releases look when a
#: consumer starts polling, and then on every 10th call of a 10-second timer (100 s).
RESTORES_SOON = tuple(map(int, kombu.__version__.split(".")[:2])) >= (5, 7)


def test_a_killed_worker_s_execution_is_reaped_and_completed_by_another(
    owner: Any, processes: Any, process_env: dict[str, str]
) -> None:
    """Node loss: no signal fires; the stale heartbeat finds the attempt and a survivor runs it.

    The lease is 5 s, renewed every half second (ten beats to a lease, as in ``process_env``'s
    10 s and 1 s), so the survivor starts the run about 5 s after the kill. The dead worker's
    message stays unacked in Redis until the visibility timeout (6 s here) and is then
    delivered again; the claim absorbs it as a duplicate.
    """
    # The timeout plus its hard-kill grace stays under the visibility timeout, as validated.
    env = {
        **process_env,
        "CELERY_VISIBILITY_TIMEOUT": "6",
        "SCHEDULING_HARD_TIMEOUT_GRACE": "1",
        "SCHEDULING_STALE_AFTER": "5",
        "SCHEDULING_HEARTBEAT_INTERVAL": "0.5",
    }
    # Long enough to be killed mid-run (the kill follows the start at once); the survivor
    # runs it again in full.
    job = due_job(owner, "long", "scheduling.diagnostics.sleep", kwargs={"seconds": 3}, timeout=4)
    processes.start(scheduler_command(), env=env, name="scheduler")
    workers = {name: launch_worker(processes, env, name) for name in ("left", "right")}
    wait_ready(processes, *workers.values())
    attempt = wait_for(running_attempt(job), timeout=SLOW, message="the sleep starts")
    victim_name = attempt.worker.split("@")[0]
    victim = workers.pop(victim_name)
    (survivor_name,) = workers
    processes.kill(victim)  # SIGKILL to the whole process group: main process and pool
    victim.wait(timeout=10)
    assert any(
        m["headers"]["id"] == str(attempt.execution.task_id) for m in broker_messages(env)
    ), "the dead worker's message waits, unacked, for the visibility timeout"

    execution = wait_for(finished(job), timeout=SLOW, message="the survivor completes it")
    assert execution.worker.startswith(f"{survivor_name}@")
    assert execution.retry_count == 1
    first, second = execution.attempts.order_by("number")
    assert first.outcome == "abandoned" and first.worker == attempt.worker
    assert first.error.startswith(f"abandoned: worker {attempt.worker} sent no heartbeat")
    assert second.outcome == "completed" and second.worker == execution.worker

    # Redis redelivers the dead worker's message; it is acknowledged and ignored. kombu 5.7
    # looks for such messages every second here; before it, the survivor would look 100 s
    # after it started, so a worker started once the message is past its visibility timeout
    # (as after a deploy) looks at once, when it starts polling.
    if not RESTORES_SOON:
        visible_at = attempt.started_at + timedelta(seconds=int(env["CELERY_VISIBILITY_TIMEOUT"]))
        wait_for(lambda: timezone.now() > visible_at, timeout=SLOW, message="the timeout ends")
        wait_ready(processes, launch_worker(processes, env, "late"))
    wait_for(
        lambda: Execution.objects.get(pk=execution.pk).duplicates == 1,
        timeout=SLOW,
        message="the redelivered message is absorbed",
    )
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.COMPLETED and execution.attempts.count() == 2
    assert len(completed_runs(processes, execution)) == 1
    job.refresh_from_db()
    assert job.execute_count == 1


def test_a_killed_pool_process_is_reported_lost_and_its_execution_retried(
    owner: Any, processes: Any, process_env: dict[str, str]
) -> None:
    """Only the pool child dies: Celery's main process reports WorkerLostError at once.

    STALE_AFTER is long here so the reaper cannot be the one that notices.
    """
    env = {**process_env, "SCHEDULING_STALE_AFTER": "60"}
    # Killed right after its start; the retry runs it in full.
    job = due_job(owner, "child", "scheduling.diagnostics.sleep", kwargs={"seconds": 3})
    processes.start(scheduler_command(), env=env, name="scheduler")
    worker = start_worker(processes, env, "parent")
    attempt = wait_for(running_attempt(job), timeout=SLOW, message="the sleep starts")
    os.kill(attempt.pid, signal.SIGKILL)

    execution = wait_for(finished(job), timeout=SLOW, message="the retry completes")
    assert worker.poll() is None  # the worker itself lives on
    assert execution.retry_count == 1
    first, second = execution.attempts.order_by("number")
    assert first.outcome == "abandoned" and first.pid == attempt.pid
    assert "WorkerLostError" in first.error
    assert second.outcome == "completed" and second.pid != attempt.pid
    # Celery logs the lost pool process's error after it has reported the loss.
    logged(
        lambda: processes.log_of(worker),
        r"WorkerLostError",
        timeout=SLOW,
        message="the worker logs the WorkerLostError",
    )
    assert len(completed_runs(processes, execution)) == 1
    # The lost message was acknowledged (reject_on_worker_lost=False); the row was retried.
    # The retry's own message is acknowledged after its completion is written (acks_late).
    wait_for(
        lambda: not broker_messages(env),
        timeout=SLOW,
        message="every message is acknowledged",
    )
    job.refresh_from_db()
    assert job.execute_count == 1


# --- D2. warm shutdown ----------------------------------------------------------------------


def test_a_warm_shutdown_finishes_the_running_task(
    owner: Any, processes: Any, process_env: dict[str, str]
) -> None:
    """SIGTERM to the worker: it stops taking work, finishes the running task, and exits."""
    # The signal comes right after the start: the task runs on under the warm shutdown.
    job = due_job(owner, "warm", "scheduling.diagnostics.sleep", kwargs={"seconds": 3})
    processes.start(scheduler_command(), env=process_env, name="scheduler")
    stopping = start_worker(processes, process_env, "stopping")
    attempt = wait_for(running_attempt(job), timeout=SLOW, message="the sleep starts")
    os.kill(stopping.pid, signal.SIGTERM)
    spare = start_worker(processes, process_env, "spare")

    assert stopping.wait(timeout=SLOW) == 0
    execution = wait_for(finished(job), timeout=SLOW, message="the sleep completes")
    assert execution.worker == attempt.worker
    (only,) = execution.attempts.all()
    assert only.outcome == "completed"
    assert execution.retry_count == 0
    assert "Warm shutdown" in processes.log_of(stopping)
    assert len(completed_runs(processes, execution)) == 1
    assert not log_lines(processes.log_of(spare), str(execution.task_id))
    job.refresh_from_db()
    assert job.execute_count == 1


@pytest.mark.parametrize("how", ["cold", "group"])
def test_a_shutdown_that_stops_the_running_task_hands_it_back(
    owner: Any, processes: Any, process_env: dict[str, str], how: str
) -> None:
    """The pool process exits under the task: the attempt is interrupted and retried at once.

    - cold: SIGQUIT to the worker; Celery requeues the message (and the row is republished
      too: whichever arrives second is absorbed by the claim).
    - group: SIGTERM to the whole process group, as a service manager may send it; the pool
      process dies first, Celery acknowledges the message as WorkerLostError, and only the
      row (RETRY, due now) brings the execution back.
    """
    # The signal comes right after the start, under the task; the spare runs it in full.
    job = due_job(owner, "stopped", "scheduling.diagnostics.sleep", kwargs={"seconds": 3})
    processes.start(scheduler_command(), env=process_env, name="scheduler")
    stopping = start_worker(processes, process_env, "stopping")
    attempt = wait_for(running_attempt(job), timeout=SLOW, message="the sleep starts")
    if how == "cold":
        os.kill(stopping.pid, signal.SIGQUIT)
    else:
        processes.kill(stopping, signal.SIGTERM)
    stopping.wait(timeout=SLOW)
    task_id = str(attempt.execution.task_id)
    requeued = [
        m
        for m in broker_messages(process_env)
        if m["headers"]["id"] == task_id and m["headers"].get("redelivered")
    ]
    assert len(requeued) == (1 if how == "cold" else 0)
    spare = start_worker(processes, process_env, "spare")

    execution = wait_for(finished(job), timeout=SLOW, message="the spare worker completes it")
    assert execution.worker.startswith("spare@")
    first, second = execution.attempts.order_by("number")
    assert first.outcome == "interrupted" and first.worker == attempt.worker
    assert second.outcome == "completed"
    assert execution.retry_count == 0  # a shutdown is not the task's failure
    assert execution.duplicates <= (1 if how == "cold" else 0)
    if how == "group":
        assert log_lines(processes.log_of(stopping), "WorkerLostError")
    succeeded_logged(processes, spare, task_id)
    assert len(completed_runs(processes, execution)) == 1
    job.refresh_from_db()
    assert job.execute_count == 1


# --- D4. the same message twice -------------------------------------------------------------


def test_a_duplicate_message_for_a_running_execution_is_ignored(
    owner: Any, processes: Any, process_env: dict[str, str]
) -> None:
    job = due_job(owner, "twice", "scheduling.diagnostics.sleep", kwargs={"seconds": 4})
    processes.start(scheduler_command(), env=process_env, name="scheduler")
    worker = start_worker(processes, process_env, "twice", concurrency=2)
    attempt = wait_for(running_attempt(job), timeout=SLOW, message="the sleep starts")
    execution = attempt.execution

    send_message(
        process_env,
        job.task,
        kwargs=job.kwargs,
        queue=job.queue,
        task_id=str(execution.task_id),
        headers={EXECUTION_HEADER: execution.pk},
    )
    wait_for(
        lambda: Execution.objects.get(pk=execution.pk).duplicates == 1,
        timeout=SLOW,
        message="the duplicate is counted",
    )
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.RUNNING  # the first run is still alive

    execution = wait_for(finished(job), timeout=SLOW, message="the first run completes")
    (only,) = execution.attempts.all()
    assert only.outcome == "completed" and only.pk == attempt.pk
    assert execution.duplicates == 1
    # Each line comes right after the row it reports.
    logged(
        lambda: processes.log_of(worker),
        rf"execution\.duplicate execution={execution.pk} ",
        timeout=SLOW,
        message="the worker logs the duplicate",
    )
    log = succeeded_logged(processes, worker, execution.task_id)
    assert len(log_lines(log, rf"execution\.duplicate execution={execution.pk} ")) == 1
    assert len(log_lines(log, rf"execution\.started execution={execution.pk} ")) == 1
    assert len(log_lines(log, rf"diagnostics\.sleep\[{execution.task_id}\] received")) == 2
    assert len(completed_runs(processes, execution)) == 1
    job.refresh_from_db()
    assert job.execute_count == 1


# --- D5. the database restarts under a running worker ---------------------------------------

PG_BIN = max(
    Path("/usr/lib/postgresql").glob("*/bin"),
    key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
    default=Path("/usr/lib/postgresql/15/bin"),
)


class PrivatePostgres:
    """A PostgreSQL server of this test's own, on a spare port, that the test may stop."""

    def __init__(self, processes: Any, root: Path, env: dict[str, str]) -> None:
        self.processes = processes
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.env = {**env, "LC_ALL": "C"}
        self.server: Any = None
        #: More ``-c name=value`` settings for the server, set before ``start``.
        self.settings: list[str] = []
        #: Whether the server listens on TCP (the processes' way in) besides its Unix socket.
        self.tcp = True

    def url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def _as_postgres(self, program: str, *args: str) -> list[str]:
        return ["runuser", "-u", "postgres", "--", str(PG_BIN / program), *args]

    def initdb(self) -> None:
        command = self._as_postgres(
            "initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8"
        )
        child = self.processes.start(command, env=self.env, name="initdb")
        assert child.wait(timeout=SLOW) == 0, self.processes.log_of(child)

    def start(self, *, tcp: bool = True) -> None:
        """Start the server; with ``tcp`` False it listens on its Unix socket only, where only
        the test itself connects (``query``): no worker or scheduler can reach it."""
        self.tcp = tcp
        command = self._as_postgres(
            "postgres",
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-k",
            str(self.root),
            "-c",
            f"listen_addresses={'127.0.0.1' if tcp else ''}",
            "-c",
            "fsync=off",
            *(part for setting in self.settings for part in ("-c", setting)),
        )
        self.server = self.processes.start(command, env=self.env, name="postgres")
        wait_for(self.accepts, timeout=SLOW, message="the private PostgreSQL accepts connections")

    def connect(self, name: str) -> psycopg.Connection[Any]:
        if self.tcp:
            return psycopg.connect(self.url(name), connect_timeout=2)
        return psycopg.connect(
            host=str(self.root), port=self.port, user="postgres", dbname=name, connect_timeout=2
        )

    def accepts(self) -> bool:
        try:
            with self.connect("postgres"):
                return True
        except psycopg.OperationalError:
            return False

    def stop(self) -> None:
        """Fast shutdown (SIGINT): sessions are cut, like a database restart in production."""
        if self.server is not None and self.server.poll() is None:
            os.killpg(self.server.pid, signal.SIGINT)
            self.server.wait(timeout=SLOW)
        self.server = None

    def query(self, name: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with self.connect(name) as conn:
            return conn.execute(sql, params).fetchall()

    def create_database(self, name: str) -> None:
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")


@pytest.fixture
def private_postgres(processes: Any, process_env: dict[str, str]) -> Iterator[PrivatePostgres]:
    if not (PG_BIN / "postgres").exists() or shutil.which("runuser") is None:
        pytest.fail(f"a private server needs PostgreSQL's binaries ({PG_BIN}) and runuser")
    root = Path(tempfile.mkdtemp(prefix="duecourse-pg-"))
    account = pwd.getpwnam("postgres")
    os.chown(root, account.pw_uid, account.pw_gid)
    server = PrivatePostgres(processes, root, process_env)
    try:
        server.initdb()
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def private_database(request: pytest.FixtureRequest) -> PrivatePostgres | PrivateMariaDB:
    """A private server of the database the suite runs on: the promise that a restart loses
    and doubles nothing is the database's, so it is tried on each."""
    engine = database_engine()
    return request.getfixturevalue("private_mariadb" if engine == "mysql" else "private_postgres")


def test_the_database_restarting_under_a_running_worker(
    processes: Any, process_env: dict[str, str], private_database: PrivatePostgres | PrivateMariaDB
) -> None:
    """The database stops (PostgreSQL's fast shutdown, MariaDB's normal one: every session
    cut) for 4 s while a worker runs a 14-s task and a job that is due every second, then
    comes back on the same port.

    The worker and the scheduler survive; the heartbeat thread reports the outage and beats
    again; the 14-s task's completion is written although the connection it started on died
    with the server (so it is neither reaped nor run twice); every occurrence missed meanwhile
    is run afterwards (misfire catch_up), each one completed exactly once.

    The outage misses four occurrences of the frequent job, as 8 s of a job due every 2 s
    once did. REQUEUE_AFTER is short here: a message delivered while the database is down is handed
    back to the broker without a start (``execution.start_deferred``), and a QUEUED row whose
    message is lost meanwhile is published again after that time (the documented recovery for
    a lost doorbell; 3 s, under the outage, as 5 s was under 8 s).
    The scheduler ticks at least four times a second (MAX_SLEEP), so the missed occurrences,
    one after another, are caught up at that pace. STALE_AFTER (the lease) is long, so that
    neither the worker's fence (at half the lease) nor the reaper acts on a 4-s outage,
    however slow the server is to come back on a loaded machine.
    """
    db = "duecourse_restart"
    pg = private_database
    pg.create_database(db)
    env = {
        **process_env,
        "DATABASE_URL": pg.url(db),
        "SCHEDULING_REQUEUE_AFTER": "3",
        "SCHEDULING_STALE_AFTER": "40",
        "SCHEDULING_MAX_SLEEP": "0.25",
    }
    # The worker starts while the database is prepared: it reads nothing from it before a
    # message comes, and none comes before the scheduler starts, once the jobs are made.
    worker = launch_worker(processes, env, "survivor", concurrency=2)
    manage = [sys.executable, "manage.py"]
    migrate = processes.start([*manage, "migrate", "--noinput", "-v0"], env=env, name="migrate")
    assert migrate.wait(timeout=SLOW * 2) == 0, processes.log_of(migrate)
    add = [*manage, "jobs", "add"]
    ticker = ["ticker", "--task", "scheduling.diagnostics.noop", "--every", "PT1S"]
    sleeper = ["sleeper", "--task", "scheduling.diagnostics.sleep", "--every", "PT1H"]
    # The two jobs are added side by side.
    adding = [
        processes.start([*add, *ticker, "--timeout", "30"], env=env, name="ticker"),
        processes.start(
            [*add, *sleeper, "--kwargs", '{"seconds": 14}', "--timeout", "40"],
            env=env,
            name="sleeper",
        ),
    ]
    for child in adding:
        assert child.wait(timeout=SLOW * 2) == 0, processes.log_of(child)
    scheduler = processes.start(scheduler_command(), env=env, name="scheduler")
    wait_ready(processes, worker)

    def count(job: str, status: str, after: Any = None) -> int:
        sql = "SELECT count(*) FROM scheduling_execution WHERE job_id = %s AND status = %s"
        params: list[Any] = [job_of[job], status]
        if after is not None:
            sql += " AND scheduled_for > %s"
            params.append(after)
        return int(pg.query(db, sql, *params)[0][0])

    job_of = {name: pk for pk, name in pg.query(db, "SELECT id, name FROM scheduling_job")}
    wait_for(
        lambda: count("ticker", "completed") >= 2 and count("sleeper", "running") == 1,
        timeout=SLOW,
        message="the ticker has run twice and the sleeper runs",
    )

    pg.stop()
    stopped_at = time.monotonic()
    wait_for(
        lambda: (
            "dispatch.database_error" in processes.log_of(scheduler)
            and "heartbeat.failed" in processes.log_of(worker)
        ),
        timeout=SLOW,
        message="the scheduler and the worker's heartbeat notice the outage",
    )
    while time.monotonic() - stopped_at < 4:  # the outage itself: a duration, not a condition
        assert worker.poll() is None and scheduler.poll() is None
        time.sleep(0.5)
    pg.start()
    (restarted_at,) = pg.query(db, "SELECT CURRENT_TIMESTAMP(6)")[0]
    assert count("sleeper", "running") == 1, "the sleep should span the outage; raise its seconds"

    def caught_up() -> bool:
        # An occurrence due after the restart completed: catch_up ran all earlier ones first.
        return (
            count("ticker", "completed", after=restarted_at) > 0
            and count("sleeper", "completed") == 1
        )

    wait_for(caught_up, timeout=SLOW * 2, interval=0.5, message="the history catches up")
    assert worker.poll() is None and scheduler.poll() is None

    rows = pg.query(
        db,
        """
        SELECT e.scheduled_for, e.status,
               count(CASE WHEN a.outcome = 'completed' THEN 1 END), e.last_heartbeat_at
          FROM scheduling_execution e LEFT JOIN scheduling_attempt a ON a.execution_id = e.id
         WHERE e.job_id = %s GROUP BY e.id, e.scheduled_for ORDER BY e.scheduled_for
        """,
        job_of["ticker"],
    )
    due = [row[0] for row in rows]
    finished_rows = [row for row in rows if row[0] <= restarted_at]
    assert finished_rows and all(row[1] == "completed" for row in finished_rows), rows
    assert all(row[2] == (1 if row[1] == "completed" else 0) for row in rows), rows
    # Every occurrence (one a second) has exactly one execution: none skipped, none doubled.
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(due)), due
    (ticks,) = pg.query(
        db, "SELECT execute_count FROM scheduling_job WHERE id = %s", job_of["ticker"]
    )
    assert ticks[0] == sum(row[1] == "completed" for row in rows)

    (sleeper,) = pg.query(
        db,
        """
        SELECT e.retry_count, e.last_heartbeat_at, count(a.id)
          FROM scheduling_execution e JOIN scheduling_attempt a ON a.execution_id = e.id
         WHERE e.job_id = %s GROUP BY e.id, e.scheduled_for
        """,
        job_of["sleeper"],
    )
    retry_count, last_heartbeat, attempts = sleeper
    assert (retry_count, attempts) == (0, 1)
    assert last_heartbeat > restarted_at  # the heartbeat thread beat again after the restart
    # The sleep's own connection died with the server; its completion was written on a new one.
    assert "worker.reconnecting" in processes.log_of(worker)
