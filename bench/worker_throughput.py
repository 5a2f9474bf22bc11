"""Measurement 4: worker throughput with execution history against a bare Celery worker.

Both sides run the same stock ``celery worker`` (prefork, concurrency 2, the project's
settings: acks_late, prefetch multiplier 1) on the same app (``bench/workerapp.py``), the same
broker and queue (Redis; RabbitMQ with ``--broker amqp``), in the same run:

- **bare**: K messages of ``bench.bare_noop``, a plain ``@app.task(acks_late=True)`` that
  returns at once and records nothing;
- **history**: K due jobs of ``scheduling.diagnostics.noop`` (a ScheduledTask), published by
  ``manage.py runscheduler --once``; each run claims its execution row, records an attempt and
  completes both (the whole history).

- **floor** (unless ``--no-floor``): the history side's messages and worker machinery with
  its two ledger writes (the claim before the body, the end before the acknowledgement)
  replaced by the cheapest durable write there is (``bench/floorapp.py``): what any design
  that commits twice per task can reach here, to read the history side against;

- **django-celery-results** (unless ``--no-peers``): the bare side's messages on the same
  worker, with Celery's result backend writing one row per task to the same PostgreSQL
  (``django-db``, ``result_extended``; ``bench/settings_results.py``), once without and once
  with ``task_track_started`` (a STARTED write before the body): the per-task history most
  Celery projects keep today;

- **procrastinate** (unless ``--no-peers``): the same no-op job deferred K times into
  procrastinate's own tables on the same PostgreSQL and run by its own worker
  (``bench/procapp.py``, ``BENCH_WORKER_CONCURRENCY`` worker processes): a task queue whose
  queue and history both live in the database. Its clock is the span of its own event rows,
  from the first ``started`` to the last ``succeeded``;

- with ``--what-if SETTINGS``, **history** once more under another settings module (for
  example ``settings_reconnect``: a new PostgreSQL connection for every task, Django's and
  Celery's default), to put a number on a configuration choice.

The queue is filled first; then the worker starts and the clock runs from the first message
taken to the moment the queue and the unacknowledged set are both empty. The sides alternate
(``--repeat`` rounds, bare first); the best and the median round of each are reported and the
best ones compared; a round counts only if every task's history says it succeeded. The
target is history ≥ 70 % of bare.
``consume_check`` (used by dispatch_rate.py) proves a stock worker runs fast-path messages to
COMPLETED.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

import common

DB = common.db_name("worker")
RESULTS_SETTINGS = "settings_results"
DOCS = common.ROOT / "docs" / "benchmarks.md"
SECTION = "## 4. Worker throughput with execution history"


#: Called as ``hook("first" | "last", worker)`` when a drain's clock starts and stops
#: (``worker_cpu.py`` samples the processes' CPU over exactly that window).
WINDOW_HOOKS: list[Callable[[str, subprocess.Popen[bytes]], None]] = []

#: The broker every Celery side runs on: ``redis`` (the default, as ``make bench``) or ``amqp``
#: (RabbitMQ at ``BENCH_RABBIT_URL``), set by ``--broker``.
BROKER = "redis"


def env(settings: str = "config.settings", extra: dict[str, str] | None = None) -> dict[str, str]:
    """A child's environment on this run's database and broker."""
    broker = common.RABBIT_URL if BROKER == "amqp" else None
    return common.child_env(DB, settings=settings, broker=broker, extra=extra)


def _clear_queue() -> None:
    common.redis_cleanup()
    if BROKER == "amqp":
        common.rabbit_delete_queue()


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


class _RedisQueue:
    """The benchmark queue on Redis: messages waiting, and whether none is unacknowledged."""

    def __init__(self) -> None:
        self.client = common.redis_client()
        self.queue = common.KEY_PREFIX + common.QUEUE
        self.unacked = common.KEY_PREFIX + "unacked"

    def waiting(self) -> int:
        return int(self.client.llen(self.queue))

    #: Redis shows the unacknowledged set, so the clock runs until it is empty too.
    clock_waits_for_acks = True

    def settled(self) -> bool:
        return int(self.client.hlen(self.unacked)) == 0

    def close(self) -> None:
        self.client.close()


class _RabbitQueue:
    """The benchmark queue on RabbitMQ, read with a passive declare.

    AMQP tells the messages ready, not the ones a consumer holds unacknowledged, so the clock
    stops when the last message is handed out: at most ``concurrency`` (2) tasks short, under
    0.5 % of an 800-task round. The worker is stopped only once ``rabbitmqctl`` shows nothing
    unacknowledged, so every task still ends and is checked.
    """

    clock_waits_for_acks = False

    def __init__(self) -> None:
        from kombu import Connection

        self.connection = Connection(common.RABBIT_URL, connect_timeout=5)
        self.channel = self.connection.channel()

    def waiting(self) -> int:
        try:
            return int(self.channel.queue_declare(common.QUEUE, passive=True).message_count)
        except Exception:  # not declared yet: the worker declares it when it starts
            self.channel = self.connection.channel()
            return -1

    def settled(self) -> bool:
        vhost = unquote(urlsplit(common.RABBIT_URL).path[1:]) or "/"
        argv = ["rabbitmqctl", "-q", "list_queues", "-p", vhost, "name", "messages_unacknowledged"]
        try:
            listed = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(f"--broker amqp needs rabbitmqctl on this machine: {exc}") from exc
        if listed.returncode:
            raise RuntimeError(f"--broker amqp: {' '.join(argv)} failed: {listed.stderr.strip()}")
        for line in listed.stdout.splitlines():
            name, _, unacked = line.partition("\t")
            if name == common.QUEUE:
                return unacked.strip() == "0"
        return False  # the queue is there while the worker runs; the deadline bounds the wait

    def close(self) -> None:
        self.connection.release()


def _broker_queue() -> _RedisQueue | _RabbitQueue:
    """The benchmark queue on this run's broker."""
    return _RabbitQueue() if BROKER == "amqp" else _RedisQueue()


