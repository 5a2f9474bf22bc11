"""Work that finishes while the database is away keeps its outcome until the database is back.

PostgreSQL (a private server on a spare port) is stopped with ``pg_ctl stop -m immediate``, as
a crash would stop it, while several tasks run; it stays away for longer than
``SCHEDULING_STALE_AFTER``, and every task body finishes during the outage. The worker cannot
write a completion then; it must keep the outcome (and the execution's heartbeat), write it
once the server is back, and only then acknowledge the message. The scheduler, for its part,
must not take a stale heartbeat for a dead worker right after it regains the database: the
workers could not reach the database either. So each execution is recorded completed in one
attempt, none is reaped or abandoned, and no body runs twice.
"""

from __future__ import annotations

import sys
import time

import psycopg
import pytest

from tests.conftest import Processes, scheduler_command, wait_for
from tests.polling import logged
from tests.scheduling.test_worker_crashes import (  # noqa: F401 (a fixture)
    PrivatePostgres,
    private_postgres,
)
from tests.scheduling.test_worker_lifecycle import SLOW, log_lines, start_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TASKS = 4
TASK_SECONDS = 4
# The lease: a body still running FENCE_AT (half) of it after its last renewal is fenced, so
# the bodies here (TASK_SECONDS) end well inside half of it; the outage outlasts all of it.
STALE_AFTER = 10
OUTAGE = STALE_AFTER + 4  # seconds the database stays away


def stop_immediately(pg: PrivatePostgres) -> None:
    """``pg_ctl stop -m immediate``: every session is cut without a checkpoint, as in a crash."""
    command = pg._as_postgres("pg_ctl", "stop", "-D", str(pg.data), "-m", "immediate", "-s")
    stopper = pg.processes.start(command, env=pg.env, name="pg_ctl")
    assert stopper.wait(timeout=SLOW) == 0, pg.processes.log_of(stopper)
    pg.server.wait(timeout=SLOW)
    pg.server = None


def test_completions_written_during_an_outage_are_kept_until_the_database_is_back(
    processes: Processes,
    process_env: dict[str, str],
    private_postgres: PrivatePostgres,  # noqa: F811 (the fixture imported above)
) -> None:
    pg = private_postgres
    db = "duecourse_outage"
    with psycopg.connect(pg.url("postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    env = {
        **process_env,
        "DATABASE_URL": pg.url(db),
        "SCHEDULING_STALE_AFTER": str(STALE_AFTER),
        "SCHEDULING_HEARTBEAT_INTERVAL": "1",
    }
    manage = [sys.executable, "manage.py"]
    # TASKS hourly jobs due now: the scheduler claims them together.
    create = (
        "from django.contrib.auth import get_user_model; from django.utils import timezone;"
        "from tests.factories import create_job;"
        "owner = get_user_model().objects.create(username='owner');"
        f"[create_job(owner=owner, name=f'sleeper-{{i}}', task='scheduling.diagnostics.sleep',"
        f" kwargs={{'seconds': {TASK_SECONDS}}}, every='PT1H', timeout=30,"
        f" now=timezone.now()) for i in range({TASKS})]"
    )
    add = [*manage, "shell", "-c", create]
    for name, command in (("migrate", [*manage, "migrate", "--noinput", "-v0"]), ("add", add)):
        child = processes.start(command, env=env, name=name)
        assert child.wait(timeout=SLOW * 2) == 0, processes.log_of(child)
    worker = start_worker(processes, env, "outlasting", concurrency=TASKS)
    scheduler = processes.start(scheduler_command(), env=env, name="scheduler")

    def running() -> int:
        sql = "SELECT count(*) FROM scheduling_attempt WHERE outcome = 'running'"
        return int(pg.query(db, sql)[0][0])

    wait_for(lambda: running() == TASKS, timeout=SLOW, message="every sleep is running")
    ((since_last_start,),) = pg.query(
        db, "SELECT extract(epoch FROM now() - max(started_at)) FROM scheduling_attempt"
    )
    stop_immediately(pg)
    stopped_at = time.monotonic()
    # Every body ends inside the outage, with seconds to spare.
    assert TASK_SECONDS - float(since_last_start) < OUTAGE - 3
    while time.monotonic() - stopped_at < OUTAGE:  # the outage itself: a duration
        assert worker.poll() is None and scheduler.poll() is None
        time.sleep(0.5)
    pg.start()

    def statuses() -> list[str]:
        return [row[0] for row in pg.query(db, "SELECT status FROM scheduling_execution")]

    wait_for(
        lambda: statuses() == ["completed"] * TASKS,
        timeout=STALE_AFTER * 4,
        interval=0.5,
        message=f"every execution is recorded completed (now {statuses()})",
    )
    assert worker.poll() is None and scheduler.poll() is None

    rows = pg.query(
        db,
        """
        SELECT e.id, e.retry_count, e.duplicates, count(a.id),
               count(a.id) FILTER (WHERE a.outcome = 'completed')
          FROM scheduling_execution e LEFT JOIN scheduling_attempt a ON a.execution_id = e.id
         GROUP BY e.id, e.scheduled_for ORDER BY e.id
        """,
    )
    assert [row[1:4] for row in rows] == [(0, 0, 1)] * TASKS, rows
    assert all(row[4] == 1 for row in rows), rows
    assert pg.query(db, "SELECT execute_count FROM scheduling_job") == [(1,)] * TASKS
    assert not log_lines(processes.log_of(scheduler), r"execution\.reaped")
    # Each body ran once, on the worker that kept its outcome through the outage (Celery logs
    # a run succeeded after its completion is written).
    succeeded = r"diagnostics\.sleep\[.*\] succeeded"
    log = logged(
        lambda: processes.log_of(worker),
        succeeded,
        count=TASKS,
        timeout=SLOW,
        message="the worker logs every run succeeded",
    )
    assert len(log_lines(log, succeeded)) == TASKS
