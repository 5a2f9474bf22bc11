"""Measurement 2: dispatch rate for a flood of jobs due at the same instant.

N jobs (100,000; ``--quick``: 2,000) in ``bench_flood`` are all due at one instant. The rate is
N divided by the wall clock from the first tick until every one of the N executions is QUEUED
(claimed, history row written, message in the broker, marked queued). Runs, one after another
on the same rows (reset in between):

- Duecourse, fast path (one Redis pipeline per batch), one process;
- Duecourse, portable path (``SCHEDULING_FAST_PUBLISH=false``: one ``send_task`` per message);
- Duecourse, fast path, two scheduler processes together (SKIP LOCKED shares the rows);
- the same two with one flood lane per process (``SCHEDULING_FLOOD_LANES=1``): one process of
  one lane against two, to show what a second scheduler adds at the same configuration (on two
  cores, one process with its default two lanes already keeps both busy);
- Duecourse, portable path to RabbitMQ, if RabbitMQ answers at ``BENCH_RABBIT_URL``.

And the raw limits, in the same run:

- PostgreSQL batched claim: ``SELECT … FOR UPDATE SKIP LOCKED LIMIT 1000`` + ``UPDATE`` in one
  statement, repeated until nothing is due; and the same statement also inserting the
  history rows (``INSERT … SELECT`` from the update), the floor for any claim with history;
- Celery ``send_task`` (what ``apply_async`` does) in a loop from one process;
- Redis ``LPUSH`` of a real Celery message, pipelined 1,000 at a time.

Finally a stock ``celery worker`` (prefork, two processes) consumes a fast-path batch
(1,000; ``--quick``: 200) and every execution must end COMPLETED.

Each child reports where its time went (claim, publish, mark queued, recovery queries), and
``--profile`` adds one more fast run under cProfile (not counted as a measurement) and prints
its profile; the ``.prof`` file is kept in ``var/bench/``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import common

DUE_NOW = "now() - interval '1 second'"


# --- children -------------------------------------------------------------------------------


class _StepTimes:
    """The scheduler's instrumentation hook (``Dispatcher.timer``): wall time per step.

    Lanes call it from several threads, so the sums are kept under a lock.
    """

    def __init__(self) -> None:
        self.spent: dict[str, Any] = {"claim_calls_ms": []}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def __call__(self, step: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - started
            with self._lock:
                self.spent[step] = self.spent.get(step, 0.0) + seconds
                if step == "claim":  # per call, to see whether claims slow down as they go
                    self.spent["claim_calls_ms"].append(round(seconds * 1000, 1))


def child_flood(p: dict[str, Any]) -> dict[str, Any]:
    """Tick until nothing is left to claim; report the wall clock and where it went."""
    common.setup_django()
    from config.celery import app
    from scheduling.scheduler.loop import Dispatcher, freeze_startup_heap

    times = _StepTimes()
    spent = times.spent
    dispatcher = Dispatcher(app, batch_size=p.get("batch_size"))
    dispatcher.timer = times
    freeze_startup_heap()  # as runscheduler does
    dispatcher.publisher._ensure()  # connect to the broker before the clock starts
    while time.time() < p["start_at"]:  # both processes of a pair start together
        time.sleep(0.001)
    profiler = None
    if p.get("profile"):
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    started = time.time()
    ticks = empty = 0
    while empty < 3:
        before = dispatcher.stats["claimed"] + dispatcher.stats["republished"]
        sleep = dispatcher.tick()
        ticks += 1
        if dispatcher.stats["claimed"] + dispatcher.stats["republished"] == before:
            empty += 1
            time.sleep(min(sleep, 0.05))
        else:
            empty = 0
    finished = time.time()
    if profiler is not None:
        profiler.disable()
    dispatcher.close()
    result: dict[str, Any] = {
        "started": started,
        "finished": finished,
        "ticks": ticks,
        "stats": dispatcher.stats,
        "spent": spent,
    }
    if profiler is not None:
        result["profile"] = _profile_text(profiler, p["profile"])
    return result


def _profile_text(profiler: Any, path: str) -> str:
    """Save the profile to ``path`` and return its hottest functions as text."""
    import io
    import pstats

    profiler.dump_stats(path)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)
    return out.getvalue()


def child_send_task(p: dict[str, Any]) -> dict[str, Any]:
    """The naive baseline: ``send_task`` (apply_async without a Task object) in a loop."""
    common.setup_django()
    from config.celery import app

    app.send_task(common.BENCH_TASK, queue=common.QUEUE)  # connect first
    started = time.perf_counter()
    for _ in range(p["count"]):
        app.send_task(common.BENCH_TASK, args=[], kwargs={}, queue=common.QUEUE)
    seconds = time.perf_counter() - started
    return {"count": p["count"], "seconds": seconds, "rate": p["count"] / seconds}


# --- raw limits in the parent ---------------------------------------------------------------

RAW_CLAIM = """
WITH c AS (
    SELECT id FROM scheduling_job
     WHERE status = 'active' AND current_execution_id IS NULL AND next_due_at <= now()
     ORDER BY next_due_at LIMIT 1000
       FOR NO KEY UPDATE SKIP LOCKED)