def drain(
    count: int, env: dict[str, str], *, timeout: float, app: str = "workerapp"
) -> dict[str, Any]:
    """Start a worker on a full queue; time it from the first message taken to an empty queue.

    On Redis the clock also waits until nothing is unacknowledged; on RabbitMQ it stops when
    the last message is handed out (see ``_RabbitQueue``). Either way the worker is stopped
    only once every message is acknowledged.
    """
    queue = _broker_queue()
    log = open(common.RESULTS / "worker.log", "ab")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        worker_argv(app=app),
        cwd=common.ROOT,
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    first = last = settled_at = None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            left = queue.waiting()
            now = time.perf_counter()
            if first is None and 0 <= left < count:
                first = now
                for hook in WINDOW_HOOKS:
                    hook("first", proc)
            if first is not None and left == 0:
                if last is None and not queue.clock_waits_for_acks:
                    last = now
                    for hook in WINDOW_HOOKS:
                        hook("last", proc)
                # Settled twice in a row: kombu takes a message off the Redis list before it
                # records it as unacknowledged, and one look can fall between the two.
                if not queue.settled():
                    settled_at = None
                elif settled_at is None:
                    settled_at = now
                else:
                    if last is None:
                        last = settled_at
                        for hook in WINDOW_HOOKS:
                            hook("last", proc)
                    break
            if proc.poll() is not None:
                break
            time.sleep(0.01)
    finally:
        common.kill_group(proc)
        log.close()
        queue.close()
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
        env=env(),
        check=True,
        capture_output=True,
    )


def run_bare(count: int) -> dict[str, Any]:
    """One bare round: fill the queue with plain tasks, then time a worker draining it."""
    _clear_queue()
    filled = common.run_child(
        common.child_argv("worker_throughput.py", "fill", {"count": count}),
        env(),
        timeout=300,
        label="fill",
    )
    if not filled.ok:
        return {"count": count, "error": filled.error}
    result = drain(count, env(), timeout=120 + count / 50)
    _clear_queue()
    return result


def run_history(count: int, settings: str = "config.settings") -> dict[str, Any]:
    """One history round: publish K due jobs, time a worker running them, check the ledger."""
    _clear_queue()
    _publish_ours(count)
    probe = _broker_queue()
    try:
        queued = probe.waiting()
    finally:
        probe.close()
    result = drain(count, env(settings), timeout=120 + count / 20)
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
    _clear_queue()
    return result


