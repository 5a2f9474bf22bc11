"""Measurement 4: worker throughput with execution history against a bare Celery worker.

Both sides run the same stock ``celery worker`` (prefork, concurrency 2, the project's
settings: acks_late, prefetch multiplier 1) on the same app (``bench/workerapp.py``), the same
Redis broker and queue, in the same run:

- **bare**: K messages of ``bench.bare_noop``, a plain ``@app.task(acks_late=True)`` that
  returns at once and records nothing;
- **history**: K due jobs of ``scheduling.diagnostics.noop`` (a ScheduledTask), published by
  ``manage.py runscheduler --once``; each run claims its execution row, records an attempt and
  completes both (the whole history).

- **floor** (unless ``--no-floor``): the history side's messages and worker machinery with
  its two ledger writes (the claim before the body, the end before the acknowledgement)
  replaced by the cheapest durable write there is (``bench/floorapp.py``): what any design
  that commits twice per task can reach here, to read the history side against;

- with ``--what-if SETTINGS``, **history** once more under another settings module (for
  example ``settings_reconnect``: a new PostgreSQL connection for every task, Django's and
  Celery's default), to put a number on a configuration choice.

The queue is filled first; then the worker starts and the clock runs from the first message
taken to the moment the queue and the unacknowledged set are both empty. The sides alternate
(``--repeat`` rounds, bare first) and the best round of each is compared; a history round
counts only if every execution ended COMPLETED. The target is history ≥ 70 % of bare.
``consume_check`` (used by dispatch_rate.py) proves a stock worker runs fast-path messages to
COMPLETED.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import common

DB = common.db_name("worker")


def child_fill(p: dict[str, Any]) -> dict[str, Any]:
    """Put ``count`` bare-task messages in the benchmark queue."""
    common.setup_django()
    from config.celery import app

    with app.producer_or_acquire() as producer:
        for _ in range(p["count"]):
            app.send_task(common.BARE_TASK, queue=common.QUEUE, producer=producer)
    return {"count": p["count"]}


def worker_argv(concurrency: int | None = None, app: str = "workerapp") -> list[str]:
    """A stock ``celery worker`` on this run's queue (prefork, as in production)."""
    return [
        common.PYTHON,
        "-m",
        "celery",
        "-A",
        app,
        "worker",
        "-P",
        "prefork",
        "-c",
        str(concurrency or int(os.environ.get("BENCH_WORKER_CONCURRENCY", "2"))),
        "-Q",
        common.QUEUE,
        "-n",
        "duecourse-bench@%h",
        "--without-mingle",
        "--without-gossip",
        "-l",
        "WARNING",
    ]


def drain(
    count: int, env: dict[str, str], *, timeout: float, app: str = "workerapp"
) -> dict[str, Any]:
    """Start a worker on a full queue; time it from first take to empty queue and no unacked."""
    client = common.redis_client()
    queue = common.KEY_PREFIX + common.QUEUE
    unacked = common.KEY_PREFIX + "unacked"
    log = open(common.RESULTS / "worker.log", "ab")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        worker_argv(app=app),
        cwd=common.ROOT,
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    first = last = None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            left = client.llen(queue)
            now = time.perf_counter()
            if first is None and left < count:
                first = now
            if first is not None and left == 0 and client.hlen(unacked) == 0:
                last = now
                break
            if proc.poll() is not None:
                break
            time.sleep(0.01)
    finally:
        common.kill_group(proc)
        log.close()
    if first is None or last is None:
        return {"count": count, "error": f"not drained within {timeout:.0f} s"}
    seconds = last - first
    return {"count": count, "seconds": seconds, "rate": count / seconds}


def _publish_ours(count: int) -> None:
    """Claim and publish ``count`` due jobs in one tick with the shipped scheduler command."""
    with common.pg_connect(DB) as conn:
        common.reset_jobs(conn, due_sql="now() - interval '1 second'")
    subprocess.run(
        [common.PYTHON, "manage.py", "runscheduler", "--once", "--batch-size", str(count)],
        cwd=common.ROOT,
        env=common.child_env(DB),
        check=True,
        capture_output=True,
    )


def run_bare(count: int) -> dict[str, Any]:
    """One bare round: fill the queue with plain tasks, then time a worker draining it."""
    common.redis_cleanup()
    filled = common.run_child(
        common.child_argv("worker_throughput.py", "fill", {"count": count}),
        common.child_env(DB),
        timeout=300,
        label="fill",
    )
    if not filled.ok:
        return {"count": count, "error": filled.error}
    result = drain(count, common.child_env(DB), timeout=120 + count / 50)
    common.redis_cleanup()
    return result


def run_history(count: int, settings: str = "config.settings") -> dict[str, Any]:
    """One history round: publish K due jobs, time a worker running them, check the ledger."""
    common.redis_cleanup()
    _publish_ours(count)
    queued = common.queue_length(common.redis_client())
    result = drain(count, common.child_env(DB, settings=settings), timeout=120 + count / 20)
    with common.pg_connect(DB) as conn:
        counts = common.count_executions(conn)
        span = conn.execute(
            "SELECT extract(epoch FROM max(finished_at) - min(started_at)) FROM"
            " scheduling_execution WHERE status = 'completed'"
        ).fetchone()[0]
        attempts = conn.execute("SELECT count(*) FROM scheduling_attempt").fetchone()[0]
    completed = counts.get("completed", 0)
    result.update(
        messages=queued,
        completed=completed,
        statuses=counts,
        attempts=int(attempts),
        db_rate=completed / float(span) if span else None,
    )
    common.redis_cleanup()
    return result


