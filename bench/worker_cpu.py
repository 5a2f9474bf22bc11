"""Where a worker round's time goes: CPU per task by process, over the drain's clock alone.

Why: ``worker_throughput.py`` says how fast each side drains its queue; this says what the
machine did meanwhile, to tell a side bound by the processor from one bound by waiting.
For the bare, history and floor sides (alternating, ``--repeat`` rounds) it samples, at the
moment the clock starts and again when it stops, the CPU time of the worker's main process,
of its pool processes and of every PostgreSQL backend, and the machine's idle share
(``/proc/stat``). Start-up (importing Django, connecting) falls outside the window, so the
numbers are the steady work per task.

    python bench/worker_cpu.py --tasks 1500 --repeat 3 [--broker amqp]
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import common
import worker_throughput

SIDES = {
    "bare": worker_throughput.run_bare,
    "history": worker_throughput.run_history,
    "floor": worker_throughput.run_floor,
}


def _machine() -> tuple[int, int]:
    """Total and idle jiffies of every CPU since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]


def cpu_seconds(process: Any) -> float:
    """A process's user and system CPU seconds so far; 0 for one that is gone."""
    import psutil

    try:
        times = process.cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def _snapshot(worker: subprocess.Popen[bytes]) -> dict[str, float]:
    import psutil

    main = psutil.Process(worker.pid)
    pool = sum(cpu_seconds(p) for p in main.children(recursive=True))
    postgres = sum(
        cpu_seconds(p)
        for p in psutil.process_iter(["name"])
        if (p.info["name"] or "") == "postgres"
    )
    total, idle = _machine()
    return {
        "main": cpu_seconds(main),
        "pool": pool,
        "postgres": postgres,
        "total": total,
        "idle": idle,
    }


class Window:
    """The two snapshots of one drain."""

    def __init__(self) -> None:
        self.marks: dict[str, dict[str, float]] = {}

    def __call__(self, which: str, worker: subprocess.Popen[bytes]) -> None:
        self.marks[which] = _snapshot(worker)

    def per_task(self, count: int) -> dict[str, float] | None:
        if set(self.marks) != {"first", "last"}:
            return None
        a, b = self.marks["first"], self.marks["last"]
        ms = {k: (b[k] - a[k]) * 1000 / count for k in ("main", "pool", "postgres")}
        ms["idle"] = (b["idle"] - a["idle"]) / max(1, b["total"] - a["total"])
        return ms


def measure(args: Any) -> dict[str, list[dict[str, Any]]]:
    worker_throughput.BROKER = args.broker
    if args.quick:
        args.tasks, args.repeat = 300, 1
    out: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    try:
        with common.bench_db(worker_throughput.DB, keep=args.keep):
            with common.pg_connect(worker_throughput.DB) as conn:
                common.load_jobs(conn, args.tasks, due_sql="now() - interval '1 second'")
            for _ in range(args.repeat):
                for side, run in SIDES.items():
                    window = Window()
                    worker_throughput.WINDOW_HOOKS[:] = [window]
                    result = run(args.tasks)
                    if "rate" in result and result.get("completed", args.tasks) == args.tasks:
                        out[side].append(
                            {"rate": result["rate"], **(window.per_task(args.tasks) or {})}
                        )
    finally:
        worker_throughput.WINDOW_HOOKS.clear()
        worker_throughput._clear_queue()
    return out


HEADERS = [
    "side",
    "round",
    "tasks/s",
    "main ms/task",
    "pool ms/task",
    "PostgreSQL ms/task",
    "machine idle",
]


def main() -> None:
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--broker", choices=["redis", "amqp"], default="redis")
    args = parser.parse_args()
    data = measure(args)
    common.save_result("worker_cpu", {"tasks": args.tasks, "broker": args.broker, **data})
    rows = [
        [side, i + 1, r["rate"], r.get("main"), r.get("pool"), r.get("postgres"), r.get("idle")]
        for side, rounds in data.items()
        for i, r in enumerate(rounds)
    ]
    print(f"\nCPU per task over the drain's clock, {args.tasks} tasks, broker {args.broker}")
    print(common.render_table(HEADERS, rows, markdown=False))


if __name__ == "__main__":
    main()