UPDATE scheduling_job AS j
   SET next_due_at = j.next_due_at + interval '1 hour',
       next_occurrence_at = j.next_occurrence_at + interval '1 hour', updated_at = now()
  FROM c WHERE j.id = c.id
"""

RAW_CLAIM_WITH_HISTORY = """
WITH c AS (
    SELECT id FROM scheduling_job
     WHERE status = 'active' AND current_execution_id IS NULL AND next_due_at <= now()
     ORDER BY next_due_at LIMIT 1000
       FOR NO KEY UPDATE SKIP LOCKED),
u AS (
    UPDATE scheduling_job AS j
       SET next_due_at = j.next_due_at + interval '1 hour',
           next_occurrence_at = j.next_occurrence_at + interval '1 hour', updated_at = now()
      FROM c WHERE j.id = c.id
    RETURNING j.id, j.task, j.next_occurrence_at - interval '1 hour' AS occurrence)
INSERT INTO scheduling_execution (job_id, task, scheduled_for, status, retry_count, task_id,
    worker, created_at, queued_at, last_error, duplicates, updated_at)
SELECT u.id, u.task, u.occurrence, 'pending', 0, gen_random_uuid(), '', now(), now(), '', 0,
    now()
  FROM u
"""


def raw_claim(db: str, sql: str) -> dict[str, Any]:
    """Repeat one claim statement (its own transaction each time) until nothing is due."""
    with common.pg_connect(db) as conn:
        rows = 0
        started = time.perf_counter()
        while True:
            cursor = conn.execute(sql)
            if cursor.rowcount <= 0:
                break
            rows += cursor.rowcount
        seconds = time.perf_counter() - started
    return {"count": rows, "seconds": seconds, "rate": rows / seconds if seconds else 0.0}


def raw_lpush(count: int, body: bytes) -> dict[str, Any]:
    """The broker's own ceiling: LPUSH of ``count`` copies of a real message, 1,000 per pipe."""
    client = common.redis_client()
    key = common.KEY_PREFIX + "raw_lpush"
    started = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        pipe.lpush(key, body)
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    seconds = time.perf_counter() - started
    stored = client.llen(key)
    client.delete(key)
    return {"count": stored, "seconds": seconds, "rate": count / seconds, "bytes": len(body)}


# --- the driver -----------------------------------------------------------------------------


RUNS = {
    # key: label, processes, broker, fast, flood lanes per process (None: the default)
    "fast": ("fast path (Redis pipeline), 1 process", 1, "redis", True, None),
    "portable": ("portable path (send_task each), 1 process", 1, "redis", False, None),
    "fast2": ("fast path, 2 processes", 2, "redis", True, None),
    "fast_1lane": ("fast path, 1 process, 1 lane", 1, "redis", True, 1),
    "fast2_1lane": ("fast path, 2 processes of 1 lane", 2, "redis", True, 1),
    "rabbit": ("portable path to RabbitMQ, 1 process", 1, "amqp", False, None),
}


