"""One cell of ``bench/paced_queue.py``: a system at an offered rate, from an empty queue to its
numbers.

A cell empties the system's tables, starts its worker (Duecourse and the floor: a stock
``celery worker``, prefork, 4 processes, Redis broker; procrastinate: its own worker, one
process running 4 jobs at once), starts the paced producer (``paced_producer.py``), samples
CPU between the producer's ``WINDOW`` lines, lets the queue drain for a bounded time, stops
the worker and reads the tables. Databases are ``qb_due_<run id>`` (Duecourse's ledger, also
the floor's Django database) and ``qb_proc_<run id>`` (procrastinate's schema), made once per
run; Redis keys carry the run's prefix in db ``BENCH_REDIS_DB``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import common
import paced_measure as measure

DUE_DB = f"qb_due_{common.RUN_ID}"
PROC_DB = f"qb_proc_{common.RUN_ID}"
SYSTEMS = ["duecourse", "duecourse_bulk", "procrastinate", "floor"]
CONCURRENCY = 4
WARMUP = 8
FILES = common.RESULTS / "paced"


def qb_url(name: str) -> str:
    """The URL of this benchmark's database ``name`` (only ``qb_`` names are ever used)."""
    if not name.startswith("qb_"):
        raise ValueError(f"refusing to use database {name!r}: this benchmark's start with qb_")
    parts = urlsplit(common.server_url())
    return urlunsplit(parts._replace(path="/" + name, query=""))


def connect(name: str) -> Any:
    """An autocommit connection, named so that its CPU is never counted as a side's."""
    import psycopg

    return psycopg.connect(
        common.libpq_url(qb_url(name)), autocommit=True, application_name=measure.DRIVER_APP
    )


def _server() -> Any:
    import psycopg

    parts = urlsplit(common.server_url())
    url = urlunsplit(parts._replace(path="/postgres", query=""))
    return psycopg.connect(common.libpq_url(url), autocommit=True)


