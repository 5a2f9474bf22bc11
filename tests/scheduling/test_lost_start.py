"""A start that a database crash undid is written again by its own worker, and by nobody else.

A worker's start commits without waiting for its WAL flush (docs/architecture.md, *One flush
per task*); the end of the attempt waits, and its flush carries the start with it. Between the
two, a server crash can undo the start of a body that is running. These tests make that happen
for certain: a private PostgreSQL whose WAL writer waits 10 s, no other writer, and
``pg_ctl stop -m immediate`` right after the start. They check what is kept:

- the body runs once; its worker writes the start again (from its end, or from a heartbeat
  while the body still runs) and records the run completed in one attempt;
- a second message for the same execution, delivered to another worker right after the
  recovery, does not start a second body: the execution is held for one lease after the
  recovery, for its own worker only, and the other worker hands the message back.

The first test waits for that hold to end, so its lease is short (14 s) and its body shorter
(4 s), ending well inside the fence (half the lease) without a single renewal.
"""

from __future__ import annotations

import sys
from typing import Any

import psycopg
import pytest

from scheduling.rules.registry import EXECUTION_HEADER
from tests.conftest import Processes, wait_for
from tests.scheduling.test_database_outage import stop_immediately
from tests.scheduling.test_worker_crashes import (  # noqa: F401 (a fixture)
    PrivatePostgres,
    private_postgres,
)
from tests.scheduling.test_worker_lifecycle import (
    SLOW,
    launch_worker,
    log_lines,
    send_message,
    start_worker,
    wait_ready,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DB = "duecourse_lost_start"
#: The lease, and so the hold after a crash recovery, of the test that waits for the hold to
#: end: its 4-s body ends well inside the fence (7 s, half of it) without a single renewal.
HOLD = 14
#: The lease of the test whose heartbeat restores the start: its body is not fenced by a
#: recovery however slow (the lease costs it no time).
STALE_AFTER = 30


def prepare(processes: Processes, pg: PrivatePostgres, env: dict[str, str], seconds: float) -> None:
    """A database with one job due now running ``diagnostics.sleep``, claimed and published.

    One ``manage.py shell`` migrates, adds the job and runs ``runscheduler --once``: one claim
    and publish, then no scheduler, so nothing else writes and nothing flushes.
    """
    with psycopg.connect(pg.url("postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {DB}")
    code = (
        "from django.contrib.auth import get_user_model; from django.utils import timezone;"
        "from django.core.management import call_command;"
        "from tests.factories import create_job;"
        "call_command('migrate', interactive=False, verbosity=0);"
        "owner = get_user_model().objects.create(username='owner');"
        "create_job(owner=owner, name='sleeper', task='scheduling.diagnostics.sleep',"
        f" kwargs={{'seconds': {seconds}}}, every='PT1H', timeout=30, now=timezone.now());"
        "call_command('runscheduler', once=True)"
    )
    child = processes.start(
        [sys.executable, "manage.py", "shell", "-c", code], env=env, name="prepare"
    )
    assert child.wait(timeout=SLOW * 2) == 0, processes.log_of(child)


def wait_started(pg: PrivatePostgres) -> None:
    wait_for(
        lambda: pg.query(DB, "SELECT status FROM scheduling_execution") == [("running",)],
        timeout=SLOW,
        interval=0.05,
        message="the body starts",
    )


def crash_right_after_the_start(pg: PrivatePostgres) -> None:
    """Wait for the start, crash the server before its WAL is flushed, and bring it back."""
    wait_started(pg)
    crash_and_recover(pg)


def crash_and_recover(pg: PrivatePostgres) -> None:
    """Crash the server at once (the start is not flushed yet) and bring it back."""
    stop_immediately(pg)
    # What the recovery kept is read before any process can reach the server: the worker's
    # heartbeat or end writes the start again as soon as it can.
    pg.start(tcp=False)
    # The crash undid the start: the execution waits again, with no attempt.
    assert pg.query(DB, "SELECT status FROM scheduling_execution") == [("queued",)]
    assert pg.query(DB, "SELECT count(*) FROM scheduling_attempt") == [(0,)]
    # A clean restart, open to the processes again; it keeps the record of the recovery.
    pg.stop()
    pg.start()


def run_of_record(pg: PrivatePostgres) -> list[tuple[Any, ...]]:
    return pg.query(
        DB,
        """
        SELECT e.status, e.retry_count, a.number, a.outcome, j.execute_count
          FROM scheduling_execution e
          JOIN scheduling_attempt a ON a.execution_id = e.id
          JOIN scheduling_job j ON j.id = e.job_id
        """,
    )


def worker_env(
    process_env: dict[str, str], pg: PrivatePostgres, *, heartbeat_interval: float, lease: float
) -> dict[str, str]:
    return {
        **process_env,
        "DATABASE_URL": pg.url(DB),
        "SCHEDULING_STALE_AFTER": str(lease),
        "SCHEDULING_HEARTBEAT_INTERVAL": str(heartbeat_interval),
    }


def wait_until_completed(pg: PrivatePostgres) -> None:
    wait_for(
        lambda: pg.query(DB, "SELECT status FROM scheduling_execution") == [("completed",)],
        timeout=SLOW,
        interval=0.2,
        message="the run is recorded completed",
    )


def body_runs(processes: Processes, *workers: Any) -> int:
    text = "\n".join(processes.log_of(worker) for worker in workers)
    return len(log_lines(text, r"diagnostics\.sleep\[.*\] succeeded"))


def wait_body_logged(processes: Processes, *workers: Any) -> None:
    """Celery logs a run succeeded after its completion is written: wait for that line."""
    wait_for(
        lambda: body_runs(processes, *workers),
        timeout=SLOW,
        message="a worker logs the body succeeded",
    )


@pytest.fixture
def lazy_wal_postgres(private_postgres: PrivatePostgres) -> PrivatePostgres:  # noqa: F811
    """The private server, restarted with a WAL writer that flushes only every 10 s."""
    private_postgres.stop()
    private_postgres.settings = ["wal_writer_delay=10000", "wal_writer_flush_after=0"]
    private_postgres.start()
    return private_postgres


def test_the_end_restores_a_start_the_crash_undid_and_a_second_message_waits(
    processes: Processes, process_env: dict[str, str], lazy_wal_postgres: PrivatePostgres
) -> None:
    pg = lazy_wal_postgres
    # No beat while the body runs: the end is what finds the start gone.
    env = worker_env(process_env, pg, heartbeat_interval=60, lease=HOLD)
    prepare(processes, pg, env, seconds=4)
    first = start_worker(processes, env, "first", concurrency=1)
    wait_started(pg)
    # The second worker starts while the server crashes and recovers: it touches the database
    # only for a message, and the queue is empty until the second message below.
    second = launch_worker(processes, env, "second", concurrency=1)
    crash_and_recover(pg)

    # A second message for the same execution, taken by another worker during the hold.
    wait_ready(processes, second)
    (execution_id,) = pg.query(DB, "SELECT id FROM scheduling_execution")[0]
    send_message(
        env,
        "scheduling.diagnostics.sleep",
        kwargs={"seconds": 4},
        headers={EXECUTION_HEADER: str(execution_id)},
    )
    wait_for(
        lambda: "execution.start_held" in processes.log_of(second),
        timeout=SLOW,
        message="the second worker finds the execution held",
    )

    wait_until_completed(pg)
    assert run_of_record(pg) == [("completed", 0, 1, "completed", 1)]
    assert "execution.start_restored" in processes.log_of(first)
    # The handed-back message finds the run finished once the hold ends: acknowledged, unrun.
    wait_for(
        lambda: "execution.duplicate" in processes.log_of(first) + processes.log_of(second),
        timeout=HOLD + SLOW,
        message="the second message is acknowledged as a duplicate",
    )
    wait_body_logged(processes, first, second)
    assert body_runs(processes, first, second) == 1
    assert run_of_record(pg) == [("completed", 0, 1, "completed", 1)]


def test_a_heartbeat_restores_the_start_of_a_body_still_running(
    processes: Processes, process_env: dict[str, str], lazy_wal_postgres: PrivatePostgres
) -> None:
    pg = lazy_wal_postgres
    env = worker_env(process_env, pg, heartbeat_interval=1, lease=STALE_AFTER)
    # A body that outlives by far the heartbeat's first look after the recovery (a second or
    # so after the restart, which comes seconds after the start). The beats are a writer: the
    # first comes a second after the start, so the crash must come before it.
    prepare(processes, pg, env, seconds=10)
    worker = start_worker(processes, env, "restoring", concurrency=1)
    crash_right_after_the_start(pg)

    wait_for(
        lambda: "execution.start_restored" in processes.log_of(worker),
        timeout=SLOW,
        message="the heartbeat restores the start",
    )
    assert pg.query(DB, "SELECT status FROM scheduling_execution") == [("running",)]
    wait_until_completed(pg)
    assert run_of_record(pg) == [("completed", 0, 1, "completed", 1)]
    wait_body_logged(processes, worker)
    assert body_runs(processes, worker) == 1
    assert "execution.fenced" not in processes.log_of(worker)