def run_flood(
    db: str,
    n: int,
    label: str,
    processes: int,
    broker: str,
    fast: bool,
    profile: str,
    lanes: int | None = None,
) -> dict[str, Any]:
    """One flood: fresh due rows, 1 or 2 scheduler children, then check every row and message."""
    with common.pg_connect(db) as conn:
        common.reset_jobs(conn, due_sql=DUE_NOW)
    if broker == "amqp":
        common.rabbit_delete_queue()
    env = common.child_env(
        db,
        broker=common.RABBIT_URL if broker == "amqp" else None,
        extra={
            "SCHEDULING_FAST_PUBLISH": "true" if fast else "false",
            **({"SCHEDULING_FLOOD_LANES": str(lanes)} if lanes is not None else {}),
        },
    )
    start_at = time.time() + 4.0  # time to import Django and connect in every child
    params = {"start_at": start_at, "profile": profile}
    argv = common.child_argv("dispatch_rate.py", "flood", params)
    results: list[common.ChildResult] = []
    if processes == 1:
        results.append(common.run_child(argv, env, timeout=900, label="flood"))
    else:
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(processes) as pool:
            futures = [
                pool.submit(
                    common.run_child,
                    common.child_argv("dispatch_rate.py", "flood", {**params, "profile": ""}),
                    env,
                    timeout=900,
                    label=f"flood{i}",
                )
                for i in range(processes)
            ]
            results = [f.result() for f in futures]
    row: dict[str, Any] = {
        "label": label,
        "processes": processes,
        "broker": broker,
        "n": n,
        "lanes": lanes,
    }
    failed = [r.error for r in results if not r.ok]
    if failed:
        row["error"] = failed[0]
        print(failed[0], file=sys.stderr)
        return row
    with common.pg_connect(db) as conn:
        counts = common.count_executions(conn)
    data = [r.data for r in results]
    wall = max(d["finished"] for d in data) - min(d["started"] for d in data)
    spent: dict[str, float] = {}
    for d in data:
        for key, value in d["spent"].items():
            if key != "claim_calls_ms":
                spent[key] = spent.get(key, 0.0) + value
    row.update(
        wall_s=wall,
        rate=counts.get("queued", 0) / wall,
        queued=counts.get("queued", 0),
        executions=sum(counts.values()),
        per_process=[d["stats"] for d in data],
        claim_calls_ms=[d["spent"]["claim_calls_ms"] for d in data],
        spent=spent,
        peak_rss_mb=max(d["peak_rss_mb"] for d in data),
    )
    if broker == "redis":
        row["messages"] = common.queue_length(common.redis_client())
        common.redis_cleanup()
    else:
        common.rabbit_delete_queue()
    if any("profile" in d for d in data):
        row["profile"] = next(d["profile"] for d in data if "profile" in d)
    return row


