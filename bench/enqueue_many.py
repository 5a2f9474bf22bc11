"""Bulk enqueue: ``scheduling.api.enqueue_many`` beside procrastinate's ``batch_defer``.

A producer writes ``--count`` runs of a no-op task in batches of ``--batch`` (128 by default),
each batch in its own transaction, and the clock runs from the first batch to the last
commit with every message handed over:

- **enqueue_many**: ``enqueue_many(noop, batch)`` on Duecourse's Django Tasks backend (one
  multi-row INSERT per batch; the outbox publishes each batch's messages to Redis after the
  commit, and the clock stops when the outbox has flushed them all);
- **enqueue**: the same batches written with ``noop.enqueue()`` once per run, in the same
  transaction: what a producer without a bulk call does;
- **batch_defer**: procrastinate's ``noop.batch_defer(*batch)`` into its own tables on the same
  PostgreSQL (its queue is the table: nothing to publish).

No worker runs: this measures the write, not the run. Each side has its own database;
the sides take turns within a round and the first side moves on each round. Every run is
checked to be in its side's table at the end (and, for Duecourse, every message in Redis).
Target: at least 10,000 runs a second with ``enqueue_many`` in batches of 128. Writes
``var/bench/enqueue_many.json`` and its own section of docs/benchmarks.md (``--quick``
leaves the docs alone, ``--render`` writes the section from the saved results).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import common

NAME = "enqueue_many"
DOC = common.ROOT / "docs" / "benchmarks.md"
HEADING = "## 16. Bulk enqueue: enqueue_many beside procrastinate's batch_defer"
SIDES = ("enqueue_many", "enqueue", "batch_defer")
SETTINGS = "settings_djtasks"
TARGET = 10_000.0
HEADERS = ["side", "runs", "batch", "best runs/s", "median runs/s", "rounds", "all written"]


def _db(side: str) -> str:
    return common.db_name(f"enq_{side}")


def child_produce(p: dict[str, Any]) -> dict[str, Any]:
    """Write ``count`` runs in batches of ``batch``, one transaction each; runs per second."""
    count, size, side = int(p["count"]), int(p["batch"]), p["side"]
    if side == "batch_defer":
        return _produce_procrastinate(count, size)
    common.setup_django()
    import djtasks
    from django.db import transaction

    from scheduling.api import enqueue_many
    from scheduling.djangotasks.outbox import outbox

    task = djtasks.noop.using(queue_name=common.QUEUE)
    batch: list[tuple[list[Any], dict[str, Any]]] = [([], {})] * size

    def write() -> None:
        with transaction.atomic():
            if side == "enqueue_many":
                enqueue_many(task, batch)
            else:
                for _ in range(size):
                    task.enqueue()

    write()  # connections, statements and the outbox's thread warm before the clock
    outbox.flush(30.0)
    batches = count // size
    started = time.perf_counter()
    for _ in range(batches):
        write()
    flushed = outbox.flush(120.0)
    seconds = time.perf_counter() - started
    return {"runs": batches * size, "seconds": seconds, "flushed": flushed}


def _produce_procrastinate(count: int, size: int) -> dict[str, Any]:
    os.environ["BENCH_PROCRASTINATE_DSN"] = common.libpq_url(common.db_url(_db("batch_defer")))
    import procapp

    batches = count // size
    with procapp.app.open():
        procapp.bench_noop.batch_defer(*({} for _ in range(size)))
        started = time.perf_counter()
        for _ in range(batches):
            procapp.bench_noop.batch_defer(*({} for _ in range(size)))
        seconds = time.perf_counter() - started
    return {"runs": batches * size, "seconds": seconds, "flushed": True}


def _prepare(side: str) -> None:
    if side == "batch_defer":
        common.drop_db(_db(side))
        with common._admin() as conn:
            conn.execute(f'CREATE DATABASE "{_db(side)}"')
        from procrastinate.schema import SchemaManager

        with common.pg_connect(_db(side)) as conn:
            conn.execute(SchemaManager.get_schema())
    else:
        common.create_db(_db(side), settings=SETTINGS)


def _reset(side: str) -> None:
    table = "procrastinate_jobs" if side == "batch_defer" else "scheduling_execution"
    with common.pg_connect(_db(side)) as conn:
        conn.execute(f"TRUNCATE {table} RESTART IDENTITY CASCADE")
    common.redis_cleanup()


def _written(side: str) -> int:
    table = "procrastinate_jobs" if side == "batch_defer" else "scheduling_execution"
    with common.pg_connect(_db(side)) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def one_round(side: str, *, count: int, batch: int) -> dict[str, Any]:
    _reset(side)
    env = common.child_env(_db(side), settings=SETTINGS, extra={"BENCH_DJ_QUEUE": common.QUEUE})
    done = common.run_child(
        common.child_argv(
            "enqueue_many.py", "produce", {"side": side, "count": count, "batch": batch}
        ),
        env,
        timeout=600,
        label=f"enqueue-{side}",
    )
    if not done.ok:
        return {"side": side, "error": done.error}
    data = done.data
    expected = data["runs"] + batch  # the warm-up batch too
    written = _written(side)
    published = expected if side == "batch_defer" else common.queue_length(common.redis_client())
    return {
        "side": side,
        "runs": data["runs"],
        "rate": data["runs"] / data["seconds"],
        "all_written": written == expected and published == expected and data["flushed"],
        "written": written,
        "published": published,
    }


def measure(args: Any) -> dict[str, Any]:
    sides = [s for s in SIDES if s in args.sides.split(",")]
    for side in sides:
        _prepare(side)
    rounds: list[dict[str, Any]] = []
    try:
        for k in range(args.rounds):
            order = sides[k % len(sides) :] + sides[: k % len(sides)]
            for side in order:
                result = one_round(side, count=args.count, batch=args.batch)
                result["round"] = k + 1
                rounds.append(result)
                print(
                    f"round {k + 1} {side}: {common.fmt(result.get('rate'), 0)} runs/s"
                    f" {'' if result.get('all_written') else result}",
                    flush=True,
                )
    finally:
        if not args.keep:
            for side in sides:
                common.drop_db(_db(side))
            common.redis_cleanup()
    return {"count": args.count, "batch": args.batch, "rounds": rounds, "sides": sides}


def table_rows(data: dict[str, Any]) -> list[list[Any]]:
    out = []
    for side in data["sides"]:
        mine = [r for r in data["rounds"] if r["side"] == side and "rate" in r]
        rates = [r["rate"] for r in mine]
        out.append(
            [
                side,
                f"{data['count']:,}",
                data["batch"],
                common.fmt(max(rates), 0) if rates else "—",
                common.fmt(common.median(rates), 0) if rates else "—",
                len(mine),
                "yes" if mine and all(r["all_written"] for r in mine) else "NO",
            ]
        )
    return out


def section(data: dict[str, Any]) -> list[str]:
    rows = table_rows(data)
    by_side = {row[0]: row for row in rows}
    lines = [
        f"A producer writes {data['count']:,} runs of a no-op Django task in batches of"
        f" {data['batch']}, each batch its own transaction, no worker running; the clock stops"
        " at the last commit with every message handed to the broker (Duecourse's outbox"
        " flushed to Redis; procrastinate's queue is its table). The sides take turns within a"
        " round. `enqueue` is the same batches written one `task.enqueue()` at a time.",
        "",
        common.render_table(HEADERS, rows, markdown=True),
        "",
    ]
    ours, theirs = by_side.get("enqueue_many"), by_side.get("batch_defer")
    if ours and theirs and ours[4] != "—" and theirs[4] != "—":
        lines.append(
            f"- enqueue_many / batch_defer: {_ratio(ours[3], theirs[3])} best,"
            f" {_ratio(ours[4], theirs[4])} median; target {TARGET:,.0f} runs/s:"
            f" {'met' if float(ours[3].replace(',', '')) >= TARGET else 'not met'} (best)."
        )
    return [
        *lines,
        "",
        "The machine is a shared two-core one (the load average after the run is below):"
        " only comparisons within one run count.",
        "",
        *common.command_block(data),
    ]


def _ratio(a: str, b: str) -> str:
    return f"{float(a.replace(',', '')) / float(b.replace(',', '')):.2f}x"


def main() -> None:
    if common.child_main({"produce": child_produce}):
        return
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=51_200)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/benchmarks.md")
    parser.add_argument(
        "--render", action="store_true", help="rewrite the docs section from the saved results"
    )
    args = parser.parse_args()
    if args.render:
        saved = common.load_result(NAME)
        if saved is None:
            raise SystemExit(f"no saved results in {common.RESULTS}")
        common.write_docs_section(DOC, HEADING, section(saved))
        return
    if args.quick:
        args.count, args.rounds = 2_560, 1
    data = {**measure(args), "facts": common.machine_facts()}
    common.save_result(NAME, data)
    print(common.render_table(HEADERS, table_rows(data), markdown=False))
    if not args.no_docs and not args.quick:
        common.write_docs_section(DOC, HEADING, section(data))
        print(f"wrote {DOC.relative_to(common.ROOT)} ({HEADING[3:]})")


if __name__ == "__main__":
    main()
