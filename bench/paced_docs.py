"""The words around ``bench/paced_queue.py``'s tables in docs/benchmarks.md (kept apart so the
driver stays short): how the cells were run, and how to read them."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any


def intro(data: dict[str, Any]) -> list[str]:
    o = data["options"]
    bulk = "one `batch_defer` per batch" if o["bulk"] else "one `defer` per job"
    return [
        "A paced producer offers jobs at a fixed rate (a batch every"
        f" {o['tick'] * 1000:.0f} ms, {data['seconds']:.0f} s per cell) to each system's own"
        " worker of four, each job a 1-ms body; the same producer loop for every system"
        " (`bench/paced_producer.py`). **Duecourse**: `paced_body.enqueue(seq)` on its Django"
        " Tasks backend, every enqueue of a batch in one `transaction.atomic()` (*enqueue_many*:"
        " one `scheduling.api.enqueue_many` call for the batch instead), a stock"
        " `celery worker -P prefork -c 4` on Redis (no scheduler running: nothing is deferred or"
        f" lost). **procrastinate**: {bulk}, its own worker at `--concurrency 4` (one process,"
        " LISTEN/NOTIFY, jobs kept). **floor**: the same body as a plain `acks_late` Celery task"
        " published with `apply_async`, on the same worker and broker, with no ledger: what"
        " the Celery worker itself costs. Claim latency runs from the enqueue's commit to the"
        " body's start, both `time.time()` on this machine (the producer notes each job's"
        " commit, the body its start). Depth is jobs committed less jobs started, over the"
        " window. Every number is the median of"
        f" {data['rounds']} rounds, the systems taking turns to go first.",
        "",
    ]


def reading(data: dict[str, Any]) -> list[str]:
    return [
        "How to read it: *completed/s* counts the runs the system recorded finished inside"
        " the window (the floor: bodies started); *depth end* above zero means the system fell"
        " behind the offered rate. *bytes/run* is the size of the run tables (Duecourse: every"
        " partition of `scheduling_execution` and `scheduling_attempt`, the result being a"
        " column of the execution; procrastinate: `procrastinate_jobs` and"
        " `procrastinate_events`), `pg_total_relation_size` with indexes and TOAST and"
        " `pg_relation_size` of the heap alone, what the cell added to the empty tables divided"
        " by the finished runs, shown only where the backlog drained within the cell's drain"
        " time; *hot table* is the table the worker updates (Duecourse's execution partition,"
        " procrastinate's jobs) with its indexes. *dead / live rows* is"
        " `n_dead_tup / n_live_tup` of the hot table (Duecourse: its largest execution"
        " partition; procrastinate: its jobs table) once every backend has ended; autovacuum"
        " is off on this server, so it counts every dead version the run made. CPU is"
        " `utime + stime` from `/proc/<pid>/stat`, sampled every half second over the window:"
        " the producer and its PostgreSQL backend per job enqueued; the worker's processes,"
        " their backends and the Redis server per job completed (Redis is shared with other"
        " users of this machine, so its column is an upper bound; procrastinate uses none)."
        " *all CPU* is everything measured over the jobs completed. The floor's producer"
        " publishes one message at a time (`apply_async`), so its enqueue rate is Celery's"
        " publishing, not a ceiling of the floor's worker; and its time is noted after each"
        " publish returns, so a body can start before it (latencies about zero, a few"
        " negative). Each side's time is taken when its enqueue returns, the latencies are a"
        " lower bound by that much. The machine is shared:"
        " compare rows of one run only.",
    ]


def _median(values: list[float]) -> float:
    values = [v for v in values if v is not None and v == v]
    return statistics.median(values) if values else float("nan")


def findings(
    data: dict[str, Any], derived: Callable[[dict[str, Any]], dict[str, Any]]
) -> list[str]:
    """What this run's numbers say, computed from them (so a run that says otherwise writes
    otherwise): who kept up at each rate, CPU per job against each other, the producers'
    ceiling, bytes per run."""
    cells = [c for c in data["cells"] if "error" not in c]

    def of(system: str, key: str, rates: list[int] | None = None) -> float:
        return _median([
            derived(c).get(key) for c in cells
            if c["system"] == system and (rates is None or c["rate"] in rates)
        ])  # fmt: skip

    lines = []
    for rate in data["rates"]:
        kept = [
            s for s in data["systems"]
            if _median([c["depth_end"] for c in cells if c["system"] == s and c["rate"] == rate])
            <= rate  # at most a second of backlog at the window's end
        ]  # fmt: skip
        lines.append(f"{rate}/s: {', '.join(kept) or 'none'}")
    due, proc, floor = (of(s, "cpu_total") for s in ("duecourse", "procrastinate", "floor"))
    worker = {s: of(s, "cpu_worker") + of(s, "cpu_pg_worker") for s in data["systems"]}
    top = max(data["rates"])
    ceiling = {s: of(s, "enqueue_rate", [top]) for s in data["systems"]}
    nan = float("nan")
    size = {s: of(s, "bytes_total") for s in ("duecourse", "procrastinate")}
    hot = {s: of(s, "bytes_hot") for s in ("duecourse", "procrastinate")}
    return [
        "What this run showed: the systems that kept up (at most a second of backlog at the"
        " window's end, median of the rounds) at each offered rate: " + "; ".join(lines) + "."
        f" All CPU per job completed, median over every rate: Duecourse {due:.1f} ms,"
        f" procrastinate {proc:.1f} ms, the floor {floor:.1f} ms ({due / proc:.1f}x"
        f" procrastinate's, {due / floor:.1f}x the floor's); the worker and its PostgreSQL"
        f" backends alone: {worker.get('duecourse', float('nan')):.1f},"
        f" {worker.get('procrastinate', float('nan')):.1f} and"
        f" {worker.get('floor', float('nan')):.1f} ms. At {top:,}/s offered the producers"
        f" reached {ceiling.get('duecourse', nan):.0f} (Duecourse, `enqueue()` each),"
        f" {ceiling.get('duecourse_bulk', nan):.0f} (Duecourse, `enqueue_many`),"
        f" {ceiling.get('procrastinate', float('nan')):.0f} (procrastinate) and"
        f" {ceiling.get('floor', float('nan')):.0f} (floor) enqueues/s. A finished run took"
        " (median of the cells that drained, `enqueue()` each)"
        f" {size['duecourse']:,.0f} bytes in Duecourse's tables against"
        f" {size['procrastinate']:,.0f} in procrastinate's"
        f" ({size['duecourse'] / size['procrastinate']:.1f}x), and its hot table"
        f" {hot['duecourse']:,.0f} against {hot['procrastinate']:,.0f}"
        f" ({hot['duecourse'] / hot['procrastinate']:.1f}x).",
    ]
