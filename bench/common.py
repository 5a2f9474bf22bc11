"""Plumbing shared by the benchmark scripts: databases, Redis keys, child processes, tables.

Why a separate module: every measurement must run the scheduler under test in its own child
process (so peak RSS is that scheduler's alone), against its own ``bench_*`` database and its
own Redis key prefix (so nothing here touches the project's or anyone else's data), and must
clean all of it up afterwards. Those rules live here once, and the scripts stay short.

Conventions:

- PostgreSQL: the server comes from ``DATABASE_URL`` (as in ``make bench``); only databases
  whose names start with ``bench_`` are ever created or dropped.
- Redis: db ``BENCH_REDIS_DB`` (default 6) and key prefix ``duecourse_bench:<run id>:``;
  cleanup deletes only keys with that prefix.
- Databases are ``bench_<what>_<run id>``; the run id is the driver's pid unless
  ``BENCH_RUN_ID`` is set, so concurrent runs do not collide.
- Results: each script writes ``var/bench/<name>.json``; ``run_all.py`` renders the docs from
  them. A child process reports by printing one ``RESULT <json>`` line (and ``PROGRESS <json>``
  lines on the way, which survive its being stopped).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# Benchmarks run on a DATABASE_URL, where the project requires one shared SECRET_KEY; every
# process a benchmark starts inherits this one.
os.environ.setdefault("SECRET_KEY", "bench-only-" + "k" * 50)

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = Path(os.environ.get("BENCH_RESULTS_DIR", ROOT / "var" / "bench"))
PYTHON = sys.executable

# One id per run, shared by a run's children through the environment: every database and
# Redis key of a run carries it, so two runs (say, two people's) on one machine never meet.
RUN_ID = os.environ.setdefault("BENCH_RUN_ID", str(os.getpid()))
KEY_PREFIX = f"duecourse_bench:{RUN_ID}:"
QUEUE = f"duecourse_bench_q_{RUN_ID}"  # unique per run on RabbitMQ too, which has no prefix
BENCH_TASK = "scheduling.diagnostics.noop"
BARE_TASK = "bench.bare_noop"
RABBIT_URL = os.environ.get("BENCH_RABBIT_URL", "amqp://guest:guest@127.0.0.1:5672//")


# --- where things live ----------------------------------------------------------------------


def server_url() -> str:
    """The PostgreSQL server URL (any database name), from DATABASE_URL like ``make bench``."""
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    if not url.startswith(("postgres://", "postgresql://")):
        raise SystemExit(f"bench needs PostgreSQL; DATABASE_URL is {url!r}")
    return url


def db_name(base: str) -> str:
    """This run's database for ``base`` (``bench_<base>_<run id>``)."""
    return f"bench_{base}_{RUN_ID}"


def db_url(name: str) -> str:
    """The URL of benchmark database ``name``; refuses any name not starting with ``bench_``."""
    if not name.startswith("bench_"):
        raise ValueError(f"refusing to use database {name!r}: bench databases start with bench_")
    parts = urlsplit(server_url())
    return urlunsplit(parts._replace(path="/" + name, query=""))


def libpq_url(url: str) -> str:
    """psycopg wants ``postgresql://``; Django's reader accepts both spellings."""
    return "postgresql://" + url.split("://", 1)[1]


def redis_url() -> str:
    """The Redis database the benchmarks write to (never 0-3, which the project's runs use)."""
    base = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")
    number = int(os.environ.get("BENCH_REDIS_DB", "6"))
    if number < 4:
        raise SystemExit("BENCH_REDIS_DB must be 4 or more")
    return f"{base.rstrip('/')}/{number}"


# --- PostgreSQL -----------------------------------------------------------------------------


def pg_connect(name: str, *, autocommit: bool = True) -> Any:
    """A psycopg connection to benchmark database ``name`` (autocommit: loads are set-based)."""
    import psycopg

    return psycopg.connect(libpq_url(db_url(name)), autocommit=autocommit)


