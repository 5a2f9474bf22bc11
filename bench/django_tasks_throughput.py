"""Measurement 9: Django's Tasks framework: enqueue and run rates, results kept, and a crash.

Three sides enqueue ``count`` no-op tasks, each in its own transaction as a view makes them,
then two worker processes on this machine run them all, keeping each result:

- **duecourse**: ``djtasks.noop.enqueue()`` on ``scheduling.tasks_backend`` (one ledger row,
  published on commit), run by a stock ``celery worker`` (prefork, concurrency 2);
- **django-tasks-db**: the same ``enqueue()`` on ``django_tasks_db.DatabaseBackend`` (one
  row in its table), run by two ``manage.py db_worker`` processes; its clock is its own rows,
  from the first start to the last finish;
- **celery-results**: ``bench.bare_noop.apply_async()`` in ``transaction.on_commit`` (Celery's
  way to publish after a commit), run by the same stock worker with django-celery-results
  writing each result row (``result_extended``);
- **schedulable** (the reference for the run rate): Duecourse's own ``@schedulable_task`` no-op,
  ``count`` due jobs claimed and published by one scheduler tick, run by the same worker.

Sides alternate round by round; best and median rounds are reported. A round counts only if
every task's result says it succeeded. Then, once per side, a crash: one task that sleeps 3 s,
its worker SIGKILLed mid-body, a second worker started, and what each side's record says
after up to 60 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

import common
import worker_throughput

DB = common.db_name("djtasks")
DOCS = common.ROOT / "docs" / "benchmarks.md"
SECTION = "## 9. Django's Tasks framework: enqueue and run, against django-tasks-db and Celery"
OURS = "settings_djtasks"
TASKSDB = "settings_tasksdb"
RESULTS = "settings_results"
EXTRA = {"BENCH_DJ_QUEUE": common.QUEUE}
SIDES = ["duecourse", "tasksdb", "celery", "schedulable"]
NAMES = {
    "duecourse": "Duecourse backend (celery worker -c 2)",
    "tasksdb": "django-tasks-db (2 x db_worker)",
    "celery": "Celery + django-celery-results (extended)",
    "schedulable": "Duecourse @schedulable_task (reference)",
}


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

    result = djtasks.sleepy.using(queue_name=common.QUEUE).enqueue(p["seconds"])
    return {"id": str(result.id)}


# --- the parent ----------------------------------------------------------------------------


def settings_of(side: str) -> str:
    return {"duecourse": OURS, "tasksdb": TASKSDB, "celery": RESULTS, "schedulable": OURS}[side]


def env_of(side: str, **extra: str) -> dict[str, str]:
    return common.child_env(DB, settings=settings_of(side), extra={**EXTRA, **extra})


def prepare() -> None:
    """Migrate the peers' tables into the benchmark database."""
    for settings, app in ((TASKSDB, "django_tasks_database"), (RESULTS, "django_celery_results")):
        subprocess.run(
            [common.PYTHON, "manage.py", "migrate", app, "--noinput", "-v0"],
            cwd=common.ROOT,
            env=common.child_env(DB, settings=settings, extra=EXTRA),
            check=True,
        )


def _truncate() -> None:
    with common.pg_connect(DB) as conn:
        conn.execute(
            "TRUNCATE scheduling_attempt, scheduling_execution, scheduling_job,"
            " scheduling_schedule, django_tasks_database_dbtaskresult,"
            " django_celery_results_taskresult RESTART IDENTITY CASCADE"
        )


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
    drained = worker_throughput.drain(count, env_of(side), timeout=120 + count / 20)
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
    return {"count": count, "enqueue": enqueued, **drained, "completed": int(done)}


