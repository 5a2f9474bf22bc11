"""History at scale: the flood, the worker, the reads and the prune with ten million executions.

Two ledgers in one run, with the same jobs: BIG holds ``--executions`` finished executions
(10,000,000) and one attempt each, for ``--jobs`` jobs (10,000) over ``--days`` days (90),
of which the last day holds ``--per-day`` (1,000,000: the rate the reads must stand); EMPTY
holds none. The history is built set-based: ``INSERT … SELECT`` from ``generate_series``,
with the tables' secondary indexes and unique constraints dropped for the load and built
again afterwards (as a restore does), foreign-key triggers off for the load session
(``session_replication_role = replica``: the rows are made valid), then ``VACUUM ANALYZE``
as autovacuum would. Rows/s of each step and the size of each table and index are reported.

Then, round by round (``--rounds``, default 3), alternating which ledger goes first:

- **flood, new jobs**: ``--flood`` (50,000) jobs with no executions due at one instant,
  claimed and published by ``bench/dispatch_rate.py``'s flood child (the shipped scheduler
  loop, fast path, one process); occurrences/s, and the deltas of ``pg_statio_user_indexes``
  (``idx_blks_read``, ``idx_blks_hit`` per index) and ``pg_stat_user_tables`` (``n_tup_ins``,
  ``n_tup_upd``, ``n_tup_hot_upd``) over the flood;
- **flood, long histories**: the ``--jobs`` jobs that own the history, due at one instant
  (on BIG each new execution goes beside a thousand older ones in the occurrence key);
- **raw limit**: the same rows as a new-jobs flood written by one ``INSERT … SELECT`` into a
  bare copy of the executions table (no index, no constraint), and into the executions table
  itself (rolled back): the ceiling one primary sets before any scheduler code runs;
- **worker**: ``--worker-tasks`` (2,000) due jobs published by ``runscheduler --once`` and
  drained by a stock worker (``bench/worker_throughput.py``'s drain), tasks/s;
- **reads**: every dashboard panel, the whole dashboard's reads, ``/health/``'s checks and a
  ``/metrics`` scrape, as the views call them, each COLD and then WARM. Cold: PostgreSQL is
  not restarted and the OS page cache cannot be dropped here, so "cold" means *not in
  shared_buffers*: before each cold read the reads get a new database session and
  ``pg_prewarm`` reads a ballast table of five times ``shared_buffers``
  into the buffer pool, which the clock sweep must give whole passes over every buffer
  (``pg_buffercache`` counts what is left of the ledger's pages; the report says it). The
  pages then come from the OS cache, as on a server whose RAM holds the database but whose
  ``shared_buffers`` do not.

Finally (unless ``--no-prune``) ``manage.py prune_history --older-than 60d`` on BIG: time,
rows/s, table sizes and dead rows before and after, and what a ``VACUUM`` then takes.

The SQL names the tables and columns only (``scheduling/models.py``), so it runs the same on
plain and on partitioned tables (for partitioned ones it makes the engine's periods for the
history's past before the load, and sizes sum over the partitions). Task ids follow
the claim's kind (``--task-ids auto``: time-ordered when the claim makes UUIDv7 ids).

Databases ``bench_hist_big_<run id>`` and ``bench_hist_empty_<run id>``; Redis as every
bench script (``BENCH_REDIS_DB``). Writes ``var/bench/history.json`` and the section
"History at scale" of docs/benchmarks.md (``--render`` rewrites it from the saved results).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import common

NAME = "history"
DOC = common.ROOT / "docs" / "benchmarks.md"
SECTION = "## History at scale: ten million executions beside an empty ledger"
TARGET_MS = 100.0
LEDGERS = ("big", "empty")
TABLES = ("scheduling_execution", "scheduling_attempt")
#: Statements the flood leaves behind that an honest comparison counts (tables, per index).
STAT_TABLES = ("scheduling_execution", "scheduling_attempt", "scheduling_job")
FAR = "now() + interval '3650 days'"


def ledger_db(ledger: str) -> str:
    return common.db_name(f"hist_{ledger}")


# --- sizes and counters, summed over partitions where the tables are partitioned ------------


def partitioned(conn: Any, table: str) -> bool:
    row = conn.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", [table]).fetchone()
    return row is not None and row[0] == "p"


def sizes(conn: Any) -> dict[str, Any]:
    """Rows and bytes of each ledger table: heap, TOAST and each index (over all partitions)."""
    out: dict[str, Any] = {}
    for table in TABLES:
        rows = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        # pg_partition_tree lists nothing for a plain table: its own size then.
        total, heap = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(relid)), pg_total_relation_size(%(t)s)),"
            " coalesce(sum(pg_relation_size(relid)), pg_relation_size(%(t)s))"
            " FROM pg_partition_tree(%(t)s::regclass)",
            {"t": table},
        ).fetchone()
        indexes = {
            name: int(size)
            for name, size in conn.execute(
                "SELECT c.relname, (SELECT coalesce(sum(pg_relation_size(t.relid)),"
                "   pg_relation_size(i.indexrelid)) FROM pg_partition_tree(i.indexrelid) AS t)"
                " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE i.indrelid = %s::regclass ORDER BY c.relname",
                [table],
            ).fetchall()
        }
        out[table] = {"rows": int(rows), "total": int(total), "heap": int(heap), "indexes": indexes}
    return out


# Counters per table and per index, partitions folded into their root.
TABLE_STATS = """
SELECT coalesce(pg_partition_root(relid), relid)::regclass::text AS name,
       sum(n_tup_ins), sum(n_tup_upd), sum(n_tup_hot_upd), sum(n_dead_tup), sum(n_live_tup)
  FROM pg_stat_user_tables GROUP BY 1
