"""Dashboard, /health/ and /metrics reads with a million executions in the table.

Loads ``--executions`` executions (default 1,000,000) spread evenly over the last ``--days``
days for ``--jobs`` jobs with set-based ``generate_series`` inserts, vacuums and analyzes the
tables as autovacuum would, and then times every panel of the admin dashboard, the whole page's
reads, ``/health/``'s checks and a ``/metrics`` scrape, as the views call them (ORM included).

Two sides, alternating round by round in one run: the schema as shipped, and the same with the
dashboard's two indexes (``execution_recent_idx``, ``execution_failed_idx``) dropped inside a
transaction that is rolled back afterwards, to show what they buy. Best and median of the
rounds are reported; the target is every panel under 100 ms with the indexes.

Writes ``var/bench/dashboard.json`` and its section of docs/benchmarks.md (between the
``dashboard`` markers, which bench/run_all.py keeps when it re-renders the file).
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import common

NAME = "dashboard"
TARGET_MS = 100.0
DOC = common.ROOT / "docs" / "benchmarks.md"
HEADING = "## Dashboard, /health/ and /metrics at a million executions"
# The marker follows the heading, so a section written above this one that ends at the next
# heading (bench/cron_next.py's) never takes the marker with it.
START, END = f"{HEADING}\n<!-- section:dashboard -->", "<!-- /section:dashboard -->"
DASHBOARD_INDEXES = ("execution_recent_idx", "execution_failed_idx")
HEADERS = [
    "read",
    "rows in range",
    "best ms",
    "median ms",
    "best ms, no dashboard indexes",
    "median ms, no dashboard indexes",
    "under 100 ms",
]


def load(conn: Any, *, jobs: int, executions: int, days: float, now: datetime) -> float:
    """Jobs spread over the next two days; executions over the last ``days`` days."""
    started = time.perf_counter()
    owner = common.create_owner(conn)
    conn.execute(
        "TRUNCATE scheduling_attempt, scheduling_execution, scheduling_job, scheduling_schedule"
        " RESTART IDENTITY CASCADE"
    )
    conn.execute(
        "INSERT INTO scheduling_schedule (owner_id, name, interval, cron, rrule, timezone,"
        " created_at) SELECT %s, '', 'PT1H', '', '', 'UTC', now() FROM generate_series(1, %s)",
        [owner, jobs],
    )
    # Columns not named take their database defaults or NULL; Django's defaults are spelled
    # out for the NOT NULL ones.
    conn.execute(
        """
        INSERT INTO scheduling_job (name, task, args, kwargs, task_table, status, next_due_at,
            next_occurrence_at, execute_count, note, misfire, overlap, jitter, timeout,
            max_retries, queue, pause_reason, created_at, updated_at, owner_id, schedule_id)
        SELECT 'bench-' || g, %(task)s, '[]'::jsonb, '{}'::jsonb, '', 'active', d.due, d.due,
            0, '', 'catch_up', 'forbid', interval '0', 300, 3, 'celery', '',
            d.due - interval '1 hour', now(), %(owner)s, g
          FROM generate_series(1, %(count)s) AS g,
               LATERAL (SELECT %(now)s::timestamptz + g * interval '48 hours' / %(count)s
                        AS due) AS d
        """,
        {"task": common.BENCH_TASK, "owner": owner, "count": jobs, "now": now},
    )
    span = days * 86400.0
    # Executions i = 1..N, newest first, one every span/N seconds; job (i mod jobs) + 1, so
    # (job, scheduled_for) stays unique. Statuses: the last 10 minutes' rows are unfinished
    # (a few running, some with a stale heartbeat), older ones 96 % completed, 3 % failed,
    # 1 % skipped; starts lag their due time by 0-2 s.
    conn.execute(
        """
        INSERT INTO scheduling_execution (job_id, task, scheduled_for, status, retry_count,
            task_id, worker, created_at, queued_at, started_at, finished_at, last_heartbeat_at,
            retry_at, last_error, checkpoint, duplicates, updated_at)
        SELECT (g %% %(jobs)s) + 1, %(task)s, t.due,
               t.status, 0, gen_random_uuid(), 'bench@host', t.due, t.due,
               CASE WHEN t.status IN ('pending', 'queued') THEN NULL ELSE t.due + t.lag END,
               CASE WHEN t.status IN ('completed', 'failed', 'skipped')
                    THEN t.due + t.lag + interval '1 second' END,
               CASE WHEN t.status = 'running'
                    THEN CASE WHEN g %% 7 = 0 THEN t.due + interval '1 second'
                              ELSE %(now)s::timestamptz - interval '5 seconds' END END,
               NULL, CASE WHEN t.status = 'failed' THEN 'RuntimeError: bench' ELSE '' END,
               NULL, 0, t.due
          FROM generate_series(1, %(n)s) AS g,
               LATERAL (SELECT
                   %(now)s::timestamptz - (g * %(step)s * interval '1 second') AS due,
                   (random() * 2) * interval '1 second' AS lag,
                   CASE WHEN g * %(step)s < 600 THEN
                          (ARRAY['running', 'queued', 'pending', 'running'])[1 + g %% 4]
                        WHEN g %% 100 < 3 THEN 'failed'
                        WHEN g %% 100 = 3 THEN 'skipped'
                        ELSE 'completed' END AS status) AS t
        """,
        {
            "jobs": jobs,
            "task": common.BENCH_TASK,
            "n": executions,
            "now": now,
            "step": span / executions,
        },
    )
    conn.execute("VACUUM ANALYZE scheduling_execution")
    conn.execute("VACUUM ANALYZE scheduling_job")
    return time.perf_counter() - started


def reads(now: datetime) -> dict[str, Callable[[], Any]]:
    from scheduling.models import SettledHour
    from scheduling.web import dashboard, health, overview
    from scheduling.web.metrics import registry

    def scrape() -> Any:
        from prometheus_client import generate_latest

        return generate_latest(registry)

    return {
        "due in the next hour": lambda: overview.due_soon(now=now),
        "running now": lambda: overview.running(now=now),
        "late": lambda: overview.late(now=now),
        "stale": lambda: overview.stale(now=now),
        "failures, 24 h": lambda: overview.recent_failures(now=now),
        "executions per hour, 24 h": lambda: overview.executions_per_hour(now=now),
        "executions per hour, 24 h, no settled hour kept": lambda: (
            SettledHour.objects.all().delete(),
            overview.executions_per_hour(now=now),
        ),
        "lag p50/p95/p99, last hour": lambda: overview.lag_percentiles(now=now),
        "whole dashboard page (all panels)": lambda: dashboard.panels(now=now, owner_id=None),
        "/health/ checks (database, scheduler, stale)": lambda: {
            name: check(now) for name, check in health.CHECKS.items() if name != "broker"
        },
        "/metrics scrape": scrape,
    }


def range_sizes(conn: Any, now: datetime) -> dict[str, int]:
    def count(sql: str) -> int:
        return int(conn.execute(sql, {"now": now}).fetchone()[0])

    day = "%(now)s::timestamptz - interval '24 hours'"
    return {
        "due in the next hour": count(
            "SELECT count(*) FROM scheduling_job WHERE next_due_at >= %(now)s"
            " AND next_due_at < %(now)s::timestamptz + interval '1 hour'"
        ),
        "running now": count("SELECT count(*) FROM scheduling_execution WHERE status='running'"),
        "stale": count(
            "SELECT count(*) FROM scheduling_execution WHERE status='running'"
            " AND last_heartbeat_at < %(now)s::timestamptz - interval '60 seconds'"
        ),
        "late": count(
            "SELECT count(*) FROM scheduling_execution WHERE status IN ('pending', 'queued')"
            " AND scheduled_for < %(now)s::timestamptz - interval '60 seconds'"
        ),
        "failures, 24 h": count(
            f"SELECT count(*) FROM scheduling_execution WHERE status='failed'"
            f" AND finished_at >= {day}"
        ),
        "executions per hour, 24 h": count(
            f"SELECT count(*) FROM scheduling_execution WHERE scheduled_for >= {day}"
        ),
        "executions per hour, 24 h, no settled hour kept": count(
            f"SELECT count(*) FROM scheduling_execution WHERE scheduled_for >= {day}"
        ),
        "lag p50/p95/p99, last hour": count(
            "SELECT count(*) FROM scheduling_execution"
            " WHERE scheduled_for >= %(now)s::timestamptz - interval '1 hour'"
            " AND started_at IS NOT NULL"
        ),
    }


def measure(rounds: int, now: datetime) -> dict[str, dict[str, list[float]]]:
    """Alternate the two sides round by round; every read once per side per round."""
    from django.db import connection, transaction

    timings: dict[str, dict[str, list[float]]] = {"indexed": {}, "unindexed": {}}
    panels = reads(now)
    for read in panels.values():  # warm the caches and the ORM once
        read()
    for _ in range(rounds):
        for side in ("indexed", "unindexed"):
            with transaction.atomic():
                if side == "unindexed":
                    with connection.cursor() as cursor:
                        for index in DASHBOARD_INDEXES:
                            cursor.execute(f"DROP INDEX {index}")
                for label, read in panels.items():
                    started = time.perf_counter()
                    read()
                    elapsed = (time.perf_counter() - started) * 1000
                    timings[side].setdefault(label, []).append(elapsed)
                transaction.set_rollback(True)
    return timings


def table_rows(data: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for label, sides in data["reads"].items():
        ours, without = sides["indexed"], sides["unindexed"]
        rows.append(
            [
                label,
                data["ranges"].get(label, "—"),
                min(ours),
                statistics.median(ours),
                min(without),
                statistics.median(without),
                "yes" if statistics.median(ours) < TARGET_MS else "no",
            ]
        )
    return rows


def section(data: dict[str, Any]) -> str:
    facts = data["facts"]
    lines = [
        START,
        "",
        f"{data['executions']:,} executions for {data['jobs']:,} jobs, loaded with"
        " `generate_series` and vacuumed, spread evenly over the last N days: the fewer the"
        " days, the more rows each 24-hour panel covers. Each read is timed as the view calls"
        f" it (ORM included), {data['rounds']} rounds, alternating with a side whose two"
        " dashboard indexes are dropped in a rolled-back transaction. The hourly chart reads the"
        " counts of hours that ended over an hour ago from the ledger, where the scheduler keeps"
        " them as each hour settles; its *no settled hour kept* row is a ledger no scheduler has"
        " counted yet (a one-time cost). Milliseconds; target: every panel under"
        f" {TARGET_MS:.0f} ms.",
        "",
    ]
    for run in data["densities"]:
        lines += [
            f"### {run['days']:g} days ({run['per_day']:,.0f} executions a day; load took"
            f" {run['load_seconds']:.0f} s)",
            "",
            common.render_table(HEADERS, table_rows(run), markdown=True),
            "",
        ]
    lines += [
        f"Machine: {facts['nproc']} cores, {facts['cpu']}; PostgreSQL {facts['postgresql']};"
        " load average at start "
        + ", ".join(f"{x:.2f}" for x in facts["loadavg"])
        + f", after {', '.join(f'{x:.2f}' for x in data['load_after'])} (a machine shared"
        " with other work inflates the medians).",
        "",
        "Command (from the repository root):",
        "",
        "```",
        data["command"],
        "```",
        END,
    ]
    return "\n".join(lines)


def write_section(text: str) -> None:
    """Replace the dashboard section of docs/benchmarks.md, or append it."""
    current = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    if pattern.search(current):
        updated = pattern.sub(lambda _: text, current)
    else:
        updated = current.rstrip("\n") + "\n\n" + text + "\n"
    DOC.write_text(updated)


def run_density(args: Any, days: float, now: datetime) -> dict[str, Any]:
    """Load the executions over ``days`` days and time every read."""
    name = common.db_name(NAME)
    with common.bench_db(name, keep=args.keep):
        with common.pg_connect(name) as conn:
            print(f"loading {args.executions:,} executions over {days:g} days ...", flush=True)
            seconds = load(conn, jobs=args.jobs, executions=args.executions, days=days, now=now)
            ranges = range_sizes(conn, now)
        from django.db import connections

        try:
            timings = measure(args.rounds, now)
        finally:
            connections.close_all()
    return {
        "days": days,
        "per_day": args.executions / days,
        "load_seconds": seconds,
        "ranges": ranges,
        "reads": {
            label: {"indexed": timings["indexed"][label], "unindexed": timings["unindexed"][label]}
            for label in timings["indexed"]
        },
    }


def main() -> None:
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument(
        "--days", default="30,7", help="comma-separated spans of history to try (30,7)"
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/benchmarks.md")
    args = parser.parse_args()
    if args.quick:
        args.executions, args.jobs, args.rounds = 20_000, 200, 3
    facts = common.machine_facts()
    now = datetime.now(UTC).replace(microsecond=0)
    os.environ["DATABASE_URL"] = common.db_url(common.db_name(NAME))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    common.setup_django()
    densities = [run_density(args, float(days), now) for days in args.days.split(",") if days]
    data = {
        "executions": args.executions,
        "jobs": args.jobs,
        "rounds": args.rounds,
        "densities": densities,
        "facts": facts,
    }
    path = common.save_result(NAME, data)
    data = common.load_result(NAME) or data
    for run in data["densities"]:
        print(f"\n{run['days']:g} days ({run['per_day']:,.0f} a day)")
        print(common.render_table(HEADERS, table_rows(run), markdown=False))
    if not args.no_docs and not args.quick:
        write_section(section(data))
        print(f"wrote {DOC.relative_to(common.ROOT)} (dashboard section) and {path}")


if __name__ == "__main__":
    main()
