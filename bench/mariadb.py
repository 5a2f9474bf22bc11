"""Measurements 2 and 4 on MariaDB beside PostgreSQL, in one run on one machine.

For each database, one after the other on the same broker (Redis) and the same code:

- **the flood** (measurement 2, ``dispatch_rate.py``): N jobs (20,000; ``--quick``: 2,000)
  due at one instant, one scheduler process on the fast path, the clock from its first tick
  until every execution is QUEUED; and before it, on the same rows, the database's **raw
  one-statement claim** repeated 1,000 rows at a time until nothing is due: PostgreSQL's
  ``SELECT … FOR NO KEY UPDATE SKIP LOCKED`` inside an ``UPDATE`` (``dispatch_rate.RAW_CLAIM``),
  and MariaDB's ``UPDATE … ORDER BY next_due_at LIMIT 1000``, the most one statement says
  there (MariaDB takes no locking clause in an ``UPDATE``'s subquery on the same table);
- **the worker with history** (measurement 4, ``worker_throughput.py``): K due jobs
  (2,000; ``--quick``: 300) published by ``manage.py runscheduler --once``, then a stock
  ``celery worker`` (prefork, 2 processes) runs them, each run claiming its execution, writing
  its attempt and completing both; against the **bare** worker (K plain ``@app.task`` no-ops,
  nothing recorded) in the same round. ``--repeat`` rounds; the best of each is compared.

The numbers compare within the run: the machine may be shared, and its load (printed) moves
every absolute number. PostgreSQL comes from ``DATABASE_URL`` as in ``make bench``, MariaDB
from ``BENCH_MARIADB_URL`` (default ``mysql://root@127.0.0.1:3306/``); only databases named
``bench_…`` are made and dropped on either.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

import common
import dispatch_rate
import worker_throughput

DOCS = common.ROOT / "docs" / "benchmarks.md"
SECTION = "## 15. The flood and the worker with history on MariaDB beside PostgreSQL"
MARIADB_URL = os.environ.get("BENCH_MARIADB_URL", "mysql://root@127.0.0.1:3306/")

#: MariaDB's raw claim: one statement, the jobs due first, 1,000 at a time.
MARIADB_RAW_CLAIM = """
UPDATE scheduling_job
   SET next_due_at = next_due_at + INTERVAL 1 HOUR,
       next_occurrence_at = next_occurrence_at + INTERVAL 1 HOUR, updated_at = NOW(6)
 WHERE status = 'active' AND current_execution_id IS NULL AND next_due_at <= NOW(6)
 ORDER BY next_due_at LIMIT 1000
"""


class PostgreSQL:
    """The benchmark database on PostgreSQL, through ``common``'s own loaders."""

    label = "PostgreSQL"

    def __init__(self, name: str) -> None:
        self.name = name

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return common.child_env(self.name, extra=extra)

    def create(self) -> None:
        common.create_db(self.name)

    def drop(self) -> None:
        common.drop_db(self.name)

    def load(self, count: int) -> float:
        with common.pg_connect(self.name) as conn:
            return common.load_jobs(conn, count, due_sql=dispatch_rate.DUE_NOW)

    def reset(self) -> None:
        with common.pg_connect(self.name) as conn:
            common.reset_jobs(conn, due_sql=dispatch_rate.DUE_NOW)

    def statuses(self) -> dict[str, int]:
        with common.pg_connect(self.name) as conn:
            return common.count_executions(conn)

    def raw_claim(self) -> dict[str, Any]:
        return dispatch_rate.raw_claim(self.name, dispatch_rate.RAW_CLAIM)

    def version(self) -> str:
        with common.pg_connect(self.name) as conn:
            return str(conn.execute("SHOW server_version").fetchone()[0])


