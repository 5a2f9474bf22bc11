"""Paced producers against Duecourse's Django Tasks backend, procrastinate and a bare Celery
floor: enqueue rate, completion rate, claim latency, queue depth, bytes and dead rows per run,
and CPU per job by process.

Each cell is one system at one offered rate for ``--seconds`` (``paced_cells.run_cell``): the
same paced producer (a batch every 10 ms, one transaction per batch) feeds the system's own
worker of 4 (Celery prefork ``-c 4`` on Redis for Duecourse and the floor; procrastinate's
worker at concurrency 4), each job a 1-ms body that notes its start. Low rates measure
latency, high ones saturation. Rounds alternate which system goes first; each number in the
tables is the median of the rounds.

    python bench/paced_queue.py --quick              # tiny: 2 rates, 4 s, 1 round
    python bench/paced_queue.py --rounds 2 --seconds 15 --drain 10   # docs/benchmarks.md
    python bench/paced_queue.py --render             # the section again from saved results

(Not named ``queue.py``: with ``bench/`` first on the path, as every benchmark child has it,
that name would stand in for the standard library's ``queue`` module in every process.)
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
from typing import Any

os.environ.setdefault("BENCH_REDIS_DB", "9")

import common
import paced_cells

NAME = "paced_queue"
RATES = "100,150,300,1000"
DOCS = common.ROOT / "docs" / "benchmarks.md"
SECTION = "## Paced producers: claim latency, saturation and cost per job against procrastinate"
NAMES = {
    "duecourse": "Duecourse, enqueue() each",
    "duecourse_bulk": "Duecourse, enqueue_many",
    "procrastinate": "procrastinate",
    "floor": "floor: bare Celery task",
}


def run(args: Any) -> dict[str, Any]:
    rates = [int(r) for r in args.rates.split(",")]
    systems = [s for s in args.systems.split(",") if s]
    opts = {
        "tick": args.tick_ms / 1000,
        "batch_max": args.batch_max,
        "bulk": args.bulk,
        "drain": args.drain,
        "keep_files": args.keep,
    }
    cells: list[dict[str, Any]] = []
    facts = common.machine_facts()
    paced_cells.create_databases()
    try:
        for k in range(args.rounds):
            order = systems[k % len(systems) :] + systems[: k % len(systems)]
            for rate in rates:
                for system in order:
                    print(f"round {k + 1}: {system} at {rate}/s ...", flush=True)
                    try:
                        cell = paced_cells.run_cell(
                            system, rate, args.seconds, {**opts, "tag": f"r{k + 1}"}
                        )
                    except Exception as exc:  # one cell's failure is a row, not the run's end
                        cell = {"system": system, "rate": rate, "error": repr(exc)}
                    cell["round"] = k + 1
                    cells.append(cell)
                    print("  " + summary(cell), flush=True)
    finally:
        if not args.keep:
            paced_cells.drop_databases()
        common.redis_cleanup()
    return {
        "machine": facts,
        "rates": rates,
        "systems": systems,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "options": opts,
        "cells": cells,
    }


def summary(cell: dict[str, Any]) -> str:
    if "error" in cell:
        return f"error: {cell['error'][:300]}"
    r = derived(cell)
    return (
        f"enq {r['enqueue_rate']:.0f}/s, done {r['completion_rate']:.0f}/s, p50"
        f" {cell['p50']:.1f} p99 {cell['p99']:.1f} ms, depth max {cell['depth_max']},"
        f" cpu {r['cpu_total']:.2f} ms/job, busy {cell['machine_busy'] or 0:.0%}"
    )


def derived(cell: dict[str, Any]) -> dict[str, Any]:
    """The rates, bytes and per-job CPU of one cell."""
    window = cell["window"]
    enqueued = cell["producer"]["enqueued"]
    completed = cell.get("completed_in_window", 0)
    cpu = cell["cpu"]
    per_enq = 1000 / enqueued if enqueued else float("nan")
    per_done = 1000 / completed if completed else float("nan")
    out: dict[str, Any] = {
        "enqueue_rate": enqueued / window,
        "completion_rate": completed / window,
        "cpu_producer": cpu["producer"] * per_enq,
        "cpu_pg_producer": cpu["pg_producer"] * per_enq,
        "cpu_worker": cpu["worker"] * per_done,
        "cpu_pg_worker": (cpu["pg_worker"] + cpu["pg_other"]) * per_done,
        "cpu_broker": cpu["broker"] * per_done,
        "cpu_total": sum(cpu.values()) * per_done,
    }
    tables, empty = cell.get("tables"), cell.get("empty_tables") or {}
    if tables and cell.get("drained") and tables["finished"]:
        for key in ("total", "heap", "hot"):
            grown = tables[f"{key}_bytes"] - empty.get(f"{key}_bytes", 0)
            out[f"bytes_{key}"] = grown / tables["finished"]
    if tables and tables["live"]:
        out["dead_share"] = tables["dead"] / tables["live"]
    return out


def _median(cells: list[dict[str, Any]], key: str, *, raw: bool = False) -> float:
    values = [(c if raw else derived(c)).get(key) for c in cells]
    values = [v for v in values if v is not None and v == v]
    return statistics.median(values) if values else float("nan")


LATENCY_HEADERS = [
    "system", "offered/s", "enqueued/s", "completed/s", "p50 ms", "p95 ms", "p99 ms",
    "depth max", "depth end", "rounds",
]  # fmt: skip
COST_HEADERS = [
    "system", "offered/s", "bytes/run (with indexes)", "bytes/run (heap)",
    "hot table bytes/run", "dead / live rows",
    "producer ms/enq", "its PostgreSQL ms/enq", "worker ms/job", "its PostgreSQL ms/job",
    "Redis ms/job", "all CPU ms/job",
]  # fmt: skip


def tables(data: dict[str, Any]) -> tuple[list[list[Any]], list[list[Any]]]:
    latency, cost = [], []
    for rate in data["rates"]:
        for system in data["systems"]:
            cells = [
                c
                for c in data["cells"]
                if c["system"] == system and c["rate"] == rate and "error" not in c
            ]
            failed = sum(
                1 for c in data["cells"] if c["system"] == system and c["rate"] == rate
            ) - len(cells)
            if not cells:
                latency.append([NAMES[system], rate, *["—"] * 7, f"0 ({failed} failed)"])
                continue
            m = functools.partial(_median, cells)
            r = functools.partial(_median, cells, raw=True)
            rounds = f"{len(cells)}" + (f" ({failed} failed)" if failed else "")
            latency.append([
                NAMES[system], rate, m("enqueue_rate"), m("completion_rate"),
                r("p50"), r("p95"), r("p99"), r("depth_max"), r("depth_end"), rounds,
            ])  # fmt: skip
            dead = m("dead_share")
            cost.append([
                NAMES[system], rate, m("bytes_total"), m("bytes_heap"), m("bytes_hot"),
                f"{dead:.1%}" if dead == dead else "—",
                m("cpu_producer"), m("cpu_pg_producer"), m("cpu_worker"),
                m("cpu_pg_worker"), m("cpu_broker"), m("cpu_total"),
            ])  # fmt: skip
    return latency, cost


def render(data: dict[str, Any], *, markdown: bool) -> list[str]:
    latency, cost = tables(data)
    busy = [c["machine_busy"] for c in data["cells"] if c.get("machine_busy") is not None]
    loads = [c["loadavg"][0] for c in data["cells"] if c.get("loadavg")]
    load = f"1-minute load average at the start {data['machine']['loadavg'][0]:.1f}"
    if loads:
        load += f", after each cell from {min(loads):.1f} to {max(loads):.1f}"
    if data.get("load_after"):
        load += f", at the end {data['load_after'][0]:.1f}"
    return [
        common.render_table(LATENCY_HEADERS, latency, markdown=markdown),
        "",
        common.render_table(COST_HEADERS, cost, markdown=markdown),
        "",
        f"Machine busy over the windows (every user's work, {data['machine']['nproc']} cores):"
        f" median {common.median(busy):.0%}, from {min(busy, default=0):.0%} to"
        f" {max(busy, default=0):.0%}; {load}.",
    ]


def write_docs(data: dict[str, Any], result: dict[str, Any]) -> None:
    import paced_docs

    body = paced_docs.intro(data) + render(data, markdown=True) + [""]
    body += [*paced_docs.findings(data, derived), ""]
    body += [*paced_docs.reading(data), "", *common.command_block(result)]
    common.write_docs_section(DOCS, SECTION, body)


def main() -> None:
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rates", default=RATES, help="offered jobs/s, a,b,...")
    parser.add_argument("--seconds", type=float, default=25.0, help="each cell's window")
    parser.add_argument("--systems", default=",".join(paced_cells.SYSTEMS))
    parser.add_argument("--drain", type=float, default=20.0, help="seconds to wait for a backlog")
    parser.add_argument("--tick-ms", type=float, default=10.0, help="the producer's pace")
    parser.add_argument("--batch-max", type=int, default=500, help="most jobs in one batch")
    parser.add_argument(
        "--no-bulk", dest="bulk", action="store_false", help="procrastinate: defer one by one"
    )
    parser.add_argument("--render", action="store_true", help="the docs from saved results")
    parser.add_argument("--no-docs", action="store_true", help="leave docs/benchmarks.md alone")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.drain = 1, 4.0, 10.0
        if args.rates == RATES:
            args.rates = "100,300"
    if args.render:
        result = common.load_result(NAME)
        if result is None:
            sys.exit("no saved results: run it first")
        data = result
    else:
        data = run(args)
        path = common.save_result(NAME, data)
        result = common.load_result(NAME) or {}
        print(f"\nresults: {path}")
    print("\n".join(render(data, markdown=False)))
    if not (args.quick or args.no_docs):
        write_docs(data, result)
        print(f"wrote {DOCS.relative_to(common.ROOT)}")


if __name__ == "__main__":
    main()