def run_floor(count: int) -> dict[str, Any]:
    """One floor round: the history side's messages, each ledger write one counter update."""
    _clear_queue()
    _publish_ours(count)
    result = drain(count, env(), timeout=120 + count / 20, app="floorapp")
    with common.pg_connect(DB) as conn:
        touched = conn.execute(
            "SELECT count(*) FROM scheduling_execution WHERE duplicates = 2"
        ).fetchone()[0]
    # "completed" here means: both writes of the task ran, once each.
    result.update(completed=int(touched))
    _clear_queue()
    return result


def prepare_peers() -> None:
    """Add django-celery-results' table and procrastinate's schema to the benchmark database."""
    subprocess.run(
        [common.PYTHON, "manage.py", "migrate", "django_celery_results", "--noinput", "-v0"],
        cwd=common.ROOT,
        env=common.child_env(DB, settings=RESULTS_SETTINGS),
        check=True,
    )
    from procrastinate.schema import SchemaManager

    with common.pg_connect(DB) as conn:
        conn.execute(SchemaManager.get_schema())


def run_results(count: int, *, track_started: bool) -> dict[str, Any]:
    """One django-celery-results round: bare messages, a result row written for each."""
    _clear_queue()
    with common.pg_connect(DB) as conn:
        conn.execute("TRUNCATE django_celery_results_taskresult")
    filled = common.run_child(
        common.child_argv("worker_throughput.py", "fill", {"count": count}),
        env(),
        timeout=300,
        label="fill",
    )
    if not filled.ok:
        return {"count": count, "error": filled.error}
    worker_env = env(
        RESULTS_SETTINGS,
        extra={"BENCH_TRACK_STARTED": "1" if track_started else "0"},
    )
    result = drain(count, worker_env, timeout=120 + count / 20)
    with common.pg_connect(DB) as conn:
        done = conn.execute(
            "SELECT count(*) FROM django_celery_results_taskresult"
            " WHERE status = 'SUCCESS' AND task_name = %s",
            [common.BARE_TASK],
        ).fetchone()[0]
    result.update(completed=int(done))
    _clear_queue()
    return result


def _procrastinate_dsn() -> str:
    return common.libpq_url(common.db_url(DB))


def run_procrastinate(count: int) -> dict[str, Any]:
    """One procrastinate round: defer K no-op jobs, time its workers running them all.

    The jobs are deferred in one batch before the workers start. The clock is procrastinate's
    own record: from the first ``started`` event to the last ``succeeded`` one.
    """
    os.environ["BENCH_PROCRASTINATE_DSN"] = _procrastinate_dsn()
    import procapp
    from procrastinate import PsycopgConnector

    with common.pg_connect(DB) as conn:
        conn.execute("TRUNCATE procrastinate_jobs RESTART IDENTITY CASCADE")
    # This round's database (the app was made with the one the run first imported it with).
    connector = PsycopgConnector(conninfo=_procrastinate_dsn())
    with procapp.app.replace_connector(connector), procapp.app.open():
        procapp.bench_noop.batch_defer(*({} for _ in range(count)))
    env = common.child_env(None, extra={"BENCH_PROCRASTINATE_DSN": _procrastinate_dsn()})
    argv = [common.PYTHON, "-m", "procrastinate", "--app", "procapp.app", "worker"]
    argv += ["--concurrency", os.environ.get("BENCH_PROCRASTINATE_CONCURRENCY", "1")]
    processes = int(os.environ.get("BENCH_WORKER_CONCURRENCY", "2"))
    log = open(common.RESULTS / "worker.log", "ab")  # noqa: SIM115 (closed below)
    workers = [
        subprocess.Popen(
            argv, cwd=common.ROOT, env=env, stdout=log, stderr=log, start_new_session=True
        )
        for _ in range(processes)
    ]
    deadline = time.monotonic() + 120 + count / 20
    try:
        with common.pg_connect(DB) as conn:
            while time.monotonic() < deadline:
                left = conn.execute(
                    "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
                ).fetchone()[0]
                if not left or any(w.poll() is not None for w in workers):
                    break
                time.sleep(0.05)
            span, done = conn.execute(
                "SELECT extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')"
                " - min(at) FILTER (WHERE type = 'started')),"
                " count(*) FILTER (WHERE type = 'succeeded') FROM procrastinate_events"
            ).fetchone()
    finally:
        for worker in workers:
            common.kill_group(worker)
        log.close()
    if not span:
        return {"count": count, "error": f"not drained within {deadline:.0f} s"}
    seconds = float(span)
    return {"count": count, "seconds": seconds, "rate": count / seconds, "completed": int(done)}