def _admin() -> Any:
    """A connection to the server's ``postgres`` database, to create and drop ``bench_`` ones."""
    import psycopg

    parts = urlsplit(server_url())
    return psycopg.connect(
        libpq_url(urlunsplit(parts._replace(path="/postgres", query=""))), autocommit=True
    )


def drop_db(name: str) -> None:
    """Drop benchmark database ``name``, ending any session still in it (ours only)."""
    db_url(name)  # validates the name
    with _admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_db(name: str, *, settings: str = "config.settings") -> None:
    """(Re)create database ``name`` and migrate it with ``settings``."""
    drop_db(name)
    with _admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run(
        [PYTHON, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=child_env(name, settings=settings),
        check=True,
    )


@contextlib.contextmanager
def bench_db(name: str, *, settings: str = "config.settings", keep: bool = False) -> Iterator[str]:
    """A freshly migrated database that is dropped on the way out (unless ``keep``)."""
    create_db(name, settings=settings)
    try:
        yield name
    finally:
        if not keep:
            drop_db(name)


def create_owner(conn: Any) -> int:
    """The ``auth_user`` row that owns every benchmark job."""
    row = conn.execute(
        "INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email,"
        " is_staff, is_active, date_joined) VALUES ('!', false, 'bench', '', '', '', false,"
        " true, now()) ON CONFLICT (username) DO UPDATE SET is_active = true RETURNING id"
    ).fetchone()
    return int(row[0])


def load_jobs(
    conn: Any,
    count: int,
    *,
    due_sql: str,
    interval: str = "PT1H",
    queue: str = QUEUE,
    task: str = BENCH_TASK,
) -> float:
    """Insert ``count`` jobs, each with its own schedule, in two set-based statements.

    ``due_sql`` is an SQL expression for ``next_due_at`` in terms of ``g`` (1..count); the
    nominal occurrence equals the due time (no jitter) and each job is anchored one interval
    before it, so the next occurrence is exactly one interval later. One schedule per job is
    what ``jobs.create_job`` does, so the claim's per-schedule cache gets no free hits.
    Returns the seconds the load took.
    """
    started = time.perf_counter()
    owner = create_owner(conn)
    conn.execute(
        "TRUNCATE scheduling_attempt, scheduling_execution, scheduling_job, scheduling_schedule"
        " RESTART IDENTITY CASCADE"
    )
    conn.execute(
        "INSERT INTO scheduling_schedule (owner_id, name, interval, cron, rrule, timezone,"
        " run_at, starts_at, ends_at, created_at)"
        " SELECT %s, '', %s, '', '', 'UTC', NULL, NULL, NULL, now()"
        " FROM generate_series(1, %s)",
        [owner, interval, count],
    )
    conn.execute(
        f"""
        INSERT INTO scheduling_job (name, task, args, kwargs, task_table, task_row_id, status,
            next_due_at, next_occurrence_at, execute_count, last_keepalive_at, note, misfire,
            overlap, jitter, timeout, max_retries, retry_backoff, retry_backoff_max, queue,
            priority, created_at, updated_at, current_execution_id, owner_id, schedule_id,
            pause_reason)
        SELECT 'bench-' || g, %(task)s, '[]'::jsonb, '{{}}'::jsonb, '', NULL, 'active',
            d.due, d.due, 0, NULL, '', 'catch_up', 'forbid', interval '0', 300, 3, NULL, NULL,
            %(queue)s, NULL, d.due - %(interval)s::interval, now(), NULL, %(owner)s, g, ''
          FROM generate_series(1, %(count)s) AS g,
               LATERAL (SELECT ({due_sql})::timestamptz AS due) AS d
        """,
        {
            "task": task,
            "queue": queue,
            "interval": _pg_interval(interval),
            "owner": owner,
            "count": count,
        },
    )
    conn.execute("VACUUM ANALYZE scheduling_job")
    conn.execute("VACUUM ANALYZE scheduling_schedule")
    return time.perf_counter() - started


def _pg_interval(iso: str) -> str:
    """``PT1H`` → ``1 hour`` (only the simple forms the benchmarks use)."""
    units = {"H": "hours", "M": "minutes", "S": "seconds"}
    body = iso.removeprefix("PT")
    return f"{body[:-1]} {units[body[-1]]}"


def load_dcb(conn: Any, count: int, *, last_run_sql: str, params: dict[str, Any]) -> None:
    """``count`` django-celery-beat PeriodicTask rows (``g`` = 1..count) on one hourly interval.

    ``last_run_sql`` is the SQL for each row's ``last_run_at`` (it may use ``g`` and
    ``params``): it decides which rows are due, and when.
    """
    conn.execute(
        "TRUNCATE django_celery_beat_periodictask, django_celery_beat_intervalschedule,"
        " django_celery_beat_periodictasks RESTART IDENTITY CASCADE"
    )
    interval_id = conn.execute(
        "INSERT INTO django_celery_beat_intervalschedule (every, period)"
        " VALUES (1, 'hours') RETURNING id"
    ).fetchone()[0]
    conn.execute(
        f"""
        INSERT INTO django_celery_beat_periodictask (name, task, args, kwargs, queue, exchange,
            routing_key, expires, enabled, last_run_at, total_run_count, date_changed,
            description, crontab_id, interval_id, solar_id, one_off, start_time, priority,
            headers, clocked_id, expire_seconds)
        SELECT 'bench-' || g, %(task)s, '[]', '{{}}', %(queue)s, NULL, NULL, NULL, true,
            {last_run_sql},
            0, now(), '', NULL, %(interval)s, NULL, false, NULL, NULL, '{{}}', NULL, NULL
          FROM generate_series(1, %(count)s) AS g
        """,
        {**params, "task": BENCH_TASK, "queue": QUEUE, "interval": interval_id, "count": count},
    )
    conn.execute("VACUUM ANALYZE django_celery_beat_periodictask")


def load_redbeat(count: int, prefix: str, last_run_at: Callable[[int], dt.datetime]) -> float:
    """``count`` hourly RedBeat entries (``g`` = 1..count), entry g last run at ``last_run_at(g)``.

    Written as RedBeat itself writes them: a hash with the JSON definition and meta per entry,
    and the schedule sorted set scored by the next due time in whole seconds (RedBeat's own
    ``redbeat.decoder.to_timestamp``). Returns the seconds the load took.
    """
    from celery.schedules import schedule
    from redbeat.decoder import RedBeatJSONEncoder

    started = time.perf_counter()
    client = redis_client()
    every = dt.timedelta(hours=1)
    hourly = schedule(run_every=every)
    metas: dict[dt.datetime, str] = {}
    pipe = client.pipeline(transaction=False)
    zadd: dict[str, float] = {}
    for g in range(1, count + 1):
        name = f"bench-{g}"
        key = prefix + name
        last = last_run_at(g)
        if last not in metas:
            metas[last] = json.dumps({"last_run_at": last}, cls=RedBeatJSONEncoder)
        definition = {
            "name": name,
            "task": BENCH_TASK,
            "args": [],
            "kwargs": {},
            "options": {"queue": QUEUE},
            "schedule": hourly,
            "enabled": True,
        }
        encoded = json.dumps(definition, cls=RedBeatJSONEncoder)
        pipe.hset(key, mapping={"definition": encoded, "meta": metas[last]})
        zadd[key] = int((last + every).timestamp())
        if len(zadd) >= 5000:
            pipe.zadd(prefix + ":schedule", zadd)
            pipe.execute()
            zadd = {}
    if zadd:
        pipe.zadd(prefix + ":schedule", zadd)
    pipe.execute()
    return time.perf_counter() - started


def reset_jobs(conn: Any, *, due_sql: str) -> None:
    """Forget every execution and make the jobs due again at ``due_sql`` (in terms of ``id``)."""
    conn.execute(
        f"UPDATE scheduling_job SET next_due_at = ({due_sql}), next_occurrence_at = ({due_sql}),"
        f" created_at = ({due_sql}) - interval '1 hour', current_execution_id = NULL,"
        " status = 'active', execute_count = 0"
    )
    # Not TRUNCATE: scheduling_job references scheduling_execution, so a cascading truncate
    # would empty the jobs too.
    conn.execute("DELETE FROM scheduling_attempt")
    conn.execute("DELETE FROM scheduling_execution")
    # No VACUUM or ANALYZE of the emptied tables: either records "0 rows", and with autovacuum
    # off (as on this CI server) the foreign-key checks that run at COMMIT (Django's FKs are
    # DEFERRABLE INITIALLY DEFERRED) would then be planned as sequential scans and slow every
    # claim down as the table grows. Left alone, the tables look as they did after loading.
    conn.execute("VACUUM ANALYZE scheduling_job")


def count_executions(conn: Any) -> dict[str, int]:
    """Executions by status: how a run checks that every occurrence got where it should."""
    rows = conn.execute("SELECT status, count(*) FROM scheduling_execution GROUP BY 1").fetchall()
    return {status: int(n) for status, n in rows}


# --- Redis ----------------------------------------------------------------------------------


def redis_client() -> Any:
    """A client on the benchmark Redis db (never db 0-3)."""
    import redis

    return redis.Redis.from_url(redis_url())


def redis_cleanup(prefix: str = KEY_PREFIX) -> int:
    """Delete every key starting with ``prefix`` in the benchmark db; return how many."""
    client = redis_client()
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=prefix + "*", count=5000):
        batch.append(key)
        if len(batch) >= 5000:
            deleted += client.unlink(*batch)
            batch = []
    if batch:
        deleted += client.unlink(*batch)
    return deleted