"""
INDEX_STATS = """
SELECT coalesce(pg_partition_root(s.indexrelid), s.indexrelid)::regclass::text AS name,
       coalesce(pg_partition_root(s.relid), s.relid)::regclass::text AS on_table,
       sum(s.idx_blks_read), sum(s.idx_blks_hit)
  FROM pg_statio_user_indexes s GROUP BY 1, 2
"""


def counters(db: str) -> dict[str, Any]:
    """A fresh snapshot of the table and index counters (a new session: no cached snapshot)."""
    with common.pg_connect(db) as conn:
        tables = {
            name: dict(zip(("ins", "upd", "hot_upd", "dead", "live"), map(int, rest), strict=True))
            for name, *rest in conn.execute(TABLE_STATS).fetchall()
            if name in STAT_TABLES
        }
        indexes = {
            name: {"table": table, "blks_read": int(read), "blks_hit": int(hit)}
            for name, table, read, hit in conn.execute(INDEX_STATS).fetchall()
            if table in STAT_TABLES
        }
    return {"tables": tables, "indexes": indexes}


def counter_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    tables = {
        name: {k: after["tables"][name][k] - before["tables"].get(name, {}).get(k, 0) for k in v}
        for name, v in after["tables"].items()
        if name in before["tables"]
    }
    indexes = {
        name: {
            "table": v["table"],
            "blks_read": v["blks_read"] - before["indexes"].get(name, {}).get("blks_read", 0),
            "blks_hit": v["blks_hit"] - before["indexes"].get(name, {}).get("blks_hit", 0),
        }
        for name, v in after["indexes"].items()
    }
    return {"tables": tables, "indexes": indexes}


def settle_stats() -> None:
    """Backends report their counters when they end or at most once a second: wait that out."""
    time.sleep(1.2)


# --- the build ------------------------------------------------------------------------------


def task_id_sql(kind: str, at: str) -> str:
    """SQL for a new task id: random (v4), or time-ordered (v7, its first 48 bits ``at``)."""
    if kind == "v4":
        return "gen_random_uuid()"
    millis = f"substring(int8send((extract(epoch FROM {at}) * 1000)::bigint) FROM 3)"
    raw = f"overlay(uuid_send(gen_random_uuid()) PLACING {millis} FROM 1 FOR 6)"
    return f"encode(set_byte({raw}, 6, (get_byte({raw}, 6) & 15) | 112), 'hex')::uuid"


def claim_task_ids() -> str:
    """The kind of task id the shipped claim makes: v7 where its code names it, else v4."""
    for path in ("scheduling/ledger/engines/sql/postgresql/claim.sql", "scheduling/ids.py"):
        text = (common.ROOT / path).read_text()
        if re.search(r"uuid_?v?7", text, re.I):
            return "v7"
    return "v4"


def ensure_partitions(conn: Any, table: str, start: dt.datetime, end: dt.datetime) -> int:
    """On a partitioned table, make the engine's periods (``scheduling.ledger.partitions``:
    ``SCHEDULING_HISTORY_PARTITION_DAYS``, 7 by default, aligned on Mondays) for the load's
    past, as a history that grew under a running scheduler has them. The migration made the
    current period and the next ones; a period that exists is left alone."""
    if not partitioned(conn, table):
        return 0
    from scheduling.ledger.partitions import period_of

    days = int(os.environ.get("SCHEDULING_HISTORY_PARTITION_DAYS", "7"))
    options = conn.execute(
        "SELECT c.reloptions FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = %s::regclass AND c.relname <> %s ORDER BY c.relname DESC LIMIT 1",
        [table, f"{table}_default"],
    ).fetchone()
    storage = f" WITH ({', '.join(options[0])})" if options and options[0] else ""
    made = 0
    period = period_of(start, days)
    while period.start <= end:
        try:
            with conn.transaction():
                conn.execute(  # DDL takes no parameters: the bounds as literals
                    f'CREATE TABLE "{period.name(table)}" PARTITION OF {table}'
                    f" FOR VALUES FROM ('{period.start.isoformat()}')"
                    f" TO ('{period.end.isoformat()}'){storage}"
                )
            made += 1
        except Exception:  # made already (the current period and those ahead)
            pass
        period = period_of(period.end, days)
    return made


def secondary_definitions(conn: Any, table: str) -> tuple[list[str], list[str]]:
    """The unique constraints and plain indexes of ``table`` (not its primary key), as SQL."""
    constraints = [
        f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}"
        for name, definition in conn.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = %s::regclass AND contype = 'u'",
            [table],
        ).fetchall()
    ]
    indexes = [
        definition.replace(" ON ONLY ", " ON ")
        for (definition,) in conn.execute(
            "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i WHERE i.indrelid = %s::regclass"
            " AND NOT i.indisprimary AND NOT EXISTS (SELECT 1 FROM pg_constraint c"
            "   WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid)",
            [table],
        ).fetchall()
    ]
    return constraints, indexes


def drop_secondary(conn: Any, table: str) -> list[str]:
    """Drop ``table``'s unique constraints and indexes; return the SQL that makes them again."""
    constraints, indexes = secondary_definitions(conn, table)
    for (name,) in conn.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'u'",
        [table],
    ).fetchall():
        conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    for (name,) in conn.execute(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = %s::regclass AND NOT i.indisprimary",
        [table],
    ).fetchall():
        conn.execute(f"DROP INDEX {name}")
    return constraints + indexes


def columns(conn: Any, table: str) -> set[str]:
    return {
        name
        for (name,) in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s", [table]
        ).fetchall()
    }


def load_jobs(conn: Any, args: Any) -> float:
    """History jobs 1..jobs, flood jobs after them; none due (each round makes its set due)."""
    return common.load_jobs(conn, args.jobs + args.flood, due_sql=FAR)


