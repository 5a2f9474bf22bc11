"""Profile the scheduler's own process: idle ticks, or a flood of due jobs, under cProfile.

Why: the benchmark tables say *how fast*; this says *where the time goes*, so a proposed
change to ``scheduling/`` can be argued from the profile and checked against it afterwards.

    python bench/profile_tick.py idle  --jobs 100000 --ticks 300
    python bench/profile_tick.py flood --jobs 20000
    python bench/profile_tick.py worker --jobs 2000 [--bare]

``idle`` loads N jobs due tomorrow and profiles ``Dispatcher.tick`` with nothing to do;
``flood`` loads N jobs due now and profiles the ticks that claim and publish all of them.
Both print the functions with the most own time and the most cumulative time, wall and CPU
time per tick (or per occurrence), and the number of SQL statements per tick. ``worker``
profiles a stock ``celery worker`` (solo pool, so every task runs in the profiled process)
draining N history tasks published by the scheduler (or, with ``--bare``, N bare tasks).
``--settings`` picks another settings module (``settings_reconnect``: Django's default
of a new connection per tick or task).
"""

from __future__ import annotations

import argparse
import io
import time
from typing import Any

import common


def child(p: dict[str, Any]) -> dict[str, Any]:
    """In the scheduler's own process: warm up, list the idle tick's statements, then profile."""
    common.setup_django()
    import cProfile
    import pstats

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from config.celery import app
    from scheduling.scheduler.loop import Dispatcher, freeze_startup_heap

    dispatcher = Dispatcher(app)
    freeze_startup_heap()  # as runscheduler does
    for _ in range(3):  # warm: imports, broker connection, catalog caches
        if p["mode"] == "idle":
            dispatcher.tick()
    with CaptureQueriesContext(connection) as queries:
        if p["mode"] == "idle":
            dispatcher.tick()
    statements = [q["sql"][:120] for q in queries.captured_queries]
    profiler = cProfile.Profile()
    wall_started, cpu_started = time.perf_counter(), time.process_time()
    ticks = 0
    profiler.enable()
    if p["mode"] == "idle":
        for _ in range(p["ticks"]):
            dispatcher.tick()
            ticks += 1
    else:
        while dispatcher.stats["published"] < p["jobs"]:
            dispatcher.tick()
            ticks += 1
    profiler.disable()
    wall = time.perf_counter() - wall_started
    cpu = time.process_time() - cpu_started
    dispatcher.close()
    units = p["ticks"] if p["mode"] == "idle" else p["jobs"]
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(p["top"])
    stats.sort_stats("cumulative").print_stats(p["top"])
    return {
        "ticks": ticks,
        "per_unit_wall_ms": wall / units * 1000,
        "per_unit_cpu_ms": cpu / units * 1000,
        "statements_per_idle_tick": statements,
        "profile": out.getvalue(),
    }


def profile_worker(args: Any, db: str) -> None:
    """cProfile a solo-pool worker while it drains N messages; print its hottest functions."""
    import pstats
    import subprocess

    import worker_throughput

    env = common.child_env(db, settings=args.settings)
    if args.bare:
        common.run_child(
            common.child_argv("worker_throughput.py", "fill", {"count": args.jobs}),
            env,
            label="fill",
        )
    else:
        subprocess.run(
            [common.PYTHON, "manage.py", "runscheduler", "--once", "--batch-size", str(args.jobs)],
            cwd=common.ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
    out = common.RESULTS / f"worker-{'bare' if args.bare else 'history'}.prof"
    argv = worker_throughput.worker_argv()
    argv[argv.index("prefork")] = "solo"
    argv = [common.PYTHON, "-m", "cProfile", "-o", str(out), *argv[1:]]
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    client = common.redis_client()
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=common.ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while common.queue_length(client) > 0 and time.monotonic() - started < 600:
            time.sleep(0.1)
        time.sleep(1.0)
    finally:
        proc.terminate()  # warm shutdown: cProfile writes its file on the way out
        proc.wait(timeout=60)
    stats = pstats.Stats(str(out))
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    if not args.bare:
        with common.pg_connect(db) as conn:
            print("executions:", common.count_executions(conn))


def main() -> None:
    """Load the jobs, run the profiled child (or worker) and print where the time went."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["idle", "flood", "worker"])
    parser.add_argument("--bare", action="store_true", help="worker mode: bare tasks")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--settings", default="config.settings")
    args = parser.parse_args()
    db = common.db_name("profile")
    due = "now() + interval '1 day'" if args.mode == "idle" else "now() - interval '1 second'"
    try:
        with common.bench_db(db):
            with common.pg_connect(db) as conn:
                common.load_jobs(conn, args.jobs, due_sql=due)
            if args.mode == "worker":
                profile_worker(args, db)
                return
            result = common.run_child(
                common.child_argv("profile_tick.py", "child", {**vars(args)}),
                common.child_env(db, settings=args.settings),
                timeout=3600,
                label="profile",
            )
    finally:
        common.redis_cleanup()
    if not result.ok:
        raise SystemExit(result.error)
    data = result.data
    unit = "idle tick" if args.mode == "idle" else "occurrence"
    print(data["profile"])
    if args.mode == "idle":
        print("statements per idle tick:")
        for sql in data["statements_per_idle_tick"]:
            print("   ", sql)
    print(
        f"{data['ticks']} ticks; per {unit}: {data['per_unit_wall_ms']:.3f} ms wall, "
        f"{data['per_unit_cpu_ms']:.3f} ms CPU (under cProfile, which inflates both)"
    )


if __name__ == "__main__":
    if not common.child_main({"child": child}):
        main()
