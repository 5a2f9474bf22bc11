"""Measurement 9: Django's Tasks framework: enqueue and run rates, results kept, and a crash.

Six sides enqueue ``count`` no-op tasks, each in its own transaction as a view makes them,
then two worker processes on this machine run them all, keeping each result:

- **duecourse**: ``djtasks.noop.enqueue()`` on ``scheduling.tasks_backend`` (one ledger row,
  published on commit), run by a stock ``celery worker`` (prefork, concurrency 2);
- **django-tasks-db**: the same ``enqueue()`` on ``django_tasks_db.DatabaseBackend`` (one
  row in its table), run by two ``manage.py db_worker`` processes; its clock is its own rows,
  from the first start to the last finish;
- **django-ox**: the same ``enqueue()`` on ``django_ox.backend.OxBackend`` (one row in its
  table, inside the caller's transaction), run by ``manage.py ox_worker --processes 2``
  (a supervisor and two worker processes, one task at a time each); its clock is its rows;
- **threadmill**: the same ``enqueue()`` on ``threadmill.backends.redis.RedisTaskBackend``
  (its only backend: the queue and the results are Redis keys, so the enqueue goes in
  ``transaction.on_commit`` as with Celery), run by ``manage.py threadmill worker --workers 2
  --threads 1``; its clock is its result records, from the first start to the last finish;
- **celery-results**: ``bench.bare_noop.apply_async()`` in ``transaction.on_commit`` (Celery's
  way to publish after a commit), run by the same stock worker with django-celery-results
  writing each result row (``result_extended``);
- **schedulable** (the reference for the run rate): Duecourse's own ``@schedulable_task`` no-op,
  ``count`` due jobs claimed and published by one scheduler tick, run by the same worker.

django-ox and threadmill need Python 3.12 (threadmill also Django 6.0); where they cannot be
imported their sides are skipped with a one-line note. Sides take turns within each round, the
first side moving on by one each round; best and median rounds are reported. A round counts
only if every task's result says it succeeded. Then, once per side, a crash: one task that
sleeps 3 s, its worker SIGKILLed mid-body, a second worker started, and what each side's
record says after up to 60 s.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import common
import worker_cpu
import worker_throughput

DB = common.db_name("djtasks")
DOCS = common.ROOT / "docs" / "benchmarks.md"
SECTION = (
    "## 9. Django's Tasks framework: enqueue and run, against django-tasks-db, django-ox,"
    " threadmill and Celery"
)
OURS = "settings_djtasks"
TASKSDB = "settings_tasksdb"
OX = "settings_ox"
THREADMILL = "settings_threadmill"
RESULTS = "settings_results"
# threadmill's keys are named after its TASKS alias; this run's alias keeps them apart from
# any other run's and lets cleanup delete exactly them (see settings_threadmill).
TM_ALIAS = f"duecourse_bench_{common.RUN_ID}"
TM_PREFIX = f"threadmill:{{{TM_ALIAS}}}:"
EXTRA = {
    "BENCH_DJ_QUEUE": common.QUEUE,
    "BENCH_TM_ALIAS": TM_ALIAS,
    "BENCH_TM_REDIS_URL": common.redis_url(),
}
SIDES = ["duecourse", "tasksdb", "ox", "threadmill", "celery", "schedulable"]
NAMES = {
    "duecourse": "Duecourse backend (celery worker -c 2)",
    "tasksdb": "django-tasks-db (2 x db_worker)",
    "ox": "django-ox (ox_worker --processes 2)",
    "threadmill": "threadmill (worker --workers 2, Redis)",
    "celery": "Celery + django-celery-results (extended)",
    "schedulable": "Duecourse @schedulable_task (reference)",
}
# The crash scenario's leases, each side's own knob (see crash()).
OX_LOCK_TIMEOUT = 15
TM_LEASE_TTL = 20


def unavailable() -> dict[str, str]:
    """Sides whose package cannot be imported by this interpreter, with the one-line reason.

    django-ox and threadmill need Python 3.12, so the ``bench`` extra installs them only there;
    on the project's own 3.11 virtualenv ``make bench`` still runs the other sides.
    """
    import django

    missing: dict[str, str] = {}
    if importlib.util.find_spec("django_ox") is None:
        missing["ox"] = "django-ox is not installed (the bench extra installs it on Python >= 3.12)"
    if importlib.util.find_spec("threadmill") is None:
        missing["threadmill"] = (
            "threadmill is not installed (the bench extra installs it on Python >= 3.12)"
        )
    elif django.VERSION < (6, 0):
        missing["threadmill"] = "threadmill needs Django >= 6.0"
    return missing


def environment() -> dict[str, str]:
    """The interpreter and the versions that matter here, for the docs' command line: the
    run needs an environment of its own (Python 3.12, Django 6), not the project's .venv."""
    import platform
    from importlib import metadata

    versions = {"python": platform.python_version()}
    for dist in ("django", "django-ox", "threadmill", "django-tasks-db", "celery"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    backport = importlib.util.find_spec("django_tasks") is not None
    versions["django-tasks (backport)"] = "installed" if backport else "not installed"
    return versions


# --- children: enqueue loops --------------------------------------------------------------


def child_enqueue(p: dict[str, Any]) -> dict[str, Any]:
    """Enqueue ``count`` tasks, each in its own transaction; report enqueues per second."""
    common.setup_django()
    from django.db import transaction

    count = p["count"]
    if p["side"] == "celery":
        from workerapp import bare_noop

        def one() -> None:
            transaction.on_commit(lambda: bare_noop.apply_async(queue=common.QUEUE))

    elif p["side"] == "threadmill":
        import djtasks

        # Redis is not in the transaction: publish once it commits, as Celery does.
        redis_task = djtasks.noop.using(queue_name=common.QUEUE, backend=TM_ALIAS)

        def one() -> None:
            transaction.on_commit(redis_task.enqueue)

    else:
        import djtasks

        task = djtasks.noop.using(queue_name=common.QUEUE)

        def one() -> None:
            task.enqueue()

    one()  # connections and caches warm before the clock
    started = time.perf_counter()
    for _ in range(count - 1):
        with transaction.atomic():
            one()
    seconds = time.perf_counter() - started
    return {"count": count, "seconds": seconds, "rate": (count - 1) / seconds}


def child_crash_enqueue(p: dict[str, Any]) -> dict[str, Any]:
    """Enqueue the crash scenario's one sleeping task; return its id."""
    common.setup_django()
    if p["side"] == "celery":
        from workerapp import bare_sleepy

        sent = bare_sleepy.apply_async(args=[p["seconds"]], queue=common.QUEUE)
        return {"id": str(sent.id)}
    import djtasks

    task = djtasks.sleepy.using(queue_name=common.QUEUE)
    if p["side"] == "threadmill":
        task = task.using(backend=TM_ALIAS)
    result = task.enqueue(p["seconds"])
    return {"id": str(result.id)}


# --- the parent ----------------------------------------------------------------------------


def settings_of(side: str) -> str:
    return {
        "duecourse": OURS,
        "tasksdb": TASKSDB,
        "ox": OX,
        "threadmill": THREADMILL,
        "celery": RESULTS,
        "schedulable": OURS,
    }[side]


def env_of(side: str, **extra: str) -> dict[str, str]:
    return common.child_env(DB, settings=settings_of(side), extra={**EXTRA, **extra})


def prepare(sides: list[str]) -> None:
    """Migrate the peers' tables into the benchmark database (threadmill has none)."""
    apps = [(TASKSDB, "django_tasks_database"), (RESULTS, "django_celery_results")]
    if "ox" in sides:
        apps.append((OX, "django_ox"))
    for settings, app in apps:
        subprocess.run(
            [common.PYTHON, "manage.py", "migrate", app, "--noinput", "-v0"],
            cwd=common.ROOT,
            env=common.child_env(DB, settings=settings, extra=EXTRA),
            check=True,
        )


def _truncate() -> None:
    with common.pg_connect(DB) as conn:
        ox = conn.execute("SELECT to_regclass('django_ox_oxtask')").fetchone()[0]
        conn.execute(
            "TRUNCATE scheduling_attempt, scheduling_execution, scheduling_job,"
            " scheduling_schedule, django_tasks_database_dbtaskresult,"
            " django_celery_results_taskresult"
            + (", django_ox_oxtask" if ox else "")
            + " RESTART IDENTITY CASCADE"
        )


def _tm_cleanup() -> None:
    """Delete this run's threadmill keys (and only them) from the benchmark Redis db."""
    common.redis_cleanup(TM_PREFIX)


def _cpu_snapshot(workers: list[subprocess.Popen[bytes]]) -> dict[int, tuple[str, float]]:
    """CPU seconds so far, by pid, of the workers' process trees, of the PostgreSQL backends
    connected to this run's database (not the server's other sessions: the machine is shared)
    and of the Redis server (shared: another user's traffic counts too)."""
    import psutil

    snapshot: dict[int, tuple[str, float]] = {}
    for worker in workers:
        try:
            main = psutil.Process(worker.pid)
            tree = [main, *main.children(recursive=True)]
        except psutil.Error:
            continue
        snapshot.update({p.pid: ("worker", worker_cpu.cpu_seconds(p)) for p in tree})
    for proc in psutil.process_iter(["name", "cmdline"]):
        name = proc.info["name"] or ""
        if name == "postgres" and DB in " ".join(proc.info["cmdline"] or []):
            snapshot[proc.pid] = ("postgres", worker_cpu.cpu_seconds(proc))
        elif name.startswith("redis-server"):
            snapshot[proc.pid] = ("redis", worker_cpu.cpu_seconds(proc))
    return snapshot


class CpuWindow:
    """The CPU a run costs per task, between its clock's start and its stop.

    Why: on two cores a side's rate is bounded by two CPU-seconds a second over what one task
    costs in its worker, in PostgreSQL and in Redis together; the split says which of the
    three a side spends its time in, so a gap between sides is explained by a measurement
    rather than guessed at. Start-up (imports, connecting) falls outside the window.
    """

    def __init__(self) -> None:
        self.marks: dict[str, dict[int, tuple[str, float]]] = {}

    def mark(self, which: str, workers: list[subprocess.Popen[bytes]]) -> None:
        if which not in self.marks:
            self.marks[which] = _cpu_snapshot(workers)

    def hook(self, which: str, worker: subprocess.Popen[bytes]) -> None:
        """For ``worker_throughput.WINDOW_HOOKS``: the Celery sides' drain clock."""
        self.mark(which, [worker])

    def per_task(self, count: int) -> dict[str, float] | None:
        if set(self.marks) != {"first", "last"}:
            return None
        a, b = self.marks["first"], self.marks["last"]
        # By process: one that started inside the window counts from zero, and one that ended
        # inside it (its CPU no longer readable) counts nothing rather than a negative.
        ms = {"worker": 0.0, "postgres": 0.0, "redis": 0.0}
        for pid, (kind, seconds) in b.items():
            ms[kind] += (seconds - a.get(pid, (kind, 0.0))[1]) * 1000 / count
        return ms


def _enqueue(side: str, count: int) -> dict[str, Any]:
    child = common.run_child(
        common.child_argv("django_tasks_throughput.py", "enqueue", {"side": side, "count": count}),
        env_of(side),
        timeout=120 + count / 50,
        label=f"enqueue-{side}",
    )
    return child.data if child.ok else {"error": child.error}


def run_celery_side(side: str, count: int) -> dict[str, Any]:
    """Duecourse's backend or Celery + results: enqueue, then a stock worker drains the queue."""
    common.redis_cleanup()
    _truncate()
    enqueued = _enqueue(side, count)
    if "error" in enqueued:
        return {"count": count, "error": enqueued["error"]}
    window = CpuWindow()
    worker_throughput.WINDOW_HOOKS[:] = [window.hook]
    try:
        drained = worker_throughput.drain(count, env_of(side), timeout=120 + count / 20)
    finally:
        worker_throughput.WINDOW_HOOKS.clear()
    with common.pg_connect(DB) as conn:
        if side == "duecourse":
            done = conn.execute(
                "SELECT count(*) FROM scheduling_execution WHERE status = 'completed'"
                " AND task = 'djtasks.noop' AND result IS NOT NULL"
            ).fetchone()[0]
        else:
            done = conn.execute(
                "SELECT count(*) FROM django_celery_results_taskresult WHERE status = 'SUCCESS'"
            ).fetchone()[0]
    common.redis_cleanup()
    return {
        "count": count,
        "enqueue": enqueued,
        **drained,
        "completed": int(done),
        "cpu": window.per_task(count),
    }


def _concurrency() -> int:
    return int(os.environ.get("BENCH_WORKER_CONCURRENCY", "2"))


def _spawn(argv: list[str], env: dict[str, str], log_name: str) -> subprocess.Popen[bytes]:
    """A worker of a peer, in its own session (so kill_group stops all it forks), logging."""
    log = open(common.RESULTS / log_name, "ab")  # noqa: SIM115 (the child owns it)
    return subprocess.Popen(
        argv, cwd=common.ROOT, env=env, stdout=log, stderr=log, start_new_session=True
    )


def _db_workers(count: int, env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    argv = [common.PYTHON, "manage.py", "db_worker", "--queue-name", common.QUEUE]
    argv += ["--interval", "0.05", "--no-startup-delay"]
    return [_spawn(argv, env, "db_worker.log") for _ in range(count)]


def _ox_worker(processes: int, env: dict[str, str], log_name: str) -> subprocess.Popen[bytes]:
    """``ox_worker`` with its defaults (poll interval 1 s when idle, one task per process).

    Above one process it runs as a supervisor of that many worker processes, each claiming
    on its own; the idle poll interval does not pace a backlog (a freed slot claims at once),
    and the clock is its rows, so the interval only delays the first claim.
    """
    argv = [common.PYTHON, "manage.py", "ox_worker", f"--queues={common.QUEUE}"]
    argv += ["--processes", str(processes), "--concurrency", "1"]
    return _spawn(argv, env, log_name)


def _tm_worker(processes: int, env: dict[str, str], log_name: str) -> subprocess.Popen[bytes]:
    """``threadmill worker``: a pool process (and its broker thread) over ``processes``
    worker processes of one thread each, on this run's backend alias and queue."""
    argv = [common.PYTHON, "manage.py", "threadmill", "worker", "--backend", TM_ALIAS]
    argv += ["--queues", common.QUEUE, "--workers", str(processes), "--threads", "1"]
    return _spawn(argv, env, log_name)


def _row_clock(
    count: int,
    workers: list[subprocess.Popen[bytes]],
    *,
    left_sql: str,
    span_sql: str,
    timeout: float,
    window: CpuWindow,
) -> tuple[float | None, int]:
    """Wait until nothing is left, then read the rows' span and successes (``span_sql``).

    ``left_sql`` counts the rows not yet started and the rows not yet finished, so ``window``
    opens at the first claim seen and closes when the last row is seen done.
    """
    deadline = time.monotonic() + timeout
    with common.pg_connect(DB) as conn:
        while time.monotonic() < deadline:
            not_started, left = conn.execute(left_sql).fetchone()
            if not_started < count:
                window.mark("first", workers)
            if not left:
                window.mark("last", workers)
                break
            if any(w.poll() is not None for w in workers):
                break
            time.sleep(0.05)
        span, done = conn.execute(span_sql).fetchone()
    return (float(span) if span else None), int(done or 0)


def _row_result(
    count: int, enqueued: dict[str, Any], span: float | None, done: int, window: CpuWindow
) -> dict[str, Any]:
    if not span:
        return {"count": count, "error": "not drained in time"}
    return {
        "count": count,
        "enqueue": enqueued,
        "seconds": span,
        "rate": count / span,
        "completed": done,
        "cpu": window.per_task(count),
    }


def run_tasksdb(count: int) -> dict[str, Any]:
    """django-tasks-db: enqueue, then two ``db_worker`` processes run every row."""
    _truncate()
    enqueued = _enqueue("tasksdb", count)
    if "error" in enqueued:
        return {"count": count, "error": enqueued["error"]}
    workers = _db_workers(_concurrency(), env_of("tasksdb"))
    window = CpuWindow()
    try:
        span, done = _row_clock(
            count,
            workers,
            left_sql="SELECT count(*) FILTER (WHERE status = 'READY'),"
            " count(*) FILTER (WHERE status IN ('READY', 'RUNNING'))"
            " FROM django_tasks_database_dbtaskresult",
            span_sql="SELECT extract(epoch FROM max(finished_at) - min(started_at)),"
            " count(*) FILTER (WHERE status = 'SUCCESSFUL')"
            " FROM django_tasks_database_dbtaskresult",
            timeout=120 + count / 20,
            window=window,
        )
    finally:
        for worker in workers:
            common.kill_group(worker)
    return _row_result(count, enqueued, span, done, window)


def run_ox(count: int) -> dict[str, Any]:
    """django-ox: enqueue, then ``ox_worker --processes 2`` runs every row."""
    _truncate()
    enqueued = _enqueue("ox", count)
    if "error" in enqueued:
        return {"count": count, "error": enqueued["error"]}
    worker = _ox_worker(_concurrency(), env_of("ox"), "ox_worker.log")
    window = CpuWindow()
    try:
        span, done = _row_clock(
            count,
            [worker],
            left_sql="SELECT count(*) FILTER (WHERE status = 'READY'),"
            " count(*) FILTER (WHERE status IN ('READY', 'RUNNING')) FROM django_ox_oxtask",
            span_sql="SELECT extract(epoch FROM max(finished_at) - min(started_at)),"
            " count(*) FILTER (WHERE status = 'SUCCESSFUL' AND attempts = 1)"
            " FROM django_ox_oxtask",
            timeout=120 + count / 20,
            window=window,
        )
    finally:
        common.kill_group(worker)
    return _row_result(count, enqueued, span, done, window)


def _tm_key(kind: str) -> str:
    """One of threadmill's per-queue keys for this run (``queue``, ``running``, ...)."""
    return f"{TM_PREFIX}{kind}:{common.QUEUE}"


def _tm_results(client: Any) -> list[dict[str, Any]]:
    """Every result record threadmill keeps for this run's queue, successful or failed."""
    ids = [
        member.decode()
        for kind in ("results:{q}:successful", "results:{q}:failed")
        for member in client.zrange(TM_PREFIX + kind.format(q=common.QUEUE), 0, -1)
    ]
    pipe = client.pipeline(transaction=False)
    for task_id in ids:
        pipe.get(f"{TM_PREFIX}result:{task_id}")
    return [json.loads(raw) for raw in pipe.execute() if raw]


def run_threadmill(count: int) -> dict[str, Any]:
    """threadmill: enqueue (on commit) into Redis, then ``threadmill worker --workers 2``.

    Every result record is read back and checked SUCCESSFUL; the clock is those records,
    from the first ``started_at`` to the last ``finished_at``, as for the database workers.
    """
    _tm_cleanup()
    _truncate()
    enqueued = _enqueue("threadmill", count)
    if "error" in enqueued:
        return {"count": count, "error": enqueued["error"]}
    client = common.redis_client()
    worker = _tm_worker(_concurrency(), env_of("threadmill"), "threadmill.log")
    window = CpuWindow()
    deadline = time.monotonic() + 120 + count / 20
    try:
        while time.monotonic() < deadline and worker.poll() is None:
            pipe = client.pipeline(transaction=False)
            pipe.zcard(_tm_key("queue"))
            pipe.zcard(_tm_key("running"))
            waiting, running = pipe.execute()
            if waiting < count:
                window.mark("first", [worker])
            if not waiting + running:
                window.mark("last", [worker])
                break
            time.sleep(0.05)
        results = _tm_results(client)
    finally:
        common.kill_group(worker)
        _tm_cleanup()
    good = [r for r in results if r.get("status") == "SUCCESSFUL"]
    span = None
    if good:
        first = min(datetime.fromisoformat(r["started_at"]) for r in good)
        last = max(datetime.fromisoformat(r["finished_at"]) for r in good)
        span = (last - first).total_seconds()
    return _row_result(count, enqueued, span, len(good), window)


def run_schedulable(count: int) -> dict[str, Any]:
    """The reference: ``count`` due @schedulable_task jobs, one tick, the same stock worker."""
    common.redis_cleanup()
    _truncate()
    with common.pg_connect(DB) as conn:
        common.load_jobs(conn, count, due_sql="now() - interval '1 second'")
    subprocess.run(
        [common.PYTHON, "manage.py", "runscheduler", "--once", "--batch-size", str(count)],
        cwd=common.ROOT,
        env=env_of("schedulable"),
        check=True,
        capture_output=True,
    )
    window = CpuWindow()
    worker_throughput.WINDOW_HOOKS[:] = [window.hook]
    try:
        drained = worker_throughput.drain(count, env_of("schedulable"), timeout=120 + count / 20)
    finally:
        worker_throughput.WINDOW_HOOKS.clear()
    with common.pg_connect(DB) as conn:
        done = common.count_executions(conn).get("completed", 0)
    common.redis_cleanup()
    return {"count": count, **drained, "completed": int(done), "cpu": window.per_task(count)}


RUNNERS: dict[str, Callable[[int], dict[str, Any]]] = {
    "duecourse": lambda count: run_celery_side("duecourse", count),
    "tasksdb": run_tasksdb,
    "ox": run_ox,
    "threadmill": run_threadmill,
    "celery": lambda count: run_celery_side("celery", count),
    "schedulable": run_schedulable,
}


# --- the crash -----------------------------------------------------------------------------


def _worker(side: str, env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
    """One worker of ``side`` that runs one task at a time (the crash's victim or survivor)."""
    if side == "tasksdb":
        return _db_workers(1, env)[0]
    if side == "ox":
        return _ox_worker(1, env, f"crash-{side}-{name}.log")
    if side == "threadmill":
        return _tm_worker(1, env, f"crash-{side}-{name}.log")
    argv = worker_throughput.worker_argv(concurrency=1)
    argv[argv.index("-n") + 1] = f"{name}@%h"
    return _spawn(argv, env, f"crash-{side}-{name}.log")


def _attempts(n: int) -> str:
    return f"{n} attempt" if n == 1 else f"{n} attempts"


def _tm_record(task_id: str) -> str:
    """What threadmill's keys say of one task: its result record, or the set it sits in."""
    client = common.redis_client()
    raw = client.get(f"{TM_PREFIX}result:{task_id}")
    if raw:
        data = json.loads(raw)
        errors = [e["exception_class_path"].rsplit(".", 1)[-1] for e in data.get("errors", [])]
        workers = len(data.get("worker_ids") or [])
        cause = f" ({', '.join(errors)})" if errors else ""
        return f"{data['status']}{cause} after {_attempts(workers)}"
    if client.zscore(_tm_key("running"), task_id) is not None:
        return "RUNNING"
    if client.zscore(_tm_key("queue"), task_id) is not None:
        return "READY"
    return "no record"


def _record(side: str, task_id: str) -> str:
    if side == "threadmill":
        return _tm_record(task_id)
    with common.pg_connect(DB) as conn:
        if side == "duecourse":
            row = conn.execute(
                "SELECT status, (SELECT count(*) FROM scheduling_attempt a"
                " WHERE a.execution_id = e.id) FROM scheduling_execution e WHERE task_id = %s",
                [task_id],
            ).fetchone()
            return f"{row[0]} after {_attempts(row[1])}" if row else "no row"
        if side == "tasksdb":
            row = conn.execute(
                "SELECT status FROM django_tasks_database_dbtaskresult WHERE id = %s", [task_id]
            ).fetchone()
            return str(row[0]) if row else "no row"
        if side == "ox":
            row = conn.execute(
                "SELECT status, attempts FROM django_ox_oxtask WHERE id = %s", [task_id]
            ).fetchone()
            return f"{row[0]} after {_attempts(row[1])}" if row else "no row"
        row = conn.execute(
            "SELECT status FROM django_celery_results_taskresult WHERE task_id = %s", [task_id]
        ).fetchone()
        return str(row[0]) if row else "no result row"


def crash(side: str, *, wait: float = 60.0) -> dict[str, Any]:
    """One sleeping task; SIGKILL its worker mid-body; a second worker; what the record says.

    Each side's lease is shortened from its default so that its recovery, if it has one, falls
    inside ``wait``: Duecourse's STALE_AFTER 60 s to 5 s (heartbeat every 1 s), the Redis
    visibility timeout of Celery 3600 s to 20 s, django-ox's LOCK_TIMEOUT 300 s to 15 s (its
    own kill test's value), threadmill's lease_ttl 1 h to 20 s. The record is read every
    half second, so the table also says when it last changed.
    """
    common.redis_cleanup()
    _tm_cleanup()
    _truncate()
    body = common.RESULTS / f"crash-{side}.body"
    body.unlink(missing_ok=True)
    env = env_of(
        side,
        BENCH_BODY_LOG=str(body),
        SCHEDULING_STALE_AFTER="5",
        SCHEDULING_HEARTBEAT_INTERVAL="1",
        CELERY_VISIBILITY_TIMEOUT="20",
        CELERY_UNACKED_RESTORE_INTERVAL="1",
        BENCH_OX_LOCK_TIMEOUT=str(OX_LOCK_TIMEOUT),
        BENCH_TM_LEASE_TTL=str(TM_LEASE_TTL),
    )
    helpers: list[subprocess.Popen[bytes]] = []
    if side == "duecourse":
        helpers.append(
            subprocess.Popen(
                [common.PYTHON, "manage.py", "runscheduler"],
                cwd=common.ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    first = _worker(side, env, "victim")
    child = common.run_child(
        common.child_argv(
            "django_tasks_throughput.py", "crash_enqueue", {"side": side, "seconds": 3}
        ),
        env,
        timeout=60,
        label=f"crash-{side}",
    )
    if not child.ok:
        for proc in [first, *helpers]:
            common.kill_group(proc)
        return {"error": child.error}
    task_id = child.data["id"]

    def lines() -> list[str]:
        return body.read_text().splitlines() if body.exists() else []

    deadline = time.monotonic() + 60
    while "start" not in lines() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    killed_at = time.monotonic()
    second = _worker(side, env, "survivor")
    recovered = None
    record = _record(side, task_id)
    changed = 0.0
    next_look = killed_at
    try:
        while time.monotonic() - killed_at < wait:
            if lines().count("end") >= 1:
                recovered = time.monotonic() - killed_at
                break
            if time.monotonic() >= next_look:
                now = _record(side, task_id)
                if now != record:
                    record, changed = now, time.monotonic() - killed_at
                next_look += 0.5
            time.sleep(0.1)
        time.sleep(1.0)  # let the survivor record its end
        final = _record(side, task_id)
        if final != record:
            changed = time.monotonic() - killed_at
    finally:
        for proc in [second, *helpers]:
            common.kill_group(proc)
        _tm_cleanup()
    return {
        "record": final,
        "record_changed_after": changed,
        "starts": lines().count("start"),
        "ends": lines().count("end"),
        "recovered_after": recovered,
        "waited": wait,
    }


# --- rounds, table, docs ---------------------------------------------------------------------


def measure(args: Any) -> dict[str, Any]:
    count = 300 if args.quick else args.tasks
    rounds = 1 if args.quick else args.repeat
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    skipped = unavailable()
    for side, why in skipped.items():
        print(f"note: skipping the {NAMES[side]} side: {why}", flush=True)
    sides = [side for side in SIDES if side not in skipped]
    out: dict[str, Any] = {side: [] for side in sides}
    out["count"] = count
    out["skipped"] = skipped
    out["environment"] = environment()
    try:
        with common.bench_db(DB, settings=OURS, keep=args.keep):
            prepare(sides)
            for k in range(rounds):
                # Each round starts one side further on, so no side always follows the same
                # one or always runs first on a freshly migrated database.
                for side in sides[k % len(sides) :] + sides[: k % len(sides)]:
                    out[side].append(RUNNERS[side](count))
            if args.crash:
                out["crash"] = {side: crash(side) for side in sides if side != "schedulable"}
    finally:
        common.redis_cleanup()
        _tm_cleanup()
    valid = {
        side: [r for r in out[side] if "rate" in r and r.get("completed") == r["count"]]
        for side in sides
    }
    for key, pick in (("run", lambda r: r["rate"]), ("enqueue", lambda r: r["enqueue"]["rate"])):
        keyed = sides if key == "run" else [s for s in sides if s != "schedulable"]
        out[f"best_{key}"] = {
            side: max((pick(r) for r in valid[side]), default=0.0) for side in keyed
        }
        out[f"median_{key}"] = {
            side: common.median([pick(r) for r in valid[side]]) if valid[side] else 0.0
            for side in keyed
        }
    return out


def measured(data: dict[str, Any]) -> list[str]:
    """The sides a result holds, in table order (older results lack the newer sides)."""
    return [side for side in SIDES if side in data]


HEADERS = ["side", "tasks", "round", "enqueues/s", "run seconds", "runs/s", "all results kept"]
SUMMARY_HEADERS = ["side", "best enqueues/s", "median enqueues/s", "best runs/s", "median runs/s"]
CRASH_HEADERS = [
    "side",
    "its record after the crash",
    "record last changed",
    "body starts",
    "body ends",
    "recovered",
    "the killed run",
]


def table_rows(data: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for side in measured(data):
        for i, r in enumerate(data.get(side, []), 1):
            if "error" in r:
                rows.append([NAMES[side], r["count"], i, None, None, None, r["error"][:80]])
                continue
            kept = "yes" if r.get("completed") == r["count"] else f"NO: {r.get('completed')}"
            enq = r.get("enqueue", {}).get("rate")
            rows.append([NAMES[side], r["count"], i, enq, r["seconds"], r["rate"], kept])
    return rows


def summary_rows(data: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for side in measured(data):
        rows.append(
            [
                NAMES[side],
                data.get("best_enqueue", {}).get(side),
                data.get("median_enqueue", {}).get(side),
                data.get("best_run", {}).get(side),
                data.get("median_run", {}).get(side),
            ]
        )
    return rows


CPU_HEADERS = [
    "side",
    "worker processes",
    "PostgreSQL backends",
    "Redis server",
    "sum",
    "2 CPU-s / sum (tasks/s)",
]


def cpu_rows(data: dict[str, Any]) -> list[list[Any]]:
    """Median CPU ms per task over each side's counted rounds."""
    rows: list[list[Any]] = []
    for side in measured(data):
        cpus = [
            r["cpu"]
            for r in data.get(side, [])
            if r.get("cpu") and "rate" in r and r.get("completed") == r["count"]
        ]
        if not cpus:
            continue
        parts = [common.median([c[k] for c in cpus]) for k in ("worker", "postgres", "redis")]
        total = common.median([c["worker"] + c["postgres"] + c["redis"] for c in cpus])
        rows.append([NAMES[side], *parts, total, 2000 / total if total else None])
    return rows


def fate(r: dict[str, Any]) -> str:
    """What became of the killed run, from the body's own notes: ran to its end once, never
    (lost, whatever the record says), or more than once (doubled)."""
    if r["ends"] == 0:
        return "lost"
    return "kept, ran to its end once" if r["ends"] == 1 else f"doubled: {r['ends']} ends"


def crash_rows(data: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for side, r in (data.get("crash") or {}).items():
        if "error" in r:
            rows.append([NAMES[side], r["error"][:80], None, None, None, None, None])
            continue
        recovered = (
            f"after {r['recovered_after']:.1f} s"
            if r["recovered_after"] is not None
            else f"not within {r['waited']:.0f} s"
        )
        changed = r.get("record_changed_after")
        changed_text = "never" if not changed else f"after {changed:.1f} s"
        rows.append(
            [
                NAMES[side],
                r["record"].replace("after 1 attempts", "after 1 attempt"),
                changed_text,
                r["starts"],
                r["ends"],
                recovered,
                fate(r),
            ]
        )
    return rows


def short(side: str) -> str:
    return NAMES[side].split(" (")[0]


def _run_rates(data: dict[str, Any], side: str) -> list[float]:
    return [
        r["rate"] for r in data.get(side, []) if "rate" in r and r.get("completed") == r["count"]
    ]


def apart(data: dict[str, Any], a: str, b: str) -> bool:
    """Whether two sides' median run rates differ by more than either side's spread between
    rounds and by at least 3 % (the rule of compare_commits.py): on a shared machine a smaller
    gap is not a measured difference."""
    ra, rb = _run_rates(data, a), _run_rates(data, b)
    if len(ra) < 2 or len(rb) < 2:
        return False
    gap = abs(common.median(ra) - common.median(rb))
    spread = max(max(ra) - min(ra), max(rb) - min(rb))
    return gap > spread and gap >= 0.03 * max(common.median(ra), common.median(rb))


def ratios(data: dict[str, Any]) -> list[str]:
    """Duecourse's backend against each other side, and the section's two targets."""
    best, median = data.get("best_run", {}), data.get("median_run", {})
    best_e, median_e = data.get("best_enqueue", {}), data.get("median_enqueue", {})
    lines = []
    for peer in ("tasksdb", "ox", "threadmill", "celery"):
        if not (best.get(peer) and median.get(peer) and best.get("duecourse")):
            continue
        ours, theirs = _run_rates(data, "duecourse"), _run_rates(data, peer)
        if apart(data, "duecourse", peer):
            verdict = "beyond the spread between rounds"
        elif ours and theirs and min(ours) > max(theirs):
            verdict = "within the spread between rounds, but every Duecourse round faster"
        elif ours and theirs and max(ours) < min(theirs):
            verdict = f"within the spread between rounds, but every {short(peer)} round faster"
        else:
            verdict = "the rounds overlap: not a measured difference"
        lines.append(
            f"- Duecourse / {short(peer)}: runs"
            f" {best['duecourse'] / best[peer]:.2f}x best,"
            f" {median['duecourse'] / median[peer]:.2f}x median ({verdict}); enqueues"
            f" {best_e['duecourse'] / best_e[peer]:.2f}x best,"
            f" {median_e['duecourse'] / median_e[peer]:.2f}x median."
        )
    if best.get("schedulable") and median.get("schedulable"):
        lines.append(
            f"- Duecourse backend / @schedulable_task run rate:"
            f" {best['duecourse'] / best['schedulable']:.0%} best,"
            f" {median['duecourse'] / median['schedulable']:.0%} median (target: within 10 %)."
        )
    peers = {s: v for s, v in median.items() if s not in ("duecourse", "schedulable") and v}
    if median.get("duecourse") and peers:
        top = max(peers, key=lambda s: peers[s])
        ahead = median["duecourse"] > peers[top]
        lines.append(
            "- Target, Duecourse ahead of every other side on median runs/s with results: "
            + ("met" if ahead else "NOT met")
            + f" ({median['duecourse']:,.0f}/s; fastest other side"
            f" {short(top)}, {peers[top]:,.0f}/s)."
        )
    crashed = {s: r for s, r in (data.get("crash") or {}).items() if "error" not in r}
    if "duecourse" in crashed:
        kept = [s for s, r in crashed.items() if fate(r).startswith("kept")]
        others = [short(s) for s in kept if s != "duecourse"]
        only = kept == ["duecourse"]
        lines.append(
            "- Target, Duecourse the only side that neither loses nor doubles the killed run: "
            + ("met." if only else f"NOT met: {', '.join(others)} also ran it to its end once.")
        )
    return lines


INTRO = (
    "Each side enqueues the tasks one transaction each, as a view does, then two worker"
    " processes run them all with each result kept; the sides take turns within a round, the"
    " first side moving on by one each round."
    " Duecourse and Celery: the stock `celery worker` (prefork, concurrency 2, acks_late,"
    " prefetch 1), its clock from the first message taken to an empty queue with nothing"
    " unacknowledged. django-tasks-db: two `db_worker` processes (interval 0.05 s)."
    " django-ox: `ox_worker --processes 2 --concurrency 1` (a supervisor and two worker"
    " processes; package defaults: LOCK_TIMEOUT 300 s, MAX_ATTEMPTS 3, idle poll 1 s), the"
    " enqueue one INSERT inside the view's transaction. threadmill: `threadmill worker"
    " --workers 2 --threads 1` on its only backend, `RedisTaskBackend` (queue, running set and"
    " results in Redis, not in the database; package defaults: lease_ttl 1 h, result_ttl 1 day),"
    " the enqueue in `transaction.on_commit` as with Celery. These three are clocked on their own"
    " records, from the first start to the last finish. The reference row runs"
    " Duecourse's own `@schedulable_task` no-op through one scheduler tick. On a machine shared"
    " with other work the absolute rates fall with its load and the rounds spread apart; only"
    " comparisons within one run, and gaps wider than the spread between rounds, are measured"
    " differences."
)

CPU_INTRO = (
    "CPU per task in milliseconds, median of the counted rounds, from the first task taken to"
    " the last one done (start-up excluded): the side's worker processes (every process of"
    " each worker), the PostgreSQL backends connected to the benchmark database, and the Redis"
    " server (shared with the rest of the machine, so another user's traffic counts too). With"
    " two cores, two CPU-seconds a second over the sum is the rate a side could reach with the"
    " machine to itself."
)

CRASH_INTRO = (
    "A worker SIGKILLed mid-task (one task sleeping 3 s, run by a worker of one task at a"
    " time; its whole process group killed; a second worker started at once; each side's own"
    " record read every half second until the body ended or 60 s passed). Each side's lease"
    " was shortened so that a recovery falls inside the minute: Duecourse STALE_AFTER 5 s"
    " (default 60 s) with a heartbeat every 1 s and its scheduler running; Celery's Redis"
    " visibility timeout 20 s (the project's default 3600 s); django-ox LOCK_TIMEOUT 15 s"
    " (default 300 s; 15 s is what django-ox's own published kill test uses); threadmill"
    " lease_ttl 20 s (default 1 h; its README asks for a value comfortably above the longest"
    " task). *The killed run* is read from the body's own notes: lost if it never ran to its"
    " end, doubled if it ran to its end more than once."
)

MECHANISMS = [
    "How each side notices a dead worker, from its source:",
    "",
    "- Duecourse: each running execution has a heartbeat (`SCHEDULING_HEARTBEAT_INTERVAL`) and"
    " a lease (`SCHEDULING_STALE_AFTER`); the scheduler reaps an execution whose heartbeat is"
    " older than the lease and runs it again as the next attempt, and a worker that could not"
    " renew stops its body before the lease ends (`SCHEDULING_FENCE_AT`).",
    "- django-tasks-db: nothing looks for a RUNNING row whose worker is gone; it stays RUNNING.",
    "- django-ox (`django_ox/worker.py`, `Worker.reap`, `_renewal_loop`): the claim UPDATE"
    " writes `locked_at`, `lease_expires_at` and bumps `lease_epoch`; a renewal thread in every"
    " worker extends the lease every LOCK_TIMEOUT / 3; every worker runs the reaper every"
    " min(30 s, LOCK_TIMEOUT / 2), which puts a RUNNING row whose lease expired back to READY"
    " (a new epoch, so the dead holder's late finish write matches nothing) while attempts"
    " remain, and marks it LOST when MAX_ATTEMPTS claims are spent. At least once: a body cut"
    " short runs again from the start.",
    "- threadmill (`threadmill/backends/redis.py`, `RedisBroker`; `lua/reaper.lua`,"
    " `lua/acknowledge.lua`): acquiring a task puts it in a running set scored by now +"
    " lease_ttl, with no renewal while it runs; the pool process's broker thread (every"
    " broker_interval, 1 s) marks every task whose lease passed FAILED with"
    " `AcknowledgementTimeout` and never runs it again; an acknowledgement arriving after that"
    " is dropped. Its pool restarts a worker process that died, but not the task that process"
    " held. A task that runs longer than lease_ttl is marked FAILED the same way while it is"
    " still running.",
    "- Celery + django-celery-results: with acks_late the message stays unacknowledged in"
    " Redis; when the whole worker dies, Redis gives it to another worker after the"
    " visibility timeout and the result row shows only the last outcome. (A killed pool child"
    " under a live parent acks the message with WorkerLostError unless"
    " `task_reject_on_worker_lost` is set; this scenario kills the whole worker.)",
]


def cpu_reading(data: dict[str, Any]) -> list[str]:
    """Where the CPU per task goes, in words, for the sides the reading turns on."""
    rows = {row[0]: row for row in cpu_rows(data)}

    def part(side: str) -> list[Any] | None:
        return rows.get(NAMES[side]) if side in data else None

    ours, celery, tm, ox = part("duecourse"), part("celery"), part("threadmill"), part("ox")
    if not ours:
        return []
    text = (
        f"Duecourse's backend spends {ours[1]:.1f} of its {ours[4]:.1f} ms per task in the"
        f" stock Celery worker's processes and {ours[2]:.2f} ms in PostgreSQL"
    )
    if celery:
        text += (
            f"; Celery + django-celery-results, in the same worker with no Duecourse code,"
            f" spends {celery[1]:.1f} ms there: the worker, not the ledger, bounds its rate"
        )
    if ox:
        text += (
            f". django-ox spends {ox[1]:.1f} ms in its worker and {ox[2]:.1f} ms in PostgreSQL"
            " (its claim and finish UPDATEs, lease renewal and reaper)"
        )
    if tm:
        text += (
            f". threadmill spends {tm[1]:.1f} ms in its worker, {tm[3]:.2f} ms in Redis and"
            " nothing in PostgreSQL: it writes no database row at all; its queue, running set"
            " and results are Redis keys (results expire after result_ttl, one day)"
        )
    return [text + "."]


def command_lines(result: dict[str, Any] | None) -> list[str]:
    """How to run it again: the interpreter named by what it is, not by where it was.

    The peers need Python 3.12 and threadmill Django 6, so the run used a virtualenv of its own
    rather than the project's ``.venv``; its path means nothing elsewhere, so the command names
    ``python`` and says which environment (``make bench`` runs the same script with
    ``.venv/bin/python``, skipping the sides that are not installed there).
    """
    if not result:
        return common.command_block(result)
    argv = result["command"].split(" ", 1)
    if not argv[0].startswith(".venv/"):
        result = {**result, "command": "python " + (argv[1] if len(argv) > 1 else "")}
    env = result.get("environment") or {}
    lines = common.command_block(result)
    if env:
        where = ", ".join(f"{name} {version}" for name, version in env.items())
        lines[-1:-1] = [
            "where `python` is a Python 3.12+ virtualenv holding this checkout with its `test`"
            " and `bench` extras and Django 6.1, made apart from `.venv`:"
            " `python3.13 -m venv /tmp/bench-venv && /tmp/bench-venv/bin/pip install -e"
            " '.[test,bench]' 'django==6.1.*'` (this run: " + where + ").",
        ]
    return lines


def section_body(data: dict[str, Any] | None, command: list[str]) -> list[str]:
    md = common.render_table
    body = [INTRO, ""]
    if data:
        for side, why in (data.get("skipped") or {}).items():
            body += [f"*{NAMES[side]}: not measured: {why}.*", ""]
        body += [md(HEADERS, table_rows(data), markdown=True), ""]
        body += [md(SUMMARY_HEADERS, summary_rows(data), markdown=True), ""]
        body += [*ratios(data), ""]
        if cpu_rows(data):
            body += [CPU_INTRO, "", md(CPU_HEADERS, cpu_rows(data), markdown=True), ""]
            body += [*cpu_reading(data), ""]
        if data.get("crash"):
            body += [CRASH_INTRO, "", md(CRASH_HEADERS, crash_rows(data), markdown=True), ""]
        body += [*MECHANISMS, ""]
    body += command
    return body


def main() -> None:
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-crash", dest="crash", action="store_false")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument(
        "--render", action="store_true", help="only rewrite the docs from the saved results"
    )
    args = parser.parse_args()
    if args.render:
        result = common.load_result("django_tasks_throughput")
        common.write_docs_section(DOCS, SECTION, section_body(result, command_lines(result)))
        return
    data = measure(args)
    saved = common.save_result("django_tasks_throughput", data)
    print(f"\nDjango Tasks: {data['count']:,} no-op tasks, enqueue then run")
    print(common.render_table(HEADERS, table_rows(data), markdown=False))
    print(common.render_table(SUMMARY_HEADERS, summary_rows(data), markdown=False))
    print("\n".join(ratios(data)))
    print(common.render_table(CPU_HEADERS, cpu_rows(data), markdown=False))
    if data.get("crash"):
        print(common.render_table(CRASH_HEADERS, crash_rows(data), markdown=False))
    if args.write_docs:
        result = common.load_result(saved.stem)
        body = section_body(result, command_lines(result))
        common.write_docs_section(DOCS, SECTION, body)


if __name__ == "__main__":
    if not common.child_main({"enqueue": child_enqueue, "crash_enqueue": child_crash_enqueue}):
        main()