def load_history(conn: Any, args: Any, now: dt.datetime) -> dict[str, Any]:
    """``args.executions`` finished executions and one attempt each, set-based."""
    steps: dict[str, Any] = {}
    recent = min(args.per_day, args.executions // 2)
    older = args.executions - recent
    start = now - dt.timedelta(days=args.days)
    for table in TABLES:
        steps[f"partitions_{table}"] = ensure_partitions(conn, table, start, now)
    conn.execute("SET session_replication_role = replica")  # the load's rows are valid
    conn.execute("SET maintenance_work_mem = '512MB'")
    rebuild = {table: drop_secondary(conn, table) for table in TABLES}
    task_id = task_id_sql(args.task_ids, "t.due")
    # Rows g = n..1 of one stretch, written oldest first as a ledger is (so a prune empties
    # the start of the files, not their end), one every `step` seconds before `newest`;
    # job (g mod jobs) + 1, so (job, scheduled_for) stays unique. 96 % completed, 3 % failed,
    # 1 % skipped; 0.1 % report a failed item; starts lag their due time by 0-2 s.
    insert = f"""
        INSERT INTO scheduling_execution (job_id, task, scheduled_for, status, retry_count,
            task_id, worker, created_at, queued_at, started_at, finished_at, last_error,
            duplicates, item_failures, item_failure_detail, updated_at)
        SELECT (g %% %(jobs)s) + 1, %(task)s, t.due, t.status, 0, {task_id}, 'bench@host',
               t.due, t.due,
               CASE WHEN t.status <> 'skipped' THEN t.due + t.lag END,
               t.due + t.lag + interval '1 second',
               CASE WHEN t.status = 'failed' THEN 'RuntimeError: bench' ELSE '' END,
               0, CASE WHEN g %% 1000 = 7 THEN 1 ELSE 0 END,
               CASE WHEN g %% 1000 = 7 THEN 'one item declined' ELSE '' END,
               t.due + t.lag + interval '1 second'
          FROM generate_series(%(n)s, 1, -1) AS g,
               LATERAL (SELECT
                   %(newest)s::timestamptz - (g * %(step)s * interval '1 second') AS due,
                   (random() * 2) * interval '1 second' AS lag,
                   CASE WHEN g %% 100 < 3 THEN 'failed' WHEN g %% 100 = 3 THEN 'skipped'
                        ELSE 'completed' END AS status) AS t
    """
    started = time.perf_counter()
    for n, newest, span in (
        (older, now - dt.timedelta(days=1), (args.days - 1) * 86400.0),
        (recent, now, 86400.0),
    ):
        if n:
            conn.execute(
                insert,
                {
                    "jobs": args.jobs,
                    "task": common.BENCH_TASK,
                    "n": n,
                    "newest": newest,
                    "step": span / n,
                },
            )
    steps["executions_s"] = time.perf_counter() - started
    has_scheduled_for = "scheduled_for" in columns(conn, "scheduling_attempt")
    started = time.perf_counter()
    conn.execute(
        f"""
        INSERT INTO scheduling_attempt (execution_id, number, worker, pid, started_at,
            finished_at, outcome, error{", scheduled_for" if has_scheduled_for else ""})
        SELECT e.id, 1, e.worker, 4242, coalesce(e.started_at, e.scheduled_for), e.finished_at,
               CASE e.status WHEN 'failed' THEN 'failed' ELSE 'completed' END, e.last_error
               {", e.scheduled_for" if has_scheduled_for else ""}
          FROM scheduling_execution e
        """
    )
    steps["attempts_s"] = time.perf_counter() - started
    started = time.perf_counter()
    for table in TABLES:
        for statement in rebuild[table]:
            conn.execute(statement)
    steps["indexes_s"] = time.perf_counter() - started
    conn.execute("SET session_replication_role = origin")
    started = time.perf_counter()
    for table in TABLES:
        conn.execute(f"VACUUM (ANALYZE) {table}")
    steps["vacuum_s"] = time.perf_counter() - started
    steps["executions"] = args.executions
    steps["rows_per_s"] = (
        2 * args.executions / (steps["executions_s"] + steps["attempts_s"] + steps["indexes_s"])
    )
    return steps


def ballast(conn: Any) -> int:
    """A table five times ``shared_buffers``: reading it evicts the ledger's pages."""
    blocks = conn.execute(
        "SELECT setting::bigint FROM pg_settings WHERE name = 'shared_buffers'"
    ).fetchone()[0]
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_buffercache")
    conn.execute("DROP TABLE IF EXISTS bench_ballast")
    # Eight rows of ~900 bytes fill an 8 kB page: blocks * 5 pages.
    conn.execute(
        "CREATE TABLE bench_ballast AS SELECT g, repeat('x', 900) AS filler"
        " FROM generate_series(1, %s) AS g",
        [int(blocks) * 5 * 8],
    )
    return int(conn.execute("SELECT pg_relation_size('bench_ballast')").fetchone()[0])


def build(args: Any, now: dt.datetime) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ledger in LEDGERS:
        db = ledger_db(ledger)
        common.create_db(db)
        with common.pg_connect(db) as conn:
            print(f"{ledger}: loading {args.jobs + args.flood:,} jobs ...", flush=True)
            out[f"{ledger}_jobs_s"] = load_jobs(conn, args)
            if ledger == "big":
                print(f"big: building {args.executions:,} executions ...", flush=True)
                out["load"] = load_history(conn, args, now)
                print(f"big: {out['load']}", flush=True)
                out["ballast_bytes"] = ballast(conn)
            out[f"{ledger}_sizes"] = sizes(conn)
            conn.execute(
                "CREATE TABLE bench_bare_execution"
                " (LIKE scheduling_execution INCLUDING DEFAULTS INCLUDING IDENTITY)"
            )
    return out


# --- one round's measurements ---------------------------------------------------------------


def make_due(db: str, first: int, last: int) -> None:
    """Forget the rounds' executions; jobs first..last due now, every other job far ahead."""
    with common.pg_connect(db) as conn:
        conn.execute(
            "DELETE FROM scheduling_attempt WHERE execution_id IN"
            " (SELECT id FROM scheduling_execution WHERE scheduled_for > %(built)s)",
            {"built": BUILT_AT},
        )
        conn.execute(
            "UPDATE scheduling_job SET current_execution_id = NULL"
            " WHERE current_execution_id IS NOT NULL"
        )
        conn.execute(
            "DELETE FROM scheduling_execution WHERE scheduled_for > %(built)s",
            {"built": BUILT_AT},
        )
        conn.execute(
            f"UPDATE scheduling_job SET status = 'active', execute_count = 0,"
            f" next_due_at = CASE WHEN id BETWEEN %(first)s AND %(last)s"
            f"   THEN now() - interval '1 second' ELSE {FAR} END,"
            " next_occurrence_at = CASE WHEN id BETWEEN %(first)s AND %(last)s"
            f"   THEN now() - interval '1 second' ELSE {FAR} END",
            {"first": first, "last": last},
        )
        conn.execute("VACUUM ANALYZE scheduling_job")


#: History is due before this instant; every execution a round makes is due after it.
BUILT_AT: dt.datetime = dt.datetime.now(dt.UTC)


def flood(db: str, first: int, last: int) -> dict[str, Any]:
    """Jobs first..last due at once, claimed and published by the scheduler's flood child."""
    make_due(db, first, last)
    common.redis_cleanup()
    settle_stats()
    before = counters(db)
    params = {"start_at": time.time() + 4.0, "profile": ""}
    result = common.run_child(
        common.child_argv("dispatch_rate.py", "flood", params),
        common.child_env(db),
        timeout=900,
        label="flood",
    )
    settle_stats()
    after = counters(db)
    common.redis_cleanup()
    if not result.ok:
        print(result.error, file=sys.stderr)
        return {"error": result.error.splitlines()[0]}
    data = result.data
    with common.pg_connect(db) as conn:
        queued = conn.execute(
            "SELECT count(*) FROM scheduling_execution WHERE status = 'queued'"
            " AND scheduled_for > %s",
            [BUILT_AT],
        ).fetchone()[0]
    wall = data["finished"] - data["started"]
    calls = data["spent"].get("claim_calls_ms", [])
    return {
        "n": last - first + 1,
        "queued": int(queued),
        "wall_s": wall,
        "rate": queued / wall,
        "claim_call_ms": common.median(calls),
        "spent": {k: v for k, v in data["spent"].items() if k != "claim_calls_ms"},
        "counters": counter_delta(before, after),
    }


RAW_ROWS = """
SELECT j.id, j.task, now(), 'queued', 0, {task_id}, '', now(), now(), '', 0, now()
  FROM scheduling_job j WHERE j.id BETWEEN %(first)s AND %(last)s
"""
RAW_COLUMNS = (
    "(job_id, task, scheduled_for, status, retry_count, task_id, worker, created_at,"
    " queued_at, last_error, duplicates, updated_at)"
)


def raw_insert(db: str, first: int, last: int, task_ids: str) -> dict[str, Any]:
    """The flood's rows in one INSERT … SELECT: into a bare table, and into the ledger
    (rolled back)."""
    rows = RAW_ROWS.format(task_id=task_id_sql(task_ids, "now()"))
    out: dict[str, Any] = {}
    with common.pg_connect(db) as conn:
        conn.execute("TRUNCATE bench_bare_execution")
        started = time.perf_counter()
        n = conn.execute(
            f"INSERT INTO bench_bare_execution {RAW_COLUMNS} {rows}",
            {"first": first, "last": last},
        ).rowcount
        out["bare"] = n / (time.perf_counter() - started)
        conn.execute("TRUNCATE bench_bare_execution")
    with common.pg_connect(db, autocommit=False) as conn:
        started = time.perf_counter()
        n = conn.execute(
            f"INSERT INTO scheduling_execution {RAW_COLUMNS} {rows}",
            {"first": first, "last": last},
        ).rowcount
        out["ledger"] = n / (time.perf_counter() - started)
        conn.rollback()
    return out


def worker(db: str, args: Any) -> dict[str, Any]:
    """``--worker-tasks`` due jobs published in one tick, drained by a stock worker."""
    import worker_throughput

    first = args.jobs + 1
    make_due(db, first, first + args.worker_tasks - 1)
    common.redis_cleanup()
    subprocess.run(
        [
            common.PYTHON,
            "manage.py",
            "runscheduler",
            "--once",
            "--batch-size",
            str(args.worker_tasks),
        ],
        cwd=common.ROOT,
        env=common.child_env(db),
        check=True,
        capture_output=True,
    )
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    result = worker_throughput.drain(
        args.worker_tasks, common.child_env(db), timeout=120 + args.worker_tasks / 20
    )
    common.redis_cleanup()
    with common.pg_connect(db) as conn:
        result["completed"] = int(
            conn.execute(
                "SELECT count(*) FROM scheduling_execution WHERE status = 'completed'"
                " AND scheduled_for > %s",
                [BUILT_AT],
            ).fetchone()[0]
        )
    return result


# --- the reads, in a child on one ledger ----------------------------------------------------


#: Reads timed a second time with no settled hour kept (``scheduling.stages.hours``): the first
#: page on a ledger no scheduler has counted yet, a one-time cost; the rows then stay.
NOTHING_KEPT = ("executions per hour, 24 h", "whole dashboard (all panels)")
FIRST_PAGE = ", no settled hour kept yet"
SETTLE_ONE = "the scheduler's count of the hour that settled"


def read_calls(now: dt.datetime) -> dict[str, Any]:
    """Every panel as the dashboard calls it, the whole page, /health/ and /metrics."""
    from prometheus_client import generate_latest

    from scheduling.web import dashboard, health, overview
    from scheduling.web.metrics import registry

    return {
        "due in the next hour": lambda: overview.due_soon(now=now),
        "running now": lambda: overview.running(now=now),
        "waiting for a slot": lambda: overview.waiting(now=now),
        "stale": lambda: overview.stale(now=now),
        "late": lambda: overview.late(now=now),
        "failures, 24 h": lambda: overview.recent_failures(now=now),
        "failed items, 24 h": lambda: overview.item_failures(now=now),
        "paused after failures": lambda: overview.paused_after_failures(),
        "queues nobody consumes": lambda: overview.unconsumed_queues(now=now),
        "tasks awaiting a process": lambda: overview.awaiting_tasks(),
        "executions per hour, 24 h": lambda: overview.executions_per_hour(now=now),
        "lag p50/p95/p99, last hour": lambda: overview.lag_percentiles(now=now),
        "whole dashboard (all panels)": lambda: dashboard.panels(now=now, owner_id=None),
        "/health/ checks (no broker)": lambda: {
            name: check(now) for name, check in health.CHECKS.items() if name != "broker"
        },
        "/metrics scrape": lambda: generate_latest(registry),
    }


# Buffers of the ledger's database still in shared_buffers, the ballast's own left out.
LEDGER_BUFFERS = """
SELECT count(*) FROM pg_buffercache b JOIN pg_database d ON d.oid = b.reldatabase
 WHERE d.datname = %s
   AND NOT (d.datname = current_database()
            AND b.relfilenode = pg_relation_filenode('bench_ballast'))
"""


def child_reads(p: dict[str, Any]) -> dict[str, Any]:
    """Each read cold (its pages evicted from shared_buffers, a new session), then warm.

    The settled hours of the hourly chart are counted first, as the scheduler counts them
    while it runs (``scheduling.scheduler.hours``), and are kept in the ledger for every page;
    the reads in ``NOTHING_KEPT`` are timed once more with none kept (a ledger no scheduler
    has counted yet), and ``SETTLE_ONE`` is the scheduler's own count of one hour.
    """
    import psycopg

    common.setup_django()
    from django.db import connection

    from scheduling.models import SettledHour
    from scheduling.stages import hours

    now = dt.datetime.fromisoformat(p["now"])
    hours.settle_due(now=now)
    newest = SettledHour.objects.order_by("-hour").values_list("hour", flat=True).first()
    calls = read_calls(now)
    evictor = psycopg.connect(p["ballast_url"], autocommit=True)
    left: list[int] = []
    out: dict[str, dict[str, float]] = {}
    runs: list[tuple[str, Any, Any]] = [(label, call, None) for label, call in calls.items()]
    runs += [
        (label + FIRST_PAGE, calls[label], lambda: SettledHour.objects.all().delete())
        for label in NOTHING_KEPT
    ]
    runs.append(
        (
            SETTLE_ONE,
            lambda: hours.settle_due(now=now),
            lambda: SettledHour.objects.filter(hour=newest).delete(),
        )
    )
    for label, call, prepare in runs:
        if prepare is not None:
            prepare()
        evictor.execute("SELECT pg_prewarm('bench_ballast', 'buffer')")
        left.append(int(evictor.execute(LEDGER_BUFFERS, [p["db"]]).fetchone()[0]))
        # A new session (nothing prepared, nothing planned), set up before the clock starts.
        connection.close()
        connection.ensure_connection()
        started = time.perf_counter()
        call()
        cold = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        call()
        warm = (time.perf_counter() - started) * 1000
        out[label] = {"cold": cold, "warm": warm}
    evictor.close()
    return {"reads": out, "ledger_buffers_left": max(left)}


def reads(db: str, ballast_db: str, now: dt.datetime) -> dict[str, Any]:
    result = common.run_child(
        common.child_argv(
            "history.py",
            "reads",
            {
                "now": now.isoformat(),
                "db": db,
                "ballast_url": common.libpq_url(common.db_url(ballast_db)),
            },
        ),
        common.child_env(db),
        timeout=900,
        label="reads",
    )
    if not result.ok:
        print(result.error, file=sys.stderr)
        return {"error": result.error.splitlines()[0]}
    return result.data


def range_sizes(db: str, now: dt.datetime) -> dict[str, int]:
    """Rows inside each windowed read's range."""
    with common.pg_connect(db) as conn:

        def count(sql: str) -> int:
            return int(conn.execute(sql, {"now": now}).fetchone()[0])

        return {
            "failures, 24 h": count(
                "SELECT count(*) FROM scheduling_execution WHERE status = 'failed'"
                " AND finished_at >= %(now)s::timestamptz - interval '24 hours'"
            ),
            "failed items, 24 h": count(
                "SELECT count(*) FROM scheduling_execution WHERE item_failures > 0"
                " AND scheduled_for >= %(now)s::timestamptz - interval '24 hours'"
            ),
            "executions per hour, 24 h": count(
                "SELECT count(*) FROM scheduling_execution"
                " WHERE scheduled_for >= %(now)s::timestamptz - interval '24 hours'"
            ),
            "lag p50/p95/p99, last hour": count(
                "SELECT count(*) FROM scheduling_execution"
                " WHERE scheduled_for >= %(now)s::timestamptz - interval '1 hour'"
                " AND started_at IS NOT NULL"
            ),
        }


# --- the prune ------------------------------------------------------------------------------


def prune(db: str) -> dict[str, Any]:
    """``prune_history --older-than 60d`` on the big ledger, then VACUUM: time and sizes."""
    out: dict[str, Any] = {}
    with common.pg_connect(db) as conn:
        out["before"] = sizes(conn)
    with common.pg_connect(db) as conn:
        whole = partitioned(conn, "scheduling_execution")

    def run(*argv: str) -> tuple[float, str]:
        started = time.perf_counter()
        done = subprocess.run(
            [common.PYTHON, "manage.py", *argv],
            cwd=common.ROOT,
            env=common.child_env(db),
            capture_output=True,
            text=True,
        )
        return time.perf_counter() - started, (done.stdout or done.stderr)

    def took(output: str, wall: float) -> float:
        """The run's own time from its JSON report (``seconds``), else the clock's."""
        try:
            return float(json.loads(output)["seconds"])
        except (ValueError, KeyError, TypeError):
            return wall

    # The command's own start (Django, the apps) is not pruning: the command reports its own
    # time; the clock less a start of `manage.py shell` is kept beside it.
    out["startup_s"], _ = run("shell", "-c", "pass")
    command = ["prune_history", "--older-than", "60d", "--json"]
    out["periods_s"] = out["periods_wall_s"] = 0.0
    if whole:
        # First the whole periods alone (--partitions-only), then what is left before the
        # cutoff, row by row: the two costs apart.
        seconds, output = run(*command, "--partitions-only")
        out["periods_output"] = output[-2000:]
        out["periods_wall_s"] = max(0.0, seconds - out["startup_s"])
        out["periods_s"] = took(output, out["periods_wall_s"])
        settle_stats()
        with common.pg_connect(db) as conn:
            out["after_periods"] = sizes(conn)
    seconds, output = run(*command)
    out["output"] = output[-2000:]
    out["seconds"] = out["periods_s"] + took(output, max(0.0, seconds - out["startup_s"]))
    settle_stats()
    with common.pg_connect(db) as conn:
        out["after"] = sizes(conn)
        out["dead"] = {name: stats["dead"] for name, stats in counters(db)["tables"].items()}
        started = time.perf_counter()
        for table in TABLES:
            conn.execute(f"VACUUM {table}")
        out["vacuum_s"] = time.perf_counter() - started
        out["after_vacuum"] = sizes(conn)
    removed = (
        out["before"]["scheduling_execution"]["rows"] - out["after"]["scheduling_execution"]["rows"]
    )
    out["removed"] = removed
    out["rows_per_s"] = removed / out["seconds"] if out["seconds"] else 0.0
    return out


# --- the driver -----------------------------------------------------------------------------


def measure(args: Any) -> dict[str, Any]:
    global BUILT_AT
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    BUILT_AT = now
    data: dict[str, Any] = {
        "executions": args.executions,
        "jobs": args.jobs,
        "days": args.days,
        "per_day": min(args.per_day, args.executions // 2),
        "flood_jobs": args.flood,
        "rounds": args.rounds,
        "task_ids": args.task_ids,
        "written": "oldest first",
        "facts": common.machine_facts(),
    }
    data["build"] = build(args, now)
    rounds: list[dict[str, Any]] = []
    new = (args.jobs + 1, args.jobs + args.flood)
    old = (1, args.jobs)
    for k in range(args.rounds):
        order = LEDGERS if k % 2 == 0 else LEDGERS[::-1]
        found: dict[str, Any] = {}
        for ledger in order:
            db = ledger_db(ledger)
            print(f"round {k + 1}, {ledger}: flood ...", flush=True)
            found[ledger] = {
                "flood_new": flood(db, *new),
                "flood_history": flood(db, *old),
                "raw": raw_insert(db, *new, args.task_ids),
            }
            if not args.no_worker:
                found[ledger]["worker"] = worker(db, args)
            make_due(db, 0, 0)
            print(f"round {k + 1}, {ledger}: reads ...", flush=True)
            found[ledger]["reads"] = reads(db, ledger_db("big"), now)
            print(f"round {k + 1}, {ledger}: {summary(found[ledger])}", flush=True)
        rounds.append(found)
    data["rounds_data"] = rounds
    data["ranges"] = {ledger: range_sizes(ledger_db(ledger), now) for ledger in LEDGERS}
    if not args.no_prune:
        print("prune ...", flush=True)
        data["prune"] = prune(ledger_db("big"))
    return data


def summary(found: dict[str, Any]) -> str:
    parts = [
        f"{key} {found[key].get('rate', float('nan')):,.0f}/s"
        for key in ("flood_new", "flood_history", "worker")
        if key in found
    ]
    return ", ".join(parts)


# --- the report -----------------------------------------------------------------------------


def series(data: dict[str, Any], ledger: str, *path: str) -> list[float]:
    values = []
    for found in data["rounds_data"]:
        value: Any = found.get(ledger, {})
        for key in path:
            value = value.get(key, {}) if isinstance(value, dict) else {}
        if isinstance(value, int | float):
            values.append(float(value))
    return values


def best_median(values: list[float], *, low: bool = False) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    return (min(values) if low else max(values)), common.median(values)


RATE_HEADERS = [
    "measurement",
    "big: best",
    "big: median",
    "empty: best",
    "empty: median",
    "big / empty (medians)",
]


def rate_rows(data: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for label, path, low in (
        ("flood, new jobs (occurrences/s)", ("flood_new", "rate"), False),
        ("flood, new jobs: claim call (ms, median)", ("flood_new", "claim_call_ms"), True),
        ("flood, long histories (occurrences/s)", ("flood_history", "rate"), False),
        ("flood, long histories: claim call (ms)", ("flood_history", "claim_call_ms"), True),
        ("raw INSERT … SELECT, bare table (rows/s)", ("raw", "bare"), False),
        ("raw INSERT … SELECT, executions table (rows/s)", ("raw", "ledger"), False),
        ("worker, stock prefork -c 2 (tasks/s)", ("worker", "rate"), False),
    ):
        big = best_median(series(data, "big", *path), low=low)
        empty = best_median(series(data, "empty", *path), low=low)
        ratio = big[1] / empty[1] if empty[1] == empty[1] and empty[1] else float("nan")
        rows.append([label, big[0], big[1], empty[0], empty[1], f"{ratio:.2f}"])
    return rows


COUNTER_HEADERS = [
    "flood",
    "table or index",
    "big: blocks read",
    "empty: blocks read",
    "big: blocks hit",
    "empty: blocks hit",
]


def counter_rows(data: dict[str, Any]) -> list[list[Any]]:
    """Median per index over the rounds: buffer reads (from outside shared_buffers) and hits."""
    rows: list[list[Any]] = []
    for flood_key, label in (("flood_new", "new jobs"), ("flood_history", "long histories")):
        names = sorted(
            {
                name
                for found in data["rounds_data"]
                for name, v in found["big"][flood_key]
                .get("counters", {})
                .get("indexes", {})
                .items()
                if v["table"] in TABLES
            }
        )
        for name in names:
            cells = []
            for what in ("blks_read", "blks_hit"):
                for ledger in LEDGERS:
                    cells.append(
                        common.median(
                            series(data, ledger, flood_key, "counters", "indexes", name, what)
                        )
                    )
            rows.append([label, name, cells[0], cells[1], cells[2], cells[3]])
        for table in ("scheduling_execution", "scheduling_job"):
            for what, word in (("upd", "rows updated"), ("hot_upd", "of them HOT")):
                big = common.median(
                    series(data, "big", flood_key, "counters", "tables", table, what)
                )
                empty = common.median(
                    series(data, "empty", flood_key, "counters", "tables", table, what)
                )
                rows.append([label, f"{table}: {word}", big, empty, None, None])
    return rows


READ_HEADERS = [
    "read",
    "rows in range (big)",
    "big cold: best",
    "big cold: median",
    "big warm: median",
    "empty cold: median",
    f"under {TARGET_MS:.0f} ms cold",
]


def read_rows(data: dict[str, Any]) -> list[list[Any]]:
    labels = list(data["rounds_data"][0]["big"]["reads"].get("reads", {}))
    rows = []
    for label in labels:
        cold = series(data, "big", "reads", "reads", label, "cold")
        warm = series(data, "big", "reads", "reads", label, "warm")
        empty = series(data, "empty", "reads", "reads", label, "cold")
        rows.append(
            [
                label,
                data["ranges"]["big"].get(
                    label.removesuffix(FIRST_PAGE), "1 hour" if label == SETTLE_ONE else "—"
                ),
                min(cold),
                common.median(cold),
                common.median(warm),
                common.median(empty),
                "yes" if common.median(cold) < TARGET_MS else "no",
            ]
        )
    return rows


SIZE_HEADERS = ["table or index", "rows", "MiB", "bytes per row", "MiB per million executions"]


def size_rows(data: dict[str, Any], key: str = "big_sizes") -> list[list[Any]]:
    found = data["build"][key]
    executions = found["scheduling_execution"]["rows"] or 1
    rows: list[list[Any]] = []
    for table, info in found.items():
        n = info["rows"] or 1
        parts = [(f"{table} (all)", info["total"]), (f"{table}: heap", info["heap"])]
        parts += [(f"  index {name}", size) for name, size in info["indexes"].items()]
        for label, size in parts:
            rows.append(
                [label, info["rows"], size / 2**20, size / n, size / 2**20 / executions * 1e6]
            )
    return rows


def prune_rows(data: dict[str, Any]) -> list[list[Any]]:
    found = data.get("prune")
    if not found:
        return []
    rows = []
    for table in TABLES:
        periods = found.get("after_periods", found["after"])
        rows.append(
            [
                table,
                found["before"][table]["rows"],
                periods[table]["rows"],
                periods[table]["total"] / 2**20,
                found["after"][table]["rows"],
                found["before"][table]["total"] / 2**20,
                found["after"][table]["total"] / 2**20,
                found["after_vacuum"][table]["total"] / 2**20,
                found["dead"].get(table, 0),
            ]
        )
    return rows


def _dropped_whole(found: dict[str, Any]) -> int:
    before = found["before"]["scheduling_execution"]["rows"]
    return int(before - found["after_periods"]["scheduling_execution"]["rows"])


PRUNE_HEADERS = [
    "table",
    "rows before",
    "rows after whole periods",
    "MiB after whole periods",
    "rows after",
    "MiB before",
    "MiB after",
    "MiB after VACUUM",
    "dead rows left",
]


def tables(data: dict[str, Any], *, markdown: bool) -> list[str]:
    out = [
        "Flood, raw limit and worker:",
        "",
        common.render_table(RATE_HEADERS, rate_rows(data), markdown=markdown),
        "",
        "Index blocks read and hit, table rows updated (median per flood):",
        "",
        common.render_table(COUNTER_HEADERS, counter_rows(data), markdown=markdown),
        "",
        "Reads (ms):",
        "",
        common.render_table(READ_HEADERS, read_rows(data), markdown=markdown),
        "",
        "Sizes of the big ledger after the build:",
        "",
        common.render_table(SIZE_HEADERS, size_rows(data), markdown=markdown),
    ]
    if data.get("prune"):
        found = data["prune"]
        out += [
            "",
            f"`prune_history --older-than 60d`: removed {found['removed']:,} executions in"
            f" {found['seconds']:.1f} s ({found['rows_per_s']:,.0f} executions/s with their"
            f" attempts); VACUUM afterwards {found['vacuum_s']:.1f} s."
            + (
                ""
                if "after_periods" not in found
                else " On the partitioned history, first the whole periods that end before the"
                " cutoff (`--partitions-only`): "
                + f"{_dropped_whole(found):,}"
                + f" executions in {found['periods_s']:.2f} s as the command reports it"
                + (
                    f" ({found['periods_wall_s']:.2f} s by the clock, less a start of"
                    " `manage.py shell`)"
                    if "periods_wall_s" in found
                    else ""
                )
                + ", their space returned at once;"
                " then the rest before the cutoff, in the period it falls in, row by row."
            )
            + (
                ""
                if data.get("written") == "oldest first"
                else " This build wrote the history newest first, so the pruned rows sat at"
                " the end of the files and VACUUM could cut them off; in a ledger written in"
                " time order they sit at the start, and VACUUM keeps the space for new rows."
            ),
            "",
            common.render_table(PRUNE_HEADERS, prune_rows(data), markdown=markdown),
        ]
    return out


def section(data: dict[str, Any]) -> list[str]:
    facts, load = data["facts"], data["build"]["load"]
    left = max(
        (
            found[ledger]["reads"].get("ledger_buffers_left", 0)
            for found in data["rounds_data"]
            for ledger in LEDGERS
        ),
        default=0,
    )
    return [
        f"{data['executions']:,} finished executions and one attempt each for"
        f" {data['jobs']:,} jobs over {data['days']} days, the last day holding"
        f" {data['per_day']:,} (task ids {data['task_ids']}), beside an empty ledger with the"
        f" same {data['jobs'] + data['flood_jobs']:,} jobs; {data['rounds']} rounds, alternating"
        " which ledger goes first; best and median of the rounds (`bench/history.py`).",
        "",
        f"Build, set-based (`INSERT … SELECT` from `generate_series`, secondary indexes built"
        f" after the load): executions {load['executions_s']:.0f} s, attempts"
        f" {load['attempts_s']:.0f} s, indexes {load['indexes_s']:.0f} s"
        f" ({load['rows_per_s']:,.0f} rows/s over the three), `VACUUM ANALYZE`"
        f" {load['vacuum_s']:.0f} s.",
        "",
        "*Flood*: the shipped scheduler loop (fast path, one process) claims and publishes every"
        f" due job; *new jobs* are {data['flood_jobs']:,} jobs without executions, *long"
        f" histories* the {data['jobs']:,} jobs that own the history. *Raw*: the same rows as"
        " the new-jobs flood in one `INSERT … SELECT`, into a bare copy of the table (no index,"
        " no constraint) and into the executions table (rolled back). *Worker*: due jobs"
        " published in one tick and drained by a stock worker.",
        "",
        "*Cold* reads: PostgreSQL is not restarted and the OS page cache is not dropped (this"
        " machine's RAM holds the whole database), so cold means *not in shared_buffers*: before"
        " each cold read `pg_prewarm` reads a ballast table of five times `shared_buffers`,"
        " and the read gets a new database session. The hourly chart's settled hours are"
        " counted first, as a running scheduler counts each hour once it settles, and kept in"
        " the ledger for every page and every restart; the chart and the whole page are timed"
        " once more with none kept (*no settled hour kept yet*: a ledger no scheduler has"
        " counted, a one-time cost), and the scheduler's own count of one hour is timed too."
        f" At most {left:,} buffers of the"
        " ledger's database were left in shared_buffers after an eviction. Warm: the same read"
        " again at once. Each round's executions are deleted after it and nothing vacuums"
        " them on a server with autovacuum off, so the empty ledger carries the dead rows of"
        " its floods: some of its cold reads are slower than the big ledger's for that.",
        "",
        *tables(data, markdown=True),
        "",
        f"Machine: {facts['nproc']} cores, {facts['cpu']}; PostgreSQL {facts['postgresql']};"
        " load average at start "
        + ", ".join(f"{x:.2f}" for x in facts["loadavg"])
        + ", after "
        + ", ".join(f"{x:.2f}" for x in data.get("load_after", []))
        + ".",
        "",
        *common.command_block(data),
    ]


def main() -> None:
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=10_000_000)
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs that own the history")
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--per-day", type=int, default=1_000_000, help="executions of the last day")
    parser.add_argument("--flood", type=int, default=50_000, help="new jobs due at once")
    parser.add_argument("--worker-tasks", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--task-ids", choices=("auto", "v4", "v7"), default="auto")
    parser.add_argument("--no-worker", action="store_true")
    parser.add_argument("--no-prune", action="store_true")
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/benchmarks.md")
    parser.add_argument("--render", action="store_true", help="the section from saved results")
    args = parser.parse_args()
    if args.quick:
        args.executions, args.jobs, args.flood, args.per_day = 100_000, 1_000, 5_000, 20_000
        args.worker_tasks, args.rounds = 200, 1
    if args.task_ids == "auto":
        args.task_ids = claim_task_ids()
    if not args.render:
        try:
            data = measure(args)
        finally:
            common.redis_cleanup()
            if not args.keep:
                for ledger in LEDGERS:
                    common.drop_db(ledger_db(ledger))
        common.save_result(NAME, data)
    data = common.load_result(NAME) or {}
    print("\n".join(tables(data, markdown=False)))
    if not args.no_docs and not args.quick:
        common.write_docs_section(DOC, SECTION, section(data))
        print(f"wrote {DOC.relative_to(common.ROOT)} ({SECTION[3:]})")


if __name__ == "__main__":
    if not common.child_main({"reads": child_reads}):
        main()