def consume_check(count: int) -> dict[str, Any]:
    """A stock worker consumes ``count`` fast-path messages; every execution must complete."""
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    with common.bench_db(DB):
        with common.pg_connect(DB) as conn:
            common.load_jobs(conn, count, due_sql="now() - interval '1 second'")
        return run_history(count)


def measure(args: Any) -> dict[str, Any]:
    """Alternating rounds of each side; the best and the median valid round of each."""
    count = 300 if args.quick else args.tasks
    rounds = 1 if args.quick else args.repeat
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {side: [] for side in SIDES}
    out["count"] = count
    out["what_if"] = args.what_if
    out["broker"] = BROKER
    try:
        with common.bench_db(DB, keep=args.keep):
            with common.pg_connect(DB) as conn:
                common.load_jobs(conn, count, due_sql="now() - interval '1 second'")
            if args.peers:
                prepare_peers()
            for _ in range(rounds):
                out["bare"].append(run_bare(count))
                out["history"].append(run_history(count))
                if args.floor:
                    out["floor"].append(run_floor(count))
                if args.peers:
                    out["results"].append(run_results(count, track_started=False))
                    out["results_started"].append(run_results(count, track_started=True))
                    out["procrastinate"].append(run_procrastinate(count))
                if args.what_if:
                    out["history_whatif"].append(run_history(count, args.what_if))
    finally:
        _clear_queue()
    # A round counts only if every task's history says it succeeded: a worker that fails
    # its tasks fast is not fast.
    valid = {
        side: [r for r in out[side] if "rate" in r and r.get("completed", r["count"]) == r["count"]]
        for side in SIDES
    }
    best = {side: max((r["rate"] for r in rounds), default=0.0) for side, rounds in valid.items()}
    out["best"] = best
    out["median"] = {
        side: common.median([r["rate"] for r in rounds]) if rounds else 0.0
        for side, rounds in valid.items()
    }
    out["ratio"] = best["history"] / best["bare"] if best["bare"] and best["history"] else None
    if best["bare"] and best["floor"]:
        out["ratio_floor"] = best["floor"] / best["bare"]
    if best["bare"] and best["history_whatif"]:
        out["ratio_whatif"] = best["history_whatif"] / best["bare"]
    return out


SIDES = ["bare", "history", "floor", "results", "results_started", "procrastinate",
         "history_whatif"]  # fmt: skip
