"""How long the move to the partitioned history takes, there and back, and what it locks.

An existing installation moves to partitioned tables by ``manage.py migrate`` (migration
``scheduling.0017_partitioned_history``): a copy of both tables under a lock, during which
workers and schedulers wait. This measures that wait on a ledger of ``--executions`` finished
executions (one attempt each, spread over ``--days`` days), built set-based in a ``bench_``
database at the plain tables' migration: the forward move, then the move back, per round.

    python bench/partition_move.py --executions 1000000 --rounds 2
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import common

PLAIN = "0016_attempt_scheduled_for"
SECTION = "## Moving to the partitioned history"


def migrate(url: str, target: str = "") -> float:
    env = {**os.environ, "DATABASE_URL": url}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0", "scheduling", *[t for t in [target] if t]],
        cwd=common.ROOT, env=env, check=True,
    )  # fmt: skip
    return time.perf_counter() - started


def build(conn: Any, *, executions: int, jobs: int, days: int) -> float:
    """Jobs and finished executions with one attempt each, in two INSERT ... SELECT."""
    started = time.perf_counter()
    common.load_jobs(conn, jobs, due_sql="now() + interval '1 year'")
    conn.execute(
        f"""
        INSERT INTO scheduling_execution (job_id, task, scheduled_for, status, retry_count,
               task_id, worker, created_at, queued_at, started_at, finished_at, last_error,
               duplicates, item_failures, item_failure_detail, updated_at)
        SELECT j.min + (g % {jobs}), 'scheduling.diagnostics.noop',
               now() - interval '{days} days' * (g::float / {executions}), 'completed', 0,
               gen_random_uuid(), 'bench', now(), now(), now(), now(), '', 0, 0, '', now()
          FROM generate_series(1, {executions}) g, (SELECT min(id) FROM scheduling_job) j
        """
    )
    conn.execute(
        """
        INSERT INTO scheduling_attempt (execution_id, scheduled_for, number, worker, pid,
               started_at, finished_at, outcome, error)
        SELECT id, scheduled_for, 1, 'bench', 1, now(), now(), 'completed', ''
          FROM scheduling_execution
        """
    )
    conn.execute("VACUUM ANALYZE scheduling_execution")
    conn.execute("VACUUM ANALYZE scheduling_attempt")
    return time.perf_counter() - started


def main() -> None:
    parser = common.make_parser(__doc__ or "")
    parser.add_argument("--executions", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    forward: list[float] = []
    back: list[float] = []
    with common.bench_db(common.db_name("move"), keep=args.keep) as name:
        url = common.db_url(name)
        migrate(url, PLAIN)
        with common.pg_connect(name) as conn:
            built = build(conn, executions=args.executions, jobs=args.jobs, days=args.days)
            size = conn.execute(
                "SELECT pg_total_relation_size('scheduling_execution') "
                "+ pg_total_relation_size('scheduling_attempt')"
            ).fetchone()[0]
        for _ in range(args.rounds):
            # A migrate with nothing to do: the process's own start, not part of the pause.
            idle = migrate(url, PLAIN)
            forward.append(migrate(url) - idle)
            back.append(migrate(url, PLAIN) - idle)
    rows = [
        [label, common.fmt(min(times)), common.fmt(common.median(times)),
         f"{args.executions / common.median(times):,.0f}"]
        for label, times in (("forward (plain to partitioned)", forward),
                             ("back (partitioned to plain)", back))
    ]  # fmt: skip
    headers = ["move", "best s", "median s", "executions/s (median)"]
    print(common.render_table(headers, rows, markdown=False))
    body = [
        f"{args.executions:,} finished executions and as many attempts over {args.days} days "
        f"({size / 2**20:,.0f} MiB with indexes; built set-based in {built:.0f} s); "
        f"{args.rounds} rounds, each the move there and back, less the time of a `migrate` with "
        "nothing to do (the process's start). Workers and schedulers wait for the whole move "
        "(both tables and the jobs' are locked), so this is their pause.",
        "",
        common.render_table(headers, rows, markdown=True),
        "",
    ]
    common.save_result("partition_move", {"forward": forward, "back": back, "size": size})
    body += common.command_block(common.load_result("partition_move"))
    common.write_docs_section(common.ROOT / "docs" / "benchmarks.md", SECTION, body)


if __name__ == "__main__":
    main()