def queue_length(client: Any, queue: str = QUEUE) -> int:
    """Messages waiting in the benchmark queue (under this run's key prefix)."""
    return int(client.llen(KEY_PREFIX + queue))


def rabbit_delete_queue(queue: str = QUEUE) -> None:
    """Drop the benchmark queue from RabbitMQ (it holds persistent messages otherwise)."""
    from kombu import Connection

    with contextlib.suppress(Exception), Connection(RABBIT_URL, connect_timeout=3) as conn:
        conn.default_channel.queue_delete(queue)


def rabbit_available() -> bool:
    """Whether RabbitMQ answers, so its run is skipped (and said so) rather than failed."""
    from kombu import Connection

    try:
        with Connection(RABBIT_URL, connect_timeout=3) as conn:
            conn.ensure_connection(max_retries=1)
        return True
    except Exception:
        return False


# --- child processes ------------------------------------------------------------------------


def child_env(
    db: str | None,
    *,
    settings: str = "config.settings",
    broker: str | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """Environment for a child that runs project code against benchmark resources only."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SCHEDULING_", "CELERY_", "DJANGO_SETTINGS_MODULE"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE=settings,
        PYTHONPATH=os.pathsep.join([str(ROOT), str(BENCH)]),
        CELERY_BROKER_URL=broker or redis_url(),
        CELERY_REDIS_KEY_PREFIX=KEY_PREFIX,
        PYTHONUNBUFFERED="1",
        # A scheduler that logs every claim at INFO is the shipped default; the benchmark
        # keeps it, writing the log to a file (see run_child) rather than a terminal.
        SCHEDULING_LOG_LEVEL=os.environ.get("BENCH_SCHEDULING_LOG_LEVEL", "INFO"),
    )
    if db is not None:
        env["DATABASE_URL"] = db_url(db)
    env.update(extra or {})
    return env


@dataclass
class ChildResult:
    """What a child reported, or why it did not."""

    ok: bool
    data: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    seconds: float = 0.0
    peak_rss_mb: float = 0.0


def run_child(
    argv: Sequence[str],
    env: dict[str, str],
    *,
    timeout: float = 600.0,
    rss_cap_mb: float | None = None,
    label: str = "child",
) -> ChildResult:
    """Run a child, watch its time and memory, and parse its ``RESULT`` line.

    The watch is what makes "infeasible" a measured fact instead of a hang: a child over its
    time or memory budget is killed and the result says which limit it hit and when.
    """
    import psutil

    log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (kept open for the child's lifetime)
        prefix=f"bench-{label}-", suffix=".log", delete=False
    )
    started = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        start_new_session=True,
    )
    watched = psutil.Process(proc.pid)
    peak = 0.0
    stop_reason = ""
    out_chunks: list[str] = []
    try:
        while True:
            try:
                out, _ = proc.communicate(timeout=0.25)
                out_chunks.append(out or "")
                break
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(psutil.Error):
                peak = max(peak, watched.memory_info().rss / 2**20)
            elapsed = time.monotonic() - started
            if elapsed > timeout:
                stop_reason = f"over the time budget ({timeout:.0f} s)"
            elif rss_cap_mb is not None and peak > rss_cap_mb:
                stop_reason = f"over the memory cap ({rss_cap_mb:.0f} MB RSS)"
            if stop_reason:
                kill_group(proc)
                out, _ = proc.communicate()
                out_chunks.append(out or "")
                break
    finally:
        kill_group(proc)
        log.close()
    seconds = time.monotonic() - started
    stdout = "".join(out_chunks)
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            data = json.loads(line[len("RESULT ") :])
            os.unlink(log.name)
            return ChildResult(True, data, seconds=seconds, peak_rss_mb=peak)
    # A child stopped on the way still tells how far it got (say, how long its startup took).
    progress: dict[str, Any] = {}
    for line in stdout.splitlines():
        if line.startswith("PROGRESS "):
            progress.update(json.loads(line[len("PROGRESS ") :]))
    tail = Path(log.name).read_text(errors="replace")[-3000:]
    reason = stop_reason or f"exit code {proc.returncode}"
    return ChildResult(
        False,
        data=progress,
        error=f"{label}: {reason} after {seconds:.0f} s; log {log.name}\n{tail}",
        seconds=seconds,
        peak_rss_mb=peak,
    )


def progress(**facts: Any) -> None:
    """From a child: record how far it got, in case it is stopped before its RESULT."""
    print("PROGRESS " + json.dumps(facts, default=str), flush=True)


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """Stop a child we started and everything it forked (it leads its own session)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def child_main(handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]]) -> bool:
    """If invoked as ``script.py --child NAME JSON``, run handler NAME and print its RESULT."""
    if len(sys.argv) < 4 or sys.argv[1] != "--child":
        return False
    name, params = sys.argv[2], json.loads(sys.argv[3])
    result = handlers[name](params)
    result.setdefault("peak_rss_mb", peak_rss_mb())
    print("RESULT " + json.dumps(result, default=str), flush=True)
    return True