NAMES = {
    "bare": "bare @app.task noop",
    "history": "ScheduledTask noop + history",
    "floor": "floor: two durable one-row writes",
    "results": "django-celery-results (extended)",
    "results_started": "django-celery-results (extended, track_started)",
    "procrastinate": "procrastinate worker (2 processes)",
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
            elif side in ("results", "results_started", "procrastinate"):
                done = (
                    "yes"
                    if r.get("completed") == r["count"]
                    else f"NO: {r.get('completed', 0):,} recorded as succeeded"
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


SUMMARY_HEADERS = ["side", "rounds", "best tasks/s", "median tasks/s", "best / bare",
                   "history / side (best)", "history / side (median)"]  # fmt: skip


def summary_rows(data: dict[str, Any]) -> list[list[Any]]:
    """One row per side that ran: best and median of its valid rounds, against bare and ours."""
    names = {**NAMES, "history_whatif": f"ScheduledTask + history, {data.get('what_if')}"}
    best, median = data.get("best", {}), data.get("median", {})
    rows: list[list[Any]] = []
    for side in SIDES:
        if not data.get(side):
            continue
        rate = best.get(side) or None
        middle = median.get(side) or None
        rows.append(
            [
                names[side],
                len(data[side]),
                rate,
                middle,
                rate / best["bare"] if rate and best.get("bare") else None,
                best["history"] / rate if rate and best.get("history") else None,
                median["history"] / middle if middle and median.get("history") else None,
            ]
        )
    return rows


def section_body(data: dict[str, Any] | None, command: list[str]) -> list[str]:
    """The worker section of docs/benchmarks.md (also rendered by run_all.py)."""
    md = common.render_table
    on_rabbit = bool(data and data.get("broker") == "amqp")
    broker = "RabbitMQ" if on_rabbit else "Redis"
    until = (
        "the last message is handed out (AMQP does not tell what a consumer holds)"
        if on_rabbit
        else "the queue and the unacknowledged set are empty"
    )
    body = [
        "Target: history ≥ 70 % of bare. The one against procrastinate (≥ 1.1 x by the"
        " medians of the same run) is judged at 800 tasks waiting, in section 12, since"
        " procrastinate's rate depends on its backlog. Every Celery side: the same stock"
        " `celery worker` (prefork, concurrency 2, acks_late, prefetch multiplier 1) on the"
        f" same app and {broker}"
        " queue, the queue filled before the worker starts; the clock runs from the first"
        f" message taken until {until}. procrastinate"
        " runs its own worker processes on the same PostgreSQL; its clock is its own event"
        " rows, from the first job started to the last one succeeded.",
        "",
    ]
    if data:
        body += [md(HEADERS, table_rows(data), markdown=True), ""]
        body += [
            "Best and median of the rounds above. On a machine shared with other work (see"
            " the load average below) single rounds vary widely, and the medians are the"
            " steadier comparison.",
            "",
        ]
        body += [md(SUMMARY_HEADERS, summary_rows(data), markdown=True), ""]
    body += command
    body += [
        "",
        "Orientation (other machines): a bare prefork worker, concurrency 2, runs about"
        " 1,000-1,300 trivial acks_late tasks/s. The *floor* rows run the history side's"
        " messages and worker with its two ledger writes (the claim before the body, the end"
        " before the acknowledgement) each replaced by a one-row update of an unindexed"
        " counter (`bench/floorapp.py`): the most any design that commits twice per task can"
        " reach on this machine. The *django-celery-results* rows are the bare side's messages"
        " with Celery's database result backend writing each task's row (`result_extended`),"
        " once more with `task_track_started`; the *procrastinate* rows run the same no-op"
        " job with procrastinate's own worker, whose queue and history are both PostgreSQL"
        " tables (see docs/architecture.md for where its difference with ours comes from)."
        " A *what-if* row, when present, is the same history run under another settings"
        " module (`--what-if`), to put a number on a configuration choice.",
    ]
    return body


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
        "--no-peers",
        dest="peers",
        action="store_false",
        help="skip the django-celery-results and procrastinate sides",
    )
    parser.add_argument(
        "--what-if", metavar="SETTINGS", help="also run history under this settings module"
    )
    parser.add_argument(
        "--broker",
        choices=["redis", "amqp"],
        default="redis",
        help="the Celery sides' broker: Redis (default) or RabbitMQ at BENCH_RABBIT_URL",
    )
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help="replace the worker section of docs/benchmarks.md with this run's tables",
    )
    args = parser.parse_args()
    global BROKER
    BROKER = args.broker
    if BROKER == "amqp" and not common.rabbit_available():
        raise SystemExit(f"--broker amqp: RabbitMQ does not answer at {common.RABBIT_URL}")
    data = measure(args)
    saved = common.save_result("worker_throughput", data)
    print("\nWorker throughput, trivial tasks, prefork concurrency 2")
    print(common.render_table(HEADERS, table_rows(data), markdown=False))
    print(common.render_table(SUMMARY_HEADERS, summary_rows(data), markdown=False))
    if args.write_docs:
        result = common.load_result(saved.stem)
        body = section_body(result, common.command_block(result))
        common.write_docs_section(DOCS, SECTION, body)
    if data.get("ratio") is not None:
        print(f"history / bare = {data['ratio']:.0%} (target ≥ 70 %)")
    if data.get("ratio_floor") is not None:
        print(f"floor / bare = {data['ratio_floor']:.0%} (two durable writes per task, no ledger)")
    sys.stdout.flush()


if __name__ == "__main__":
    if not common.child_main({"fill": child_fill}):
        main()