class MariaDB:
    """The benchmark database on MariaDB: the same rows as ``common.load_jobs`` writes, in
    MariaDB's words (its ``seq_1_to_N`` tables stand for ``generate_series``)."""

    label = "MariaDB"

    def __init__(self, name: str) -> None:
        if not name.startswith("bench_"):
            raise ValueError(f"refusing to use database {name!r}: bench databases start bench_")
        self.name = name
        self.server = urlsplit(MARIADB_URL)

    def url(self) -> str:
        return self.server._replace(path="/" + self.name, query="").geturl()

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return common.child_env(None, extra={"DATABASE_URL": self.url(), **(extra or {})})

    def connect(self, database: str | None = None) -> Any:
        import MySQLdb

        return MySQLdb.connect(
            host=self.server.hostname or "127.0.0.1",
            port=self.server.port or 3306,
            user=unquote(self.server.username or "root"),
            password=unquote(self.server.password or ""),
            database=self.name if database is None else database,
            autocommit=True,
            init_command="SET time_zone = '+00:00'",
        )

    def execute(self, sql: str, params: Any = None, *, database: str | None = None) -> Any:
        connection = self.connect(database)
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchall()
        finally:
            connection.close()

    def create(self) -> None:
        self.drop()
        self.execute(
            f"CREATE DATABASE `{self.name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
            database="",
        )
        subprocess.run(
            [common.PYTHON, "manage.py", "migrate", "--noinput", "-v0"],
            cwd=common.ROOT,
            env=self.env(),
            check=True,
        )

    def drop(self) -> None:
        self.execute(f"DROP DATABASE IF EXISTS `{self.name}`", database="")

    def load(self, count: int) -> float:
        started = time.perf_counter()
        connection = self.connect()
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO auth_user (password, is_superuser, username, first_name,"
                    " last_name, email, is_staff, is_active, date_joined) VALUES ('!', 0,"
                    " 'bench', '', '', '', 0, 1, NOW(6))"
                    " ON DUPLICATE KEY UPDATE is_active = 1"
                )
                cursor.execute("SELECT id FROM auth_user WHERE username = 'bench'")
                (owner,) = cursor.fetchone()
                cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
                for table in ("attempt", "execution", "job", "schedule"):
                    cursor.execute(f"TRUNCATE scheduling_{table}")
                cursor.execute("SET FOREIGN_KEY_CHECKS = 1")
                cursor.execute(
                    "INSERT INTO scheduling_schedule (owner_id, name, `interval`, cron, rrule,"
                    " timezone, run_at, starts_at, ends_at, created_at)"
                    f" SELECT %s, '', 'PT1H', '', '', 'UTC', NULL, NULL, NULL, NOW(6)"
                    f" FROM seq_1_to_{int(count)}",
                    [owner],
                )
                cursor.execute(
                    f"""
                    INSERT INTO scheduling_job (name, task, args, kwargs, task_table,
                        task_row_id, status, next_due_at, next_occurrence_at, execute_count,
                        last_keepalive_at, note, misfire, overlap, jitter, timeout,
                        max_retries, retry_backoff, retry_backoff_max, queue, priority,
                        created_at, updated_at, current_execution_id, owner_id, schedule_id,
                        pause_reason)
                    SELECT CONCAT('bench-', seq), %s, '[]', '{{}}', '', NULL, 'active',
                        d.due, d.due, 0, NULL, '', 'catch_up', 'forbid', 0, 300, 3, NULL,
                        NULL, %s, NULL, d.due - INTERVAL 1 HOUR, NOW(6), NULL, %s, seq, ''
                      FROM seq_1_to_{int(count)},
                           (SELECT NOW(6) - INTERVAL 1 SECOND AS due) AS d
                    """,
                    [common.BENCH_TASK, common.QUEUE, owner],
                )
                cursor.execute("ANALYZE TABLE scheduling_job, scheduling_schedule")
                cursor.fetchall()
        finally:
            connection.close()
        return time.perf_counter() - started

    def reset(self) -> None:
        connection = self.connect()
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE scheduling_job SET next_due_at = NOW(6) - INTERVAL 1 SECOND,"
                    " next_occurrence_at = NOW(6) - INTERVAL 1 SECOND,"
                    " created_at = NOW(6) - INTERVAL 3601 SECOND, current_execution_id = NULL,"
                    " status = 'active', execute_count = 0"
                )
                cursor.execute("DELETE FROM scheduling_attempt")
                cursor.execute("DELETE FROM scheduling_execution")
        finally:
            connection.close()

    def statuses(self) -> dict[str, int]:
        rows = self.execute("SELECT status, count(*) FROM scheduling_execution GROUP BY status")
        return {str(status): int(n) for status, n in rows}

    def raw_claim(self) -> dict[str, Any]:
        connection = self.connect()
        rows = 0
        try:
            with connection.cursor() as cursor:
                started = time.perf_counter()
                while True:
                    count = cursor.execute(MARIADB_RAW_CLAIM)
                    if count <= 0:
                        break
                    rows += count
                seconds = time.perf_counter() - started
        finally:
            connection.close()
        return {"count": rows, "seconds": seconds, "rate": rows / seconds if seconds else 0.0}

    def version(self) -> str:
        row = self.execute(
            "SELECT CONCAT(VERSION(), ' (innodb_buffer_pool_size ',"
            " @@innodb_buffer_pool_size DIV 1048576, 'M, innodb_flush_log_at_trx_commit ',"
            " @@innodb_flush_log_at_trx_commit, ')')"
        )
        return str(row[0][0])