def drop(name: str) -> None:
    qb_url(name)  # validates the name
    with _server() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_databases() -> None:
    """Duecourse's ledger migrated with the benchmark's settings; procrastinate's schema."""
    from procrastinate.schema import SchemaManager

    for name in (DUE_DB, PROC_DB):
        drop(name)
        with _server() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run(
        [common.PYTHON, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=common.ROOT,
        env=env_of("duecourse", "migrate", Path("/dev/null")),
        check=True,
    )
    with connect(PROC_DB) as conn:
        conn.execute(SchemaManager.get_schema())


def drop_databases() -> None:
    for name in (DUE_DB, PROC_DB):
        drop(name)


def db_of(system: str) -> str:
    return PROC_DB if system == "procrastinate" else DUE_DB


def env_of(system: str, role: str, starts: Path) -> dict[str, str]:
    """A child's environment: this run's database, queue, Redis prefix and start-time file;
    ``PGAPPNAME`` tells its PostgreSQL backends apart (``paced_measure.PG_KINDS``)."""
    extra = {
        "BENCH_PACED_STARTS": str(starts),
        "BENCH_PACED_QUEUE": common.QUEUE,
        "BENCH_DJ_QUEUE": common.QUEUE,
        "PGAPPNAME": f"qb_{role}",
        "DATABASE_URL": qb_url(DUE_DB),
        "BENCH_PROCRASTINATE_DSN": common.libpq_url(qb_url(PROC_DB)),
    }
    return common.child_env(None, settings="settings_paced", extra=extra)


def reset(system: str) -> None:
    """Empty the system's tables (TRUNCATE: fresh files, so sizes and row counters start at
    zero) and this run's Redis keys."""
    common.redis_cleanup()
    if system == "procrastinate":
        with connect(PROC_DB) as conn:
            conn.execute(
                "TRUNCATE procrastinate_jobs, procrastinate_events RESTART IDENTITY CASCADE"
            )
    else:
        with connect(DUE_DB) as conn:
            conn.execute("TRUNCATE scheduling_attempt, scheduling_execution RESTART IDENTITY")


def worker_argv(system: str) -> list[str]:
    if system == "procrastinate":
        return [
            common.PYTHON, "-m", "procrastinate", "--app", "paced_procapp.app", "worker",
            "--queues", common.QUEUE, "--concurrency", str(CONCURRENCY),
        ]  # fmt: skip
    return [
        common.PYTHON, "-m", "celery", "-A", "config", "worker", "-P", "prefork",
        "-c", str(CONCURRENCY), "-Q", common.QUEUE, "-n", f"paced-{common.RUN_ID}@%h",
        "--without-mingle", "--without-gossip", "-l", "WARNING",
    ]  # fmt: skip


def _spawn(argv: list[str], env: dict[str, str], log: Path, **kw: Any) -> subprocess.Popen[Any]:
    handle = open(log, "ab")  # noqa: SIM115 (the child holds it; closed with the cell)
    return subprocess.Popen(
        argv, cwd=common.ROOT, env=env, stderr=handle, start_new_session=True,
        stdout=kw.pop("stdout", handle), **kw,
    )  # fmt: skip


def pg_backends(system: str) -> Any:
    """A reader of the side's PostgreSQL backends (pid → application_name), on its own
    connection (the sampler runs in a thread of its own)."""
    holder: dict[str, Any] = {}

    def read() -> dict[int, str]:
        if "conn" not in holder:
            holder["conn"] = connect(db_of(system))
        rows = (
            holder["conn"]
            .execute(
                "SELECT pid, coalesce(application_name, '') FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name <> %s",
                [measure.DRIVER_APP],
            )
            .fetchall()
        )
        return {int(pid): app for pid, app in rows}

    read.close = lambda: holder.get("conn") and holder["conn"].close()  # type: ignore[attr-defined]
    return read


def _done(system: str, conn: Any, starts: Path) -> tuple[int, int]:
    """Runs finished so far and runs made: the ledger's, or the floor's start lines."""
    if system == "floor":
        n = len(measure.read_times(starts))
        return n, n
    return measure.finished(conn, system)


def run_cell(system: str, rate: int, seconds: float, opts: dict[str, Any]) -> dict[str, Any]:
    """One system at one offered rate; see the module docstring."""
    FILES.mkdir(parents=True, exist_ok=True)
    label = f"{system}-{rate}-{opts['tag']}"
    starts, commits, log = (FILES / f"{label}.{ext}" for ext in ("starts", "commits", "log"))
    for path in (starts, commits):
        path.unlink(missing_ok=True)
    reset(system)
    if system != "floor":
        # An empty table still has its indexes' first pages: what the runs added is the rest.
        with connect(db_of(system)) as conn:
            out_empty = measure.table_facts(conn, system)
    params = {
        "system": system, "rate": rate, "seconds": seconds, "tick": opts["tick"],
        "batch_max": opts["batch_max"], "bulk": opts["bulk"], "queue": common.QUEUE,
        "warmup": WARMUP, "ready": 120, "commits": str(commits),
    }  # fmt: skip
    worker = _spawn(worker_argv(system), env_of(system, "worker", starts), log)
    producer = _spawn(
        [common.PYTHON, str(common.BENCH / "paced_producer.py"), json.dumps(params)],
        env_of(system, "producer", starts),
        log,
        stdout=subprocess.PIPE,
        text=True,
    )
    backends = pg_backends(system)
    meter = measure.CpuMeter({"producer": producer.pid, "worker": worker.pid}, backends)
    out: dict[str, Any] = {"system": system, "rate": rate, "tag": opts["tag"]}
    window = (0.0, 0.0)
    ending = None
    try:
        with connect(db_of(system)) as conn:
            for line in producer.stdout or []:
                if line.startswith("WINDOW start"):
                    window = (float(line.split()[2]), 0.0)
                    done0 = _done(system, conn, starts)[0]
                    meter.start()
                    hook = opts.get("window_hook")
                    if hook is not None:
                        ending = hook({"worker": worker.pid, "producer": producer.pid})
                elif line.startswith("WINDOW end"):
                    if ending is not None:
                        ending()
                    meter.stop()
                    done1 = _done(system, conn, starts)[0]
                    window = (window[0], float(line.split()[2]))
                    out["completed_in_window"] = done1 - done0
                elif line.startswith("RESULT "):
                    out["producer"] = json.loads(line[len("RESULT ") :])
            producer.wait(timeout=60)
            if "producer" not in out:
                raise RuntimeError(f"{label}: the producer stopped early; see {log}")
            want = out["producer"]["enqueued"] + WARMUP
            done = 0
            deadline = time.monotonic() + opts["drain"]
            while time.monotonic() < deadline:
                done = _done(system, conn, starts)[0]
                if done >= want:
                    break
                time.sleep(0.2)
            out["drained"] = done >= want
    finally:
        common.kill_group(producer)
        common.kill_group(worker)
        backends.close()
    out["loadavg"] = os.getloadavg()
    out["cpu"] = meter.by_kind()
    out["window"] = meter.seconds
    out["machine_busy"] = meter.machine_busy()
    out.update(measure.latency_and_depth(
        measure.read_times(commits), measure.read_times(starts), window
    ))  # fmt: skip
    out["duplicates"] = measure.duplicate_starts(starts)
    if system != "floor":
        with connect(db_of(system)) as conn:
            _wait_backends_gone(conn)
            out["tables"] = measure.table_facts(conn, system)
            out["empty_tables"] = out_empty
    if not opts.get("keep_files"):
        for path in (starts, commits):
            path.unlink(missing_ok=True)
    return out


def _wait_backends_gone(conn: Any, timeout: float = 15.0) -> None:
    """Until the side's backends have ended (each flushes its row counters as it exits)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchone()[0]
        if not left:
            return
        time.sleep(0.1)