def child_argv(script: str, name: str, params: dict[str, Any]) -> list[str]:
    """The command that runs handler ``name`` of ``script`` in a fresh interpreter."""
    return [PYTHON, str(BENCH / script), "--child", name, json.dumps(params)]


def setup_django() -> None:
    """Configure Django in a child (the env chose the settings module and database)."""
    import django

    django.setup()


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM), the number the RSS targets refer to."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


# --- numbers and tables ---------------------------------------------------------------------


def pct(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank on the sorted values); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: Sequence[float]) -> float:
    """The median, NaN for no values (a missing measurement must not look like zero)."""
    return statistics.median(values) if values else float("nan")


def fmt(value: Any, digits: int = 1) -> str:
    """Numbers for tables: thousands separators, fixed digits, '—' for missing."""
    if value is None or (isinstance(value, float) and value != value):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1 or value == 0:
            return f"{value:,.{digits}f}"
        return f"{value:.{digits + 1}f}"
    return str(value)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, markdown: bool) -> str:
    """The same rows as a Markdown table (docs) or aligned text (terminal)."""
    cells = [[fmt(c) for c in row] for row in rows]
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(row) + " |" for row in cells]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(out)


def write_docs_section(path: Path, section: str, body: list[str]) -> None:
    """Replace the ``section`` heading's section of ``path`` with ``body``, keeping the others.

    A page without the section gets it at the end. The section runs to the next ``## ``.
    """
    text = path.read_text()
    block = "\n".join([section, "", *body, "", ""])
    if section not in text:
        path.write_text(text.rstrip("\n") + "\n\n" + block)
        return
    start = text.index(section)
    end = text.find("\n## ", start + len(section))
    end = len(text) if end < 0 else end + 1
    path.write_text(text[:start] + block + text[end:])