@contextlib.contextmanager
def created(database: PostgreSQL | MariaDB, *, keep: bool) -> Iterator[None]:
    database.create()
    try:
        yield
    finally:
        if not keep:
            database.drop()


def flood(database: PostgreSQL | MariaDB, n: int) -> dict[str, Any]:
    """The raw claim on N due rows, then one scheduler process (fast path) on the same rows."""
    out: dict[str, Any] = {"n": n, "load_s": database.load(n)}
    out["raw_claim"] = database.raw_claim()
    database.reset()
    common.redis_cleanup()
    params = {"start_at": time.time() + 4.0, "profile": ""}
    child = common.run_child(
        common.child_argv("dispatch_rate.py", "flood", params),
        database.env({"SCHEDULING_FAST_PUBLISH": "true"}),
        timeout=900,
        label="flood",
    )
    if not child.ok:
        out["error"] = child.error
        return out
    data = child.data
    statuses = database.statuses()
    wall = data["finished"] - data["started"]
    spent = {k: v for k, v in data["spent"].items() if k != "claim_calls_ms"}
    out.update(
        wall_s=wall,
        queued=statuses.get("queued", 0),
        rate=statuses.get("queued", 0) / wall,
        messages=common.queue_length(common.redis_client()),
        spent=spent,
    )
    common.redis_cleanup()
    return out


def bare_round(database: PostgreSQL | MariaDB, count: int) -> dict[str, Any]:
    """K plain tasks in the queue, then a stock worker drains them (nothing recorded)."""
    common.redis_cleanup()
    filled = common.run_child(
        common.child_argv("worker_throughput.py", "fill", {"count": count}),
        database.env(),
        timeout=300,
        label="fill",
    )
    if not filled.ok:
        return {"count": count, "error": filled.error}
    result = worker_throughput.drain(count, database.env(), timeout=120 + count / 50)
    common.redis_cleanup()
    return result


def history_round(database: PostgreSQL | MariaDB, count: int) -> dict[str, Any]:
    """K due jobs published in one tick, then a stock worker runs them with their history."""
    common.redis_cleanup()
    database.reset()
    subprocess.run(
        [common.PYTHON, "manage.py", "runscheduler", "--once", "--batch-size", str(count)],
        cwd=common.ROOT,
        env=database.env(),
        check=True,
        capture_output=True,
    )
    messages = common.queue_length(common.redis_client())
    result = worker_throughput.drain(count, database.env(), timeout=120 + count / 10)
    statuses = database.statuses()
    result.update(messages=messages, completed=statuses.get("completed", 0), statuses=statuses)
    common.redis_cleanup()
    return result


def worker(database: PostgreSQL | MariaDB, count: int, rounds: int) -> dict[str, Any]:
    """Alternating bare and history rounds; the best valid round of each."""
    database.load(count)
    out: dict[str, Any] = {"count": count, "bare": [], "history": []}
    for _ in range(rounds):
        out["bare"].append(bare_round(database, count))
        out["history"].append(history_round(database, count))
    best = {
        side: max(
            (r["rate"] for r in out[side] if "rate" in r and r.get("completed", count) == count),
            default=0.0,
        )
        for side in ("bare", "history")
    }
    out["best"] = best
    out["ratio"] = best["history"] / best["bare"] if best["bare"] else None
    return out


def measure(args: Any) -> dict[str, Any]:
    n = 2_000 if args.quick else args.jobs
    count = 300 if args.quick else args.tasks
    rounds = 1 if args.quick else args.repeat
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"n": n, "count": count, "rounds": rounds, "engines": {}}
    out["load_before"] = os.getloadavg()
    for database in (PostgreSQL(common.db_name("pgside")), MariaDB(common.db_name("mariadb"))):
        try:
            with created(database, keep=args.keep):
                out["engines"][database.label] = {
                    "version": database.version(),
                    "flood": flood(database, n),
                    "worker": worker(database, count, rounds),
                }
        finally:
            common.redis_cleanup()
    return out


HEADERS = ["database", "what", "rows or tasks", "seconds", "per second", "note"]