def measure(args: Any) -> dict[str, Any]:
    """Every flood run and raw limit of measurement 2, in one run on one database."""
    n = 2_000 if args.quick else args.jobs
    db = common.db_name("flood")
    out: dict[str, Any] = {"n": n, "runs": [], "raw": {}}
    common.redis_cleanup()
    try:
        with common.bench_db(db, keep=args.keep):
            with common.pg_connect(db) as conn:
                out["load_s"] = common.load_jobs(conn, n, due_sql=DUE_NOW)
            out["raw"]["pg_claim"] = raw_claim(db, RAW_CLAIM)
            with common.pg_connect(db) as conn:
                common.reset_jobs(conn, due_sql=DUE_NOW)
            out["raw"]["pg_claim_history"] = raw_claim(db, RAW_CLAIM_WITH_HISTORY)
            rabbit = common.rabbit_available()
            for key in args.runs.split(","):
                label, processes, broker, fast, lanes = RUNS[key]
                if broker == "amqp" and (not rabbit or args.no_rabbit):
                    why = "skipped (--no-rabbit)" if args.no_rabbit else "RabbitMQ not reachable"
                    out["runs"].append({"label": label, "skipped": why})
                    continue
                out["runs"].append(
                    run_flood(db, n, label, processes, broker, fast, "", lanes=lanes)
                )
            if args.profile:
                # A run of its own: cProfile slows the scheduler down, so the measured runs
                # above are never profiled.
                common.RESULTS.mkdir(parents=True, exist_ok=True)
                profile = str(common.RESULTS / "dispatch_fast.prof")
                label = "fast path, 1 process, under cProfile (not a measurement)"
                out["profile_run"] = run_flood(db, n, label, 1, "redis", True, profile)
        count = 2_000 if args.quick else 20_000
        sent = common.run_child(
            common.child_argv("dispatch_rate.py", "send_task", {"count": count}),
            common.child_env(None),
            timeout=600,
            label="send_task",
        )
        client = common.redis_client()
        body = client.lindex(common.KEY_PREFIX + common.QUEUE, 0) or b"{}"
        out["raw"]["send_task"] = sent.data if sent.ok else {"error": sent.error}
        common.redis_cleanup()
        out["raw"]["lpush"] = raw_lpush(20_000 if args.quick else 200_000, body)
        if not args.no_worker:
            import worker_throughput

            out["worker_check"] = worker_throughput.consume_check(200 if args.quick else 1_000)
    finally:
        common.redis_cleanup()
        common.rabbit_delete_queue()
    return out


HEADERS = ["path", "jobs", "wall (s)", "occurrences/s", "QUEUED", "messages", "where the time went"]


def table_rows(data: dict[str, Any]) -> list[list[Any]]:
    """One row per flood run and per raw limit; skipped or failed runs say why."""
    rows: list[list[Any]] = []
    for run in data["runs"]:
        if "skipped" in run or "error" in run:
            note = run.get("skipped") or "failed: " + run["error"].splitlines()[0]
            rows.append([run["label"], data["n"], None, None, None, None, note])
            continue
        spent = run["spent"]
        total = sum(spent.values()) or 1.0
        split = ", ".join(
            f"{k} {v / total:.0%}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1])
        )
        rows.append(
            [
                run["label"],
                run["n"],
                run["wall_s"],
                run["rate"],
                run["queued"],
                run.get("messages", "n/a"),
                split,
            ]
        )
    raw = data["raw"]
    names = {
        "pg_claim": "raw PostgreSQL claim (SKIP LOCKED LIMIT 1000 + UPDATE)",
        "pg_claim_history": "raw PostgreSQL claim + history rows, one statement",
        "send_task": "raw Celery send_task loop to Redis",
        "lpush": "raw Redis LPUSH, pipelined 1,000",
    }
    for key, name in names.items():
        item = raw.get(key, {})
        if "error" in item:
            rows.append([name, None, None, None, None, None, "failed"])
        elif item:
            rows.append([name, item["count"], item["seconds"], item["rate"], None, None, ""])
    return rows


def main() -> None:
    """Measure, save the results for run_all.py and print the table."""
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--profile", action="store_true", help="cProfile the 1-process fast run")
    parser.add_argument("--no-rabbit", action="store_true")
    parser.add_argument("--runs", default=",".join(RUNS), help="comma-separated subset of runs")
    parser.add_argument("--no-worker", action="store_true", help="skip the worker check")
    args = parser.parse_args()
    data = measure(args)
    common.save_result("dispatch_rate", data)
    print(f"\nDispatch rate: {data['n']:,} jobs due at the same instant")
    print(common.render_table(HEADERS, table_rows(data), markdown=False))
    check = data.get("worker_check")
    if check:
        print(
            f"\nstock celery worker consumed {check['completed']:,} of {check['count']:,} "
            f"fast-path messages (all COMPLETED: {check['completed'] == check['count']})"
        )
    if "profile" in data.get("profile_run", {}):
        print("\n" + data["profile_run"]["profile"])


if __name__ == "__main__":
    if not common.child_main({"flood": child_flood, "send_task": child_send_task}):
        main()