def save_result(name: str, data: dict[str, Any]) -> Path:
    """Write one script's results (with how and where they were made) for run_all.py."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {
        "command": command_line(),
        "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "load_after": os.getloadavg(),
        **data,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str))
    return path


def load_result(name: str) -> dict[str, Any] | None:
    """The saved results of script ``name``, or None if it has not run."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def command_line() -> str:
    """The command that produced a result, as one can paste it from the repository root."""
    script = Path(sys.argv[0]).resolve()
    with contextlib.suppress(ValueError):
        script = script.relative_to(ROOT)
    interpreter = os.path.relpath(PYTHON, ROOT) if PYTHON.startswith(str(ROOT)) else PYTHON
    return shlex.join([interpreter, str(script), *sys.argv[1:]])


def command_block(result: dict[str, Any] | None) -> list[str]:
    """How a result was produced, pasteable, with when and under what load."""
    if not result:
        return ["*Not measured in this run.*"]
    return [
        "Command (from the repository root, with `DATABASE_URL` pointing at the PostgreSQL"
        " server, as `make bench` sets it):",
        "",
        "```",
        f"DATABASE_URL={server_hint()} {result['command']}",
        "```",
        f"Finished {result['finished_at']}; load average after: "
        + ", ".join(f"{x:.2f}" for x in result.get("load_after", [])),
    ]