def _db_workers(count: int, env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    argv = [common.PYTHON, "manage.py", "db_worker", "--queue-name", common.QUEUE]
    argv += ["--interval", "0.05", "--no-startup-delay"]
    log = open(common.RESULTS / "db_worker.log", "ab")  # noqa: SIM115 (children own it)
    return [
        subprocess.Popen(
            argv, cwd=common.ROOT, env=env, stdout=log, stderr=log, start_new_session=True
        )
        for _ in range(count)
    ]


def run_tasksdb(count: int) -> dict[str, Any]:
    """django-tasks-db: enqueue, then two ``db_worker`` processes run every row."""
    _truncate()
    enqueued = _enqueue("tasksdb", count)
    if "error" in enqueued:
        return {"count": count, "error": enqueued["error"]}
    workers = _db_workers(int(os.environ.get("BENCH_WORKER_CONCURRENCY", "2")), env_of("tasksdb"))
    deadline = time.monotonic() + 120 + count / 20
    try:
        with common.pg_connect(DB) as conn:
            while time.monotonic() < deadline:
                left = conn.execute(
                    "SELECT count(*) FROM django_tasks_database_dbtaskresult"
                    " WHERE status IN ('READY', 'RUNNING')"
                ).fetchone()[0]
                if not left or any(w.poll() is not None for w in workers):
                    break
                time.sleep(0.05)
            span, done = conn.execute(
                "SELECT extract(epoch FROM max(finished_at) - min(started_at)),"
                " count(*) FILTER (WHERE status = 'SUCCESSFUL')"
                " FROM django_tasks_database_dbtaskresult"
            ).fetchone()
    finally:
        for worker in workers:
            common.kill_group(worker)
    if not span:
        return {"count": count, "error": "not drained in time"}
    return {
        "count": count,
        "enqueue": enqueued,
        "seconds": float(span),
        "rate": count / float(span),
        "completed": int(done),
    }


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
    drained = worker_throughput.drain(count, env_of("schedulable"), timeout=120 + count / 20)
    with common.pg_connect(DB) as conn:
        done = common.count_executions(conn).get("completed", 0)
    common.redis_cleanup()
    return {"count": count, **drained, "completed": int(done)}


# --- the crash -----------------------------------------------------------------------------


def _worker(side: str, env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
    if side == "tasksdb":
        return _db_workers(1, env)[0]
    argv = worker_throughput.worker_argv(concurrency=1)
    argv[argv.index("-n") + 1] = f"{name}@%h"
    log = open(common.RESULTS / f"crash-{side}-{name}.log", "ab")  # noqa: SIM115
    return subprocess.Popen(
        argv, cwd=common.ROOT, env=env, stdout=log, stderr=log, start_new_session=True
    )


def _record(side: str, task_id: str) -> str:
    with common.pg_connect(DB) as conn:
        if side == "duecourse":
            row = conn.execute(
                "SELECT status, (SELECT count(*) FROM scheduling_attempt a"
                " WHERE a.execution_id = e.id) FROM scheduling_execution e WHERE task_id = %s",
                [task_id],
            ).fetchone()
            return f"{row[0]} after {row[1]} attempts" if row else "no row"
        if side == "tasksdb":
            row = conn.execute(
                "SELECT status FROM django_tasks_database_dbtaskresult WHERE id = %s", [task_id]
            ).fetchone()
            return str(row[0]) if row else "no row"
        row = conn.execute(
            "SELECT status FROM django_celery_results_taskresult WHERE task_id = %s", [task_id]
        ).fetchone()
        return str(row[0]) if row else "no result row"


def crash(side: str, *, wait: float = 60.0) -> dict[str, Any]:
    """One sleeping task; SIGKILL its worker mid-body; a second worker; what the record says."""
    common.redis_cleanup()
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
    try:
        while time.monotonic() - killed_at < wait:
            if lines().count("end") >= 1:
                recovered = time.monotonic() - killed_at
                break
            time.sleep(0.2)
        time.sleep(1.0)  # let the survivor record its end
    finally:
        for proc in [second, *helpers]:
            common.kill_group(proc)
    return {
        "record": _record(side, task_id),
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
    out: dict[str, Any] = {side: [] for side in SIDES}
    out["count"] = count
    try:
        with common.bench_db(DB, settings=OURS, keep=args.keep):
            prepare()
            for _ in range(rounds):
                out["duecourse"].append(run_celery_side("duecourse", count))
                out["tasksdb"].append(run_tasksdb(count))
                out["celery"].append(run_celery_side("celery", count))
                out["schedulable"].append(run_schedulable(count))
            if args.crash:
                out["crash"] = {side: crash(side) for side in ("duecourse", "tasksdb", "celery")}
    finally:
        common.redis_cleanup()
    valid = {
        side: [r for r in out[side] if "rate" in r and r.get("completed") == r["count"]]
        for side in SIDES
    }
    for key, pick in (("run", lambda r: r["rate"]), ("enqueue", lambda r: r["enqueue"]["rate"])):
        sides = SIDES if key == "run" else SIDES[:3]
        out[f"best_{key}"] = {
            side: max((pick(r) for r in valid[side]), default=0.0) for side in sides
        }
        out[f"median_{key}"] = {
            side: common.median([pick(r) for r in valid[side]]) if valid[side] else 0.0
            for side in sides
        }
    return out


HEADERS = ["side", "tasks", "round", "enqueues/s", "run seconds", "runs/s", "all results kept"]
SUMMARY_HEADERS = ["side", "best enqueues/s", "median enqueues/s", "best runs/s", "median runs/s"]
CRASH_HEADERS = ["side", "its record after the crash", "body starts", "body ends", "recovered"]


def table_rows(data: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for side in SIDES:
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
    for side in SIDES:
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


def crash_rows(data: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for side, r in (data.get("crash") or {}).items():
        if "error" in r:
            rows.append([NAMES[side], r["error"][:80], None, None, None])
            continue
        recovered = (
            f"after {r['recovered_after']:.1f} s"
            if r["recovered_after"] is not None
            else f"not within {r['waited']:.0f} s"
        )
        rows.append([NAMES[side], r["record"], r["starts"], r["ends"], recovered])
    return rows


def ratios(data: dict[str, Any]) -> list[str]:
    best, median = data.get("best_run", {}), data.get("median_run", {})
    best_e, median_e = data.get("best_enqueue", {}), data.get("median_enqueue", {})
    lines = []
    if best.get("tasksdb") and median.get("tasksdb"):
        lines.append(
            f"- Duecourse / django-tasks-db: runs {best['duecourse'] / best['tasksdb']:.2f}x best,"
            f" {median['duecourse'] / median['tasksdb']:.2f}x median; enqueues"
            f" {best_e['duecourse'] / best_e['tasksdb']:.2f}x best,"
            f" {median_e['duecourse'] / median_e['tasksdb']:.2f}x median (target: above 1)."
        )
    if best.get("schedulable") and median.get("schedulable"):
        lines.append(
            f"- Duecourse backend / @schedulable_task run rate:"
            f" {best['duecourse'] / best['schedulable']:.0%} best,"
            f" {median['duecourse'] / median['schedulable']:.0%} median (target: within 10 %)."
        )
    return lines


def section_body(data: dict[str, Any] | None, command: list[str]) -> list[str]:
    md = common.render_table
    body = [
        "Each side enqueues the tasks one transaction each, as a view does, then two worker"
        " processes run them all with each result kept; sides alternate round by round."
        " Duecourse and Celery: the stock `celery worker` (prefork, concurrency 2, acks_late,"
        " prefetch 1), its clock from the first message taken to an empty queue with nothing"
        " unacknowledged. django-tasks-db: two `db_worker` processes (interval 0.05 s), its"
        " clock its own rows from the first start to the last finish. The reference row runs"
        " Duecourse's own `@schedulable_task` no-op through one scheduler tick.",
        "",
    ]
    if data:
        body += [md(HEADERS, table_rows(data), markdown=True), ""]
        body += [md(SUMMARY_HEADERS, summary_rows(data), markdown=True), ""]
        body += [*ratios(data), ""]
        if data.get("crash"):
            body += [
                "A worker SIGKILLed mid-task (one task sleeping 3 s; a second worker started"
                " at once; each side's own record read after the body ended or 60 s passed):",
                "",
                md(CRASH_HEADERS, crash_rows(data), markdown=True),
                "",
            ]
    body += command
    return body


def main() -> None:
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-crash", dest="crash", action="store_false")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    data = measure(args)
    saved = common.save_result("django_tasks_throughput", data)
    print(f"\nDjango Tasks: {data['count']:,} no-op tasks, enqueue then run")
    print(common.render_table(HEADERS, table_rows(data), markdown=False))
    print(common.render_table(SUMMARY_HEADERS, summary_rows(data), markdown=False))
    print("\n".join(ratios(data)))
    if data.get("crash"):
        print(common.render_table(CRASH_HEADERS, crash_rows(data), markdown=False))
    if args.write_docs:
        result = common.load_result(saved.stem)
        body = section_body(result, common.command_block(result))
        common.write_docs_section(DOCS, SECTION, body)


if __name__ == "__main__":
    if not common.child_main({"enqueue": child_enqueue, "crash_enqueue": child_crash_enqueue}):
        main()