def table_rows(data: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for label, engine in data["engines"].items():
        flood_run = engine["flood"]
        raw = flood_run["raw_claim"]
        rows.append([label, "raw one-statement claim", raw["count"], raw["seconds"],
                     raw["rate"], "1,000 rows a statement, until none is due"])  # fmt: skip
        if "error" in flood_run:
            rows.append([label, "flood, fast path, 1 process", data["n"], None, None,
                         "failed: " + flood_run["error"].splitlines()[0]])  # fmt: skip
        else:
            total = sum(flood_run["spent"].values()) or 1.0
            split = ", ".join(
                f"{k} {v / total:.0%}"
                for k, v in sorted(flood_run["spent"].items(), key=lambda kv: -kv[1])
            )
            rows.append([label, "flood, fast path, 1 process", flood_run["queued"],
                         flood_run["wall_s"], flood_run["rate"],
                         f"{flood_run['messages']:,} messages; {split}"])  # fmt: skip
        work = engine["worker"]
        for side, name in (("bare", "bare worker (no history)"), ("history", "worker + history")):
            for number, result in enumerate(work[side], 1):
                if "rate" not in result:
                    rows.append([label, f"{name}, round {number}", work["count"], None, None,
                                 result.get("error", "")])  # fmt: skip
                    continue
                note = ""
                if side == "history":
                    note = f"{result['completed']:,} COMPLETED"
                rows.append([label, f"{name}, round {number}", result["count"],
                             result["seconds"], result["rate"], note])  # fmt: skip
        if work["ratio"] is not None:
            rows.append([label, "history / bare (best rounds)", None, None, None,
                         f"{work['ratio']:.0%}"])  # fmt: skip
    return rows


def reading(data: dict[str, Any]) -> list[str]:
    """What the run says, MariaDB against PostgreSQL, in the run's own numbers."""
    engines = data["engines"]
    if set(engines) != {"PostgreSQL", "MariaDB"}:
        return []
    pg, maria = engines["PostgreSQL"], engines["MariaDB"]

    def share(mine: float | None, theirs: float | None) -> str:
        return f"{mine / theirs:.0%}" if mine and theirs else "n/a"

    return [
        "MariaDB against PostgreSQL in this run: the raw one-statement claim at "
        f"{share(maria['flood']['raw_claim']['rate'], pg['flood']['raw_claim']['rate'])}, the "
        f"flood at {share(maria['flood'].get('rate'), pg['flood'].get('rate'))}, the worker with "
        f"history at {share(maria['worker']['best']['history'], pg['worker']['best']['history'])}"
        " (best rounds). The database itself is not the gap: its raw claim keeps up with "
        "PostgreSQL's (it locks without SKIP LOCKED, which MariaDB cannot say in an UPDATE of "
        "the table it reads, so it is a floor for one claimer, not for several). The gap is "
        "the engine's path on MySQL/MariaDB, the ORM's as on SQLite: the due rows locked and "
        "read, each job's next time planned in Python, the executions inserted and the jobs "
        "written back by `bulk_update` (a `CASE` branch per row, 500 rows a statement), where "
        "PostgreSQL plans and writes a batch in one statement; that claim is nearly all of the "
        "flood's time. A run's start and end there are likewise several statements each where "
        "PostgreSQL has one.",
    ]


def section_body(data: dict[str, Any]) -> list[str]:
    engines = data["engines"]
    versions = "; ".join(f"{label} {engine['version']}" for label, engine in engines.items())
    before = ", ".join(f"{x:.2f}" for x in data["load_before"])
    after = ", ".join(f"{x:.2f}" for x in data["load_after"])
    return [
        "Measurements 2 and 4 on each database, one after the other in one run, on the same "
        "broker (Redis) and code (`bench/mariadb.py`; its docstring says what each row is). "
        f"The machine was shared and loaded (load average {before} before, {after} after, on "
        "two cores): compare the rows of one run with each other, not with the sections above.",
        "",
        common.render_table(HEADERS, table_rows(data), markdown=True),
        "",
        *reading(data),
        "",
        f"Servers: {versions}.",
        "",
        "```",
        f"DATABASE_URL={common.server_hint()} BENCH_MARIADB_URL={MARIADB_URL} {data['command']}",
        "```",
        f"Finished {data['finished_at']}.",
    ]


def main() -> None:
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs in the flood")
    parser.add_argument("--tasks", type=int, default=2_000, help="tasks per worker round")
    parser.add_argument("--repeat", type=int, default=2, help="worker rounds per side")
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument(
        "--docs-only", action="store_true", help="write the saved result's section, measure nothing"
    )
    args = parser.parse_args()
    if args.docs_only:
        data = common.load_result("mariadb")
        if data is None:
            raise SystemExit("no saved result: run without --docs-only first")
        common.write_docs_section(DOCS, SECTION, section_body(data))
        return
    data = measure(args)
    path = common.save_result("mariadb", data)
    data = common.load_result("mariadb") or data
    print(f"\nThe flood ({data['n']:,} jobs) and the worker ({data['count']:,} tasks)")
    print(common.render_table(HEADERS, table_rows(data), markdown=False))
    print(f"\nsaved {path}")
    if args.write_docs:
        common.write_docs_section(DOCS, SECTION, section_body(data))


if __name__ == "__main__":
    main()