def server_hint() -> str:
    """The DATABASE_URL the run used, with any password masked."""
    parts = urlsplit(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"))
    if parts.password:
        host = parts.netloc.rsplit("@", 1)[1]
        parts = parts._replace(netloc=f"{parts.username}:***@{host}")
    return urlunsplit(parts)


def _run(argv: Sequence[str]) -> str:
    """A command's output for the machine facts, '?' if it is not there."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def machine_facts() -> dict[str, Any]:
    """Where the numbers came from: cores, memory, load, versions, servers, date, commit."""
    from importlib import metadata

    def version(dist: str) -> str:
        """An installed distribution's version, for the report."""
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    pg = "?"
    with contextlib.suppress(Exception), _admin() as conn:
        pg = conn.execute("SHOW server_version").fetchone()[0]
        pg += " (shared_buffers " + conn.execute("SHOW shared_buffers").fetchone()[0]
        pg += ", synchronous_commit " + conn.execute("SHOW synchronous_commit").fetchone()[0]
        pg += ", autovacuum " + conn.execute("SHOW autovacuum").fetchone()[0]
        pg += ")"
    redis_version = "?"
    with contextlib.suppress(Exception):
        redis_version = redis_client().info("server")["redis_version"]
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "nproc": _run(["nproc"]),
        "free_m": _run(["free", "-m"]),
        "cpu": cpu,
        "loadavg": os.getloadavg(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "commit": _run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]),
        "versions": {
            name: version(name)
            for name in (
                "django",
                "celery",
                "kombu",
                "redis",
                "psycopg",
                "django-celery-beat",
                "celery-redbeat",
                "amqp",
            )
        },
        "postgresql": pg,
        "redis_server": redis_version,
    }


def make_parser(description: str) -> Any:
    """The flags every script shares; scripts add their own to the returned parser."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, well under a minute")
    parser.add_argument("--keep", action="store_true", help="keep the bench_ databases")
    return parser
