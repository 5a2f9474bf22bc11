"""The worker with history against procrastinate's, by how many tasks wait when it starts.

Why: the two are not alike in how their cost grows with the queue. A Celery worker takes the
next message from the broker, whatever the backlog; procrastinate's worker asks PostgreSQL for
the next ``todo`` row of its jobs table, which costs more the more rows wait (its rate rises
as its queue empties). One queue depth therefore says little: this runs both at several
depths (``--sizes``, default 800, 2,500 and 5,000), the sides alternating round by round at
each depth, exactly as ``worker_throughput.py`` runs them (the same worker, settings, clocks
and ledger check), and reports the medians and their ratio for each depth.

    python bench/worker_depth.py --sizes 800,2500,5000 --repeat 3 [--broker amqp] [--write-docs]
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import common
import worker_throughput

DOCS = common.ROOT / "docs" / "benchmarks.md"
SECTION = "## 12. The worker against procrastinate by queue depth"
SIDES = ("history", "procrastinate")


def _valid(result: dict[str, Any]) -> bool:
    """A round counts only if every task of it succeeded (a fast failure is not fast)."""
    return "rate" in result and result.get("completed", result["count"]) == result["count"]


def measure(sizes: list[int], rounds: int, *, keep: bool = False) -> dict[str, Any]:
    """Alternating rounds of both sides at every depth, each depth in its own database."""
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        str(n): {side: [] for side in SIDES} for n in sizes
    }
    databases = {n: common.db_name(f"depth{n}") for n in sizes}
    with contextlib.ExitStack() as stack:
        for n, db in databases.items():
            stack.enter_context(common.bench_db(db, keep=keep))
            worker_throughput.DB = db
            with common.pg_connect(db) as conn:
                common.load_jobs(conn, n, due_sql="now() - interval '1 second'")
            worker_throughput.prepare_peers()
        try:
            for round_ in range(rounds):
                for n, db in databases.items():
                    worker_throughput.DB = db
                    order = SIDES if round_ % 2 == 0 else SIDES[::-1]
                    for side in order:
                        run = (
                            worker_throughput.run_history
                            if side == "history"
                            else worker_throughput.run_procrastinate
                        )
                        runs[str(n)][side].append(run(n))
                        common.progress(size=n, side=side, round=round_ + 1)
        finally:
            worker_throughput._clear_queue()
    medians = {
        size: {
            side: common.median([r["rate"] for r in results if _valid(r)])
            if any(_valid(r) for r in results)
            else 0.0
            for side, results in by_side.items()
        }
        for size, by_side in runs.items()
    }
    return {
        "sizes": sizes,
        "rounds": rounds,
        "broker": worker_throughput.BROKER,
        "runs": runs,
        "median": medians,
    }


def ratio(data: dict[str, Any], size: int) -> float | None:
    """History's median over procrastinate's at ``size`` tasks, if both were measured."""
    medians = data.get("median", {}).get(str(size), {})
    ours, theirs = medians.get("history"), medians.get("procrastinate")
    return ours / theirs if ours and theirs else None


HEADERS = [
    "tasks waiting",
    "history tasks/s (median)",
    "procrastinate tasks/s (median)",
    "history / procrastinate",
    "valid rounds (history, procrastinate)",
]


def table_rows(data: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for size in data["sizes"]:
        by_side = data["runs"][str(size)]
        medians = data["median"][str(size)]
        rows.append(
            [
                size,
                medians["history"] or "—",
                medians["procrastinate"] or "—",
                f"{ratio(data, size):.2f}x" if ratio(data, size) else "—",
                ", ".join(str(sum(_valid(r) for r in by_side[side])) for side in SIDES),
            ]
        )
    return rows


def valid_rounds(data: dict[str, Any], size: int) -> int:
    """The rounds at ``size`` that both sides completed (the fewer of the two)."""
    by_side = data.get("runs", {}).get(str(size), {})
    return min((sum(_valid(r) for r in by_side.get(side, [])) for side in SIDES), default=0)


def section_body(data: dict[str, Any] | None, command: list[str]) -> list[str]:
    """The by-depth section of docs/benchmarks.md (also rendered by run_all.py)."""
    broker = "RabbitMQ" if data and data.get("broker") == "amqp" else "Redis"
    body = [
        f"The Celery worker on {broker}. "
        "The same history and procrastinate sides as section 4 (prefork concurrency 2 against"
        " two procrastinate processes, the queue filled before the workers start, the same"
        " clocks and ledger check), at several queue depths, the two sides alternating round"
        " by round at each depth; medians. A Celery worker takes the next message whatever"
        " the backlog; procrastinate's worker fetches the next `todo` row from a table that"
        " holds the whole backlog, so its rate depends on the depth.",
        "",
    ]
    if data:
        body += [common.render_table(HEADERS, table_rows(data), markdown=True), ""]
    body += command
    return body


def main() -> None:
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="800,2500,5000", help="comma-separated task counts")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--broker", choices=["redis", "amqp"], default="redis")
    parser.add_argument(
        "--write-docs", action="store_true", help="replace this section of docs/benchmarks.md"
    )
    args = parser.parse_args()
    sizes = [100, 300] if args.quick else [int(s) for s in args.sizes.split(",") if s]
    worker_throughput.BROKER = args.broker
    if args.broker == "amqp" and not common.rabbit_available():
        raise SystemExit(f"--broker amqp: RabbitMQ does not answer at {common.RABBIT_URL}")
    data = measure(sizes, 1 if args.quick else args.repeat, keep=args.keep)
    saved = common.save_result("worker_depth", data)
    print(f"\nWorker with history against procrastinate by queue depth, broker {args.broker}")
    print(common.render_table(HEADERS, table_rows(data), markdown=False))
    if args.write_docs:
        result = common.load_result(saved.stem)
        body = section_body(result, common.command_block(result))
        common.write_docs_section(DOCS, SECTION, body)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