def run_floor(count: int) -> dict[str, Any]:
    """One floor round: the history side's messages, each ledger write one counter update."""
    common.redis_cleanup()
    _publish_ours(count)
    result = drain(count, common.child_env(DB), timeout=120 + count / 20, app="floorapp")
    with common.pg_connect(DB) as conn:
        touched = conn.execute(
            "SELECT count(*) FROM scheduling_execution WHERE duplicates = 2"
        ).fetchone()[0]
    # "completed" here means: both writes of the task ran, once each.
    result.update(completed=int(touched))
    common.redis_cleanup()
    return result


def consume_check(count: int) -> dict[str, Any]:
    """A stock worker consumes ``count`` fast-path messages; every execution must complete."""
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    with common.bench_db(DB):
        with common.pg_connect(DB) as conn:
            common.load_jobs(conn, count, due_sql="now() - interval '1 second'")
        return run_history(count)


def measure(args: Any) -> dict[str, Any]:
    """Alternating rounds of each side; the best valid round of each is compared."""
    count = 300 if args.quick else args.tasks
    rounds = 1 if args.quick else args.repeat
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {side: [] for side in SIDES}
    out["count"] = count
    out["what_if"] = args.what_if
    try:
        with common.bench_db(DB, keep=args.keep):
            with common.pg_connect(DB) as conn:
                common.load_jobs(conn, count, due_sql="now() - interval '1 second'")
            for _ in range(rounds):
                out["bare"].append(run_bare(count))
                out["history"].append(run_history(count))
                if args.floor:
                    out["floor"].append(run_floor(count))
                if args.what_if:
                    out["history_whatif"].append(run_history(count, args.what_if))
    finally:
        common.redis_cleanup()
    # A history round counts only if every execution ended COMPLETED: a worker that fails
    # its tasks fast is not fast.
    valid = {
        side: [r for r in out[side] if "rate" in r and r.get("completed", r["count"]) == r["count"]]
        for side in SIDES
    }
    best = {side: max((r["rate"] for r in rounds), default=0.0) for side, rounds in valid.items()}
    out["best"] = best
    out["ratio"] = best["history"] / best["bare"] if best["bare"] and best["history"] else None
    if best["bare"] and best["floor"]:
        out["ratio_floor"] = best["floor"] / best["bare"]
    if best["bare"] and best["history_whatif"]:
        out["ratio_whatif"] = best["history_whatif"] / best["bare"]
    return out


SIDES = ["bare", "history", "floor", "history_whatif"]
NAMES = {
    "bare": "bare @app.task noop",
    "history": "ScheduledTask noop + history",
    "floor": "floor: two durable one-row writes",
    "history_whatif": "ScheduledTask + history, what-if settings",
}
HEADERS = ["worker (prefork -c 2)", "tasks", "round", "seconds", "tasks/s", "all COMPLETED"]


def table_rows(data: dict[str, Any]) -> list[list[Any]]:
    """One row per round; history rounds that did not complete say so and do not count."""
    rows: list[list[Any]] = []
    names = {**NAMES, "history_whatif": f"ScheduledTask + history, {data.get('what_if')}"}
    for side in SIDES:
        for i, r in enumerate(data.get(side, []), 1):
            done: Any = None
            if side == "floor":
                done = (
                    "yes (both writes, once each)"
                    if r.get("completed") == r["count"]
                    else f"NO: {r.get('completed', 0):,} ran both writes once"
                )
            elif side != "bare":
                done = (
                    "yes"
                    if r.get("completed") == r["count"]
                    else f"NO: {r.get('completed', 0):,} completed, statuses {r.get('statuses')}"
                )
            if "error" in r:
                rows.append([names[side], r["count"], i, None, None, r["error"].splitlines()[0]])
            else:
                rows.append([names[side], r["count"], i, r["seconds"], r["rate"], done])
    rows.append(["history / bare (best rounds)", None, None, None, data.get("ratio"), None])
    if data.get("ratio_floor") is not None:
        rows.append(["floor / bare (best rounds)", None, None, None, data["ratio_floor"], None])
    if data.get("ratio_whatif") is not None:
        label = f"{data.get('what_if')} (what-if) / bare"
        rows.append([label, None, None, None, data["ratio_whatif"], None])
    return rows


def main() -> None:
    """Measure, save the results for run_all.py and print the table."""
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--no-floor",
        dest="floor",
        action="store_false",
        help="skip the floor side (two durable one-row writes per task)",
    )
    parser.add_argument(
        "--what-if", metavar="SETTINGS", help="also run history under this settings module"
    )
    args = parser.parse_args()
    data = measure(args)
    common.save_result("worker_throughput", data)
    print("\nWorker throughput, trivial tasks, prefork concurrency 2")
    print(common.render_table(HEADERS, table_rows(data), markdown=False))
    if data.get("ratio") is not None:
        print(f"history / bare = {data['ratio']:.0%} (target ≥ 70 %)")
    if data.get("ratio_floor") is not None:
        print(f"floor / bare = {data['ratio_floor']:.0%} (two durable writes per task, no ledger)")
    sys.stdout.flush()


if __name__ == "__main__":
    if not common.child_main({"fill": child_fill}):
        main()
