"""Never two bodies of one execution at once, on separate hosts that the network cuts apart.

Each host is a network namespace this module makes itself: a switch namespace holds a bridge,
and every host namespace is wired to it by a veth pair, with addresses that exist only inside
those namespaces (the machine's own interfaces are never touched). PostgreSQL runs on the
``db`` host, Redis on ``mq``, real ``celery worker`` processes on ``w1`` and ``w2`` and the
schedulers on ``s1`` and ``s2``. A cut is a blackhole route inside one host (to one peer) or
its switch port taken down (from everything).

The task body appends a line for every half second it runs, and one when it stops, with
``time.monotonic()`` (CLOCK_MONOTONIC is the machine's, shared by every namespace), so any
overlap between two attempts of one execution is measured, not guessed. In every case: no
overlap, no occurrence lost, none completed twice, nothing running after the heal.

The scenarios are short: a lease (``STALE_AFTER``) of 5 s renewed every half second, so a cut
outlasts it within seconds, and every first body outlasts the lease by at least 2 s, the time
the other worker needs to start the run again (had the fence failed, the overlap would be
measured). A run given back after a cut runs again for a second only (``again``): how long the
second body runs proves nothing about the first. Each test's PostgreSQL starts from a copy of
one data directory migrated once for the module.

Root and ``ip netns`` are required; without them the tests skip with the reason.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from scheduling.worker.taskbase import schedulable_task
from tests.conftest import Processes, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.netns]

PG_BINS = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
SUBNET = "10.77.{n}.{host}"
HOSTS = {"db": 2, "mq": 3, "w1": 11, "w2": 12, "s1": 21, "s2": 22}
WORKERS = ("w1", "w2")
#: SCHEDULING_STALE_AFTER: bodies are fenced after 2.5 s unrenewed, ended after 3.75 s.
LEASE = 5
#: SCHEDULING_HEARTBEAT_INTERVAL: five beats before a live worker's body would be fenced and
#: ten in a lease (once four and eight: a lease of 8 s, a beat every second); the beats keep
#: pace with the shorter lease.
HEARTBEAT = 0.5
SLOW = 60.0


# --- the task -------------------------------------------------------------------------------


@schedulable_task(name="tests.partitions.record", bind=True)
def record(self: Any, path: str, seconds: float, again: float | None = None) -> float:
    """Append ``<execution> <attempt> <worker> tick|stop <monotonic>`` every half second.

    The first attempt's body runs ``seconds``; a later one (the run given back after a cut)
    runs ``again`` seconds when given.
    """
    attempt = getattr(self.request, "duecourse_attempt", 0)
    who = f"{self.execution_id} {attempt} {self.request.hostname}"
    if again is not None and attempt > 1:
        seconds = again
    deadline = time.monotonic() + float(seconds)
    with open(path, "a") as out:
        try:
            while True:
                out.write(f"{who} tick {time.monotonic():.3f}\n")
                out.flush()
                if time.monotonic() >= deadline:
                    return float(seconds)
                time.sleep(0.5)
        finally:
            out.write(f"{who} stop {time.monotonic():.3f}\n")
            out.flush()


# --- the network ------------------------------------------------------------------------------


def _run(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, check=check, capture_output=True, text=True, timeout=30)


def _netns_available() -> str | None:
    """Why these tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root to make network namespaces"
    if shutil.which("ip") is None:
        return "needs iproute2's ip"
    probe = f"dcprobe{uuid.uuid4().hex[:6]}"
    made = _run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns is unavailable: {made.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    if not PG_BINS or shutil.which("redis-server") is None or shutil.which("runuser") is None:
        return "needs PostgreSQL's binaries, redis-server and runuser"
    return None


class Network:
    """Host namespaces on one bridge; cut and heal links between them."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:5]
        self.n = 100 + int(self.tag, 16) % 150
        self.switch = f"dc{self.tag}sw"
        self.made: list[str] = []
        self.cuts: list[tuple[str, ...]] = []

    def ns(self, host: str) -> str:
        return f"dc{self.tag}{host}"

    def address(self, host: str) -> str:
        return SUBNET.format(n=self.n, host=HOSTS[host])

    def build(self) -> None:
        _run("ip", "netns", "add", self.switch)
        self.made.append(self.switch)
        _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")
        _run("ip", "-n", self.switch, "link", "set", "lo", "up")
        for host in HOSTS:
            ns = self.ns(host)
            _run("ip", "netns", "add", ns)
            self.made.append(ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            # Made inside the switch namespace, its peer straight inside the host's.
            _run(
                "ip", "-n", self.switch, "link", "add", f"p-{host}", "type", "veth",
                "peer", "name", "eth0", "netns", ns,
            )  # fmt: skip
            _run("ip", "-n", self.switch, "link", "set", f"p-{host}", "master", "br0")
            _run("ip", "-n", self.switch, "link", "set", f"p-{host}", "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")

    def reaches(self, host: str, peer: str, port: int) -> bool:
        """Whether a TCP connection from ``host`` to ``peer``'s ``port`` opens."""
        code = (
            "import socket, sys; socket.create_connection"
            f"(({self.address(peer)!r}, {port}), timeout=2); sys.exit(0)"
        )
        probe = ["ip", "netns", "exec", self.ns(host), sys.executable, "-c", code]
        return _run(*probe, check=False).returncode == 0

    def cut(self, host: str, peer: str) -> None:
        """Drop everything ``host`` sends to ``peer`` (a blackhole route inside ``host``)."""
        route = ("ip", "-n", self.ns(host), "route", "add", "blackhole", f"{self.address(peer)}/32")
        _run(*route)
        self.cuts.append(route)

    def isolate(self, host: str) -> None:
        """Take ``host``'s switch port down: it reaches nothing and nothing reaches it."""
        _run("ip", "-n", self.switch, "link", "set", f"p-{host}", "down")
        self.cuts.append(("ip", "-n", self.switch, "link", "set", f"p-{host}", "down"))

    def heal(self) -> None:
        for cut in reversed(self.cuts):
            if "blackhole" in cut:
                _run(*[("del" if part == "add" else part) for part in cut], check=False)
            else:
                _run(*cut[:-1], "up", check=False)
        self.cuts = []

    def destroy(self) -> None:
        for ns in reversed(self.made):
            _run("ip", "netns", "del", ns, check=False)
        self.made = []


# --- the hosts' servers ---------------------------------------------------------------------


class Cluster:
    """PostgreSQL on ``db``, Redis on ``mq``, and the processes each test starts on the others."""

    def __init__(self, net: Network, root: Path, processes: Processes) -> None:
        self.net = net
        self.root = root
        self.processes = processes
        self.database = ""
        self.redis_db = 0
        self.work = root / "work"
        self.postgres: Any = None

    # PostgreSQL: server keepalives and a user timeout end the session of a client that was
    # cut off mid-transaction (within about 2 s), so its row locks do not outlive the cut.
    def start_postgres(self, *, template: Path | None = None) -> None:
        """Start the ``db`` host's server: on a copy of ``template`` (a data directory this
        module made, stopped cleanly), or on a new one."""
        bin_dir = PG_BINS[-1]
        data = self.root / "pg"
        account = pwd.getpwnam("postgres")
        os.chown(self.root, account.pw_uid, account.pw_gid)
        as_postgres = ["runuser", "-u", "postgres", "--"]
        env = {**os.environ, "LC_ALL": "C"}
        if template is not None:
            _run("cp", "-a", str(template), str(data))
        else:
            subprocess.run(
                [*as_postgres, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U",
                 "postgres", "-E", "UTF8"],
                check=True, capture_output=True, env=env, timeout=120,
            )  # fmt: skip
            with (data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {SUBNET.format(n=self.net.n, host=0)}/24 trust\n")
        server = [
            "ip", "netns", "exec", self.net.ns("db"), *as_postgres, str(bin_dir / "postgres"),
            "-D", str(data), "-p", "5432", "-k", str(self.root),
            "-c", f"listen_addresses={self.net.address('db')}", "-c", "fsync=off",
            "-c", "max_connections=200", "-c", "tcp_keepalives_idle=1",
            "-c", "tcp_keepalives_interval=1", "-c", "tcp_keepalives_count=2",
            "-c", "tcp_user_timeout=2000",
        ]  # fmt: skip
        self.postgres = self.processes.start(server, env=env, name="postgres")
        wait_for(self._accepts, timeout=SLOW, message="PostgreSQL accepts connections")
        wait_for(
            lambda: self.net.reaches("w1", "db", 5432),
            timeout=SLOW,
            message="the worker hosts reach the database host",
        )

    def _accepts(self) -> bool:
        try:
            with self.connect("postgres"):
                return True
        except psycopg.OperationalError:
            return False

    def connect(self, name: str) -> psycopg.Connection[Any]:
        """A connection from the test itself, over the server's Unix socket (no network)."""
        return psycopg.connect(
            host=str(self.root), port=5432, user="postgres", dbname=name, autocommit=True
        )

    def stop_postgres(self) -> None:
        """Fast shutdown (SIGINT): sessions are cut and the server leaves nothing behind."""
        if self.postgres is not None and self.postgres.poll() is None:
            os.killpg(self.postgres.pid, signal.SIGINT)
            self.postgres.wait(timeout=SLOW)
        self.postgres = None

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with self.connect(self.database) as conn:
            return conn.execute(sql, params).fetchall()

    def execute(self, sql: str, *params: Any) -> None:
        with self.connect(self.database) as conn:
            conn.execute(sql, params)

    def start_redis(self) -> None:
        command = [
            "ip", "netns", "exec", self.net.ns("mq"), "redis-server", "--bind",
            self.net.address("mq"), "--port", "6379", "--save", "", "--appendonly", "no",
            "--protected-mode", "no",
            "--unixsocket", str(self.root / "redis.sock"), "--unixsocketperm", "777",
            "--databases", "64",
        ]  # fmt: skip
        self.processes.start(command, env=dict(os.environ), name="redis")
        wait_for(lambda: (self.root / "redis.sock").exists(), timeout=SLOW, message="Redis is up")

    def env(self) -> dict[str, str]:
        db = self.net.address("db")
        # A link that stops answering fails a client's connection within about 2 s.
        timeouts = (
            "connect_timeout=2&keepalives=1&keepalives_idle=1&keepalives_interval=1"
            "&keepalives_count=1&tcp_user_timeout=2000"
        )
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DATABASE_URL": f"postgres://postgres@{db}:5432/{self.database}?{timeouts}",
            "CELERY_BROKER_URL": f"redis://{self.net.address('mq')}:6379/{self.redis_db}",
            "CELERY_VISIBILITY_TIMEOUT": "300",
            "SCHEDULING_DEFAULT_TIMEOUT": "120",
            "CELERY_UNACKED_RESTORE_INTERVAL": "1",
            "SCHEDULING_HEARTBEAT_INTERVAL": str(HEARTBEAT),
            "SCHEDULING_STALE_AFTER": str(LEASE),
            # A scheduler looks (and reaps) at least twice a second, and comes back from a
            # failed tick after 1 s, then 2, 4 and 5 s (BACKOFF_MAX).
            "SCHEDULING_MAX_SLEEP": "0.5",
            "SCHEDULING_PENDING_GRACE": "3",
            "SCHEDULING_RETRY_BACKOFF_BASE": "0.5",
            "SCHEDULING_RETRY_BACKOFF_CAP": "2",
            "PYTHONUNBUFFERED": "1",
        }

    def on(self, host: str, command: list[str], name: str, **extra: str) -> Any:
        env = {**self.env(), **extra}
        return self.processes.start(
            ["ip", "netns", "exec", self.net.ns(host), *command], env=env, name=name
        )

    def manage(self, *args: str) -> None:
        """``manage.py`` on the database host (the test's own host has no route to it)."""
        self.finish(self.launch_manage(*args))

    def launch_manage(self, *args: str) -> Any:
        return self.on("db", [sys.executable, "manage.py", *args], name="manage")

    def finish(self, child: Any) -> None:
        """Wait for a ``manage.py`` process, which must succeed."""
        assert child.wait(timeout=SLOW * 2) == 0, self.processes.log_of(child)

    def workers(self, *hosts: str) -> dict[str, Any]:
        """A worker on each of ``hosts``, started side by side; returned once all are ready."""
        started = {}
        for host in hosts:
            command = [
                sys.executable, "-m", "celery", "-A", "config", "worker", "-P", "prefork",
                "-c", "1", "-n", f"{host}@dc", "-I", __name__, "--without-mingle",
                "--without-gossip", "--loglevel", "INFO",
            ]  # fmt: skip
            started[host] = self.on(host, command, name=f"worker-{host}")
        for host, worker in started.items():
            wait_for(
                lambda w=worker: "worker.ready" in self.processes.log_of(w) or w.poll() is not None,
                timeout=SLOW,
                message=f"the worker on {host} is ready",
            )
            assert worker.poll() is None, self.processes.log_of(worker)
        return started

    def scheduler(self, host: str, **extra: str) -> Any:
        code = (
            "import os, django; django.setup();"
            f"import {__name__};"
            "from django.core.management import call_command; call_command('runscheduler')"
        )
        return self.on(host, [sys.executable, "-c", code], name=f"scheduler-{host}", **extra)

    def add_jobs(self, **jobs: dict[str, Any]) -> Any:
        """Start creating jobs running ``record``, in this order, in one ``manage.py shell``;
        returns that process (``finish`` waits for it).

        Each is named by its keyword and takes ``every``, ``seconds``, ``again`` (optional) and
        any further option of ``create_job``.
        """
        code = (
            "from django.contrib.auth import get_user_model; from django.utils import timezone;"
            "from tests.factories import create_job;"
            "owner, _ = get_user_model().objects.get_or_create(username='owner');"
        )
        for name, spec in jobs.items():
            options = dict(spec)
            every = options.pop("every")
            kwargs = {"path": str(self.work / f"{name}.ticks"), "seconds": options.pop("seconds")}
            if "again" in options:
                kwargs["again"] = options.pop("again")
            extra = "".join(f", {key}={value!r}" for key, value in options.items())
            code += (
                f"create_job(owner=owner, name={name!r}, task='tests.partitions.record',"
                f" kwargs={kwargs!r}, every={every!r},"
                f" timeout=120, max_retries=5, now=timezone.now(){extra});"
            )
        return self.launch_manage("shell", "-c", f"import {__name__}; {code}")

    def start(self, **jobs: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """Both workers and the scheduler on s1, with ``jobs`` (``add_jobs``) made meanwhile.

        The jobs are made while the workers start, and the scheduler starts once both workers
        are ready and the jobs are made: nothing is claimed before both workers consume, so
        the cut that follows a first run comes while its body runs, however long a worker
        takes to start on a loaded machine.
        """
        creating = self.add_jobs(**jobs)
        workers = self.workers(*WORKERS)
        self.finish(creating)
        return workers, self.scheduler("s1")

    def attempts(self) -> list[tuple[Any, ...]]:
        return self.query(
            """
            SELECT e.id, e.status, a.number, a.worker, a.outcome
              FROM scheduling_execution e JOIN scheduling_attempt a ON a.execution_id = e.id
             ORDER BY e.id, a.number
            """
        )

    def running_on(self, worker: str) -> list[int]:
        rows = self.query(
            "SELECT execution_id FROM scheduling_attempt WHERE outcome = 'running'"
            " AND worker LIKE %s",
            f"{worker}@%",
        )
        return [row[0] for row in rows]

    def attempted_by(self, worker: str) -> list[int]:
        """Executions ``worker`` has started an attempt of, whatever became of it: a wait on
        this cannot miss a run that starts and ends between two looks."""
        rows = self.query(
            "SELECT execution_id FROM scheduling_attempt WHERE worker LIKE %s", f"{worker}@%"
        )
        return [row[0] for row in rows]


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    """The hosts and their switch, made once for the module and always removed."""
    reason = _netns_available()
    if reason and os.environ.get("CI"):
        # CI runs as root with iproute2: a skip there would hide the promise these tests keep.
        pytest.fail(f"the partition tests cannot run in CI: {reason}")
    if reason:
        pytest.skip(reason)
    net = Network()
    try:
        net.build()
        yield net
    finally:
        net.heal()
        net.destroy()


@pytest.fixture(scope="module")
def migrated(network: Network, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A PostgreSQL data directory holding the migrated ``duecourse`` database, made once for
    the module and stopped cleanly: each test's server starts from a copy of it."""
    root = Path(tempfile.mkdtemp(prefix="duecourse-netns-"))
    processes = Processes(tmp_path_factory.mktemp("migrated"))
    maker = Cluster(network, root, processes)
    try:
        maker.start_postgres()
        with maker.connect("postgres") as conn:
            conn.execute("CREATE DATABASE duecourse")
        maker.database = "duecourse"
        maker.manage("migrate", "--noinput", "-v0")
        maker.stop_postgres()
        yield root / "pg"
    finally:
        processes.stop_all()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def cluster(
    network: Network, migrated: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    """Fresh servers for each test (a cut may leave sessions behind), healed and stopped after."""
    net = network
    root = Path(tempfile.mkdtemp(prefix="duecourse-netns-"))
    processes = Processes(tmp_path)
    cluster = Cluster(net, root, processes)
    cluster.work.mkdir()
    os.chmod(cluster.work, 0o777)
    try:
        cluster.start_postgres(template=migrated)
        cluster.start_redis()
        cluster.database = "duecourse"
        yield cluster
    finally:
        net.heal()
        # The test is over and its servers are thrown away: the workers and schedulers are
        # killed rather than asked to stop (a worker that was cut off can spend many seconds
        # in a warm shutdown, on a connection TCP is still retransmitting on), and PostgreSQL
        # is given a fast shutdown, which does not wait for clients.
        for child, _ in processes.children:
            if child is not cluster.postgres:
                processes.kill(child, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            cluster.stop_postgres()
        processes.stop_all()
        # Anything still alive in the hosts' namespaces (a pool process that escaped its
        # group) goes with them.
        for host in HOSTS:
            pids = _run("ip", "netns", "pids", net.ns(host), check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            for child, log in processes.children:
                sys.stderr.write(f"\n----- {log.name} (exit {child.returncode}) -----\n")
                sys.stderr.write(log.read_text(errors="replace")[-5000:])
        shutil.rmtree(root, ignore_errors=True)


# --- what the bodies recorded ---------------------------------------------------------------


def body_spans(work: Path) -> dict[int, list[tuple[str, float, float]]]:
    """Each attempt's body, per execution: (attempt@worker, first tick, stop)."""
    seen: dict[tuple[int, str], list[float]] = defaultdict(list)
    stopped: dict[tuple[int, str], float] = {}
    for file in work.glob("*.ticks"):
        for line in file.read_text().splitlines():
            execution, attempt, worker, kind, at = line.split()
            key = (int(execution), f"{attempt}@{worker}")
            if kind == "stop":
                stopped[key] = float(at)
            else:
                seen[key].append(float(at))
    spans: dict[int, list[tuple[str, float, float]]] = defaultdict(list)
    for key, ticks in seen.items():
        # A body ended with its process wrote no stop line: it ran at most half a second on.
        end = stopped.get(key, max(ticks) + 0.5)
        spans[key[0]].append((key[1], min(ticks), end))
    return spans


def assert_no_overlap(work: Path) -> dict[int, list[tuple[str, float, float]]]:
    spans = body_spans(work)
    for execution, bodies in spans.items():
        bodies.sort(key=lambda body: body[1])
        for before, after in itertools.pairwise(bodies):
            gap = after[1] - before[2]
            assert gap > 0, f"execution {execution}: {before} and {after} overlap by {-gap:.2f}s"
    return spans


def assert_all_done_once(cluster: Cluster) -> None:
    """Every execution completed by exactly one attempt; nothing running; counts agree."""
    rows = cluster.query(
        """
        SELECT e.id, e.status, count(a.id) FILTER (WHERE a.outcome = 'completed'),
               count(a.id) FILTER (WHERE a.outcome = 'running')
          FROM scheduling_execution e LEFT JOIN scheduling_attempt a ON a.execution_id = e.id
         GROUP BY e.id, e.scheduled_for ORDER BY e.id
        """
    )
    assert rows, "no execution at all"
    assert all(row[1] == "completed" and row[2] == 1 and row[3] == 0 for row in rows), rows
    ((executions, counted),) = cluster.query(
        "SELECT (SELECT count(*) FROM scheduling_execution),"
        " (SELECT sum(execute_count) FROM scheduling_job)"
    )
    assert executions == counted


def wait_settled(cluster: Cluster, timeout: float) -> None:
    def settled() -> bool:
        rows = cluster.query("SELECT status FROM scheduling_execution")
        return bool(rows) and all(row[0] == "completed" for row in rows)

    wait_for(settled, timeout=timeout, interval=0.5, message="every execution completed")


def assert_no_gaps(cluster: Cluster, job: str, every: float) -> None:
    """Every occurrence of ``job`` from its first to its last has its execution."""
    times = [
        row[0]
        for row in cluster.query(
            "SELECT e.scheduled_for FROM scheduling_execution e JOIN scheduling_job j"
            " ON j.id = e.job_id WHERE j.name = %s ORDER BY 1",
            job,
        )
    ]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    assert all(abs(gap - every) < 0.01 for gap in gaps), gaps


def body_ended_on(work: Path, worker: str) -> bool:
    """Whether a body that ran on ``worker`` (``w1@dc``) has written its stop line."""
    for file in work.glob("*.ticks"):
        for line in file.read_text().splitlines():
            _execution, _attempt, host, kind, _at = line.split()
            if host == worker and kind == "stop":
                return True
    return False


def database_now(cluster: Cluster) -> Any:
    """The database server's clock: the one the engine stamps its rows with."""
    return cluster.query("SELECT now()")[0][0]


def completed_after(cluster: Cluster, job: str, since: Any) -> int:
    """Executions of ``job`` completed by an attempt that started after ``since``."""
    ((count,),) = cluster.query(
        "SELECT count(*) FROM scheduling_attempt a"
        " JOIN scheduling_execution e ON e.id = a.execution_id"
        " JOIN scheduling_job j ON j.id = e.job_id"
        " WHERE j.name = %s AND a.outcome = 'completed' AND a.started_at > %s",
        job,
        since,
    )
    return int(count)


def due_after(cluster: Cluster, job: str, since: Any, *, status: str | None = None) -> int:
    """Executions of ``job`` due after ``since`` (in ``status``, when given)."""
    ((count,),) = cluster.query(
        "SELECT count(*) FROM scheduling_execution e JOIN scheduling_job j ON j.id = e.job_id"
        " WHERE j.name = %s AND e.scheduled_for > %s AND (%s::text IS NULL OR e.status = %s)",
        job,
        since,
        status,
        status,
    )
    return int(count)


def executions_of(cluster: Cluster, job: str) -> int:
    ((count,),) = cluster.query(
        "SELECT count(*) FROM scheduling_execution e JOIN scheduling_job j ON j.id = e.job_id"
        " WHERE j.name = %s",
        job,
    )
    return int(count)


def taken_by(cluster: Cluster, job: str) -> tuple[str, str]:
    """(The worker host that runs ``job``'s body, the other one), as soon as it runs.

    Both workers are up before the scheduler starts (``Cluster.start``), so the cut that
    follows comes while the body runs, however long a worker takes to start on a loaded
    machine.
    """

    def runner() -> str | None:
        rows = cluster.query(
            "SELECT a.worker FROM scheduling_attempt a"
            " JOIN scheduling_execution e ON e.id = a.execution_id"
            " JOIN scheduling_job j ON j.id = e.job_id"
            " WHERE j.name = %s AND a.outcome = 'running'",
            job,
        )
        return rows[0][0].split("@")[0] if rows else None

    host = wait_for(runner, timeout=SLOW, interval=0.2, message=f"a worker runs {job}'s body")
    (other,) = set(WORKERS) - {host}
    return host, other


def pause_jobs(cluster: Cluster, *names: str) -> None:
    """Pause jobs as ``Job.objects.filter(name__in=names).update(status="paused")`` does: one
    UPDATE of the rows (no signal, no other column), sent from the test's own connection."""
    cluster.execute("UPDATE scheduling_job SET status = 'paused' WHERE name = ANY(%s)", list(names))


def until(condition: Callable[[], Any], *alive: Any, message: str) -> Any:
    """Let a cut (or what follows a heal) last until ``condition`` holds, however long the
    machine takes, failing at once if a process in ``alive`` exits meanwhile."""

    def check() -> Any:
        for child in alive:
            assert child.poll() is None, f"a process exited while waiting until {message}"
        return condition()

    return wait_for(check, timeout=SLOW * 3, interval=0.5, message=message)


# --- the cases ----------------------------------------------------------------------------------


def test_a_worker_cut_off_from_the_database_is_fenced_before_another_runs_its_body(
    cluster: Cluster,
) -> None:
    """The worker running a long body loses PostgreSQL (the broker stays reachable) for longer
    than the lease.

    Its body is fenced after half the lease unrenewed, the reaper gives the run back after the
    full lease (on the database's clock), and the other worker runs it; the bodies never
    overlap. After the heal the first worker records its attempt as ``fenced``.
    """
    # The fence stops the first body after half the lease; unfenced, it would run 9 s past the
    # lease. The second runs for a second.
    workers, scheduler = cluster.start(long={"every": "PT1H", "seconds": 14, "again": 1})
    cut_off, other = taken_by(cluster, "long")
    cluster.net.cut(cut_off, "db")
    # The cut outlasts the lease: the reaper has given the run back and the other worker runs
    # its body.
    until(
        lambda: cluster.attempted_by(other),
        *workers.values(),
        scheduler,
        message=f"{other} runs the body",
    )
    cluster.net.heal()
    wait_settled(cluster, timeout=SLOW)
    wait_for(
        lambda: "fenced" in {row[4] for row in cluster.attempts()},
        timeout=SLOW,
        message=f"{cut_off} recorded its attempt as fenced",
    )
    spans = assert_no_overlap(cluster.work)
    assert_all_done_once(cluster)
    [(_execution, bodies)] = spans.items()
    assert [worker.split("@", 1)[1] for worker, _, _ in sorted(bodies)] == [
        f"{cut_off}@dc",
        f"{other}@dc",
    ]
    outcomes = [(row[3], row[4]) for row in cluster.attempts()]
    assert outcomes == [(f"{cut_off}@dc", "fenced"), (f"{other}@dc", "completed")], outcomes
    assert "execution.fenced" in cluster.processes.log_of(workers[cut_off])
    assert all(worker.poll() is None for worker in workers.values())


def test_a_worker_cut_off_from_the_broker_keeps_or_hands_back_its_run(cluster: Cluster) -> None:
    """The worker running a long body loses Redis while PostgreSQL stays reachable: its
    heartbeats go on, so nobody else may take the run while its body lives; every run ends
    completed once."""
    # The body outlasts the lease by 2 s (10 s on a lease of 8 s once): had its heartbeats
    # stopped with the broker, the other worker would have started the run while it lived.
    workers, scheduler = cluster.start(long={"every": "PT1H", "seconds": LEASE + 2})
    cut_off, other = taken_by(cluster, "long")
    cluster.net.cut(cut_off, "mq")
    # The cut outlasts the body: it ends while its worker cannot reach the broker.
    until(
        lambda: body_ended_on(cluster.work, f"{cut_off}@dc"),
        workers[other],
        scheduler,
        message=f"the body ends on {cut_off} while it is cut off from the broker",
    )
    cluster.net.heal()
    wait_settled(cluster, timeout=SLOW * 2)
    assert_no_overlap(cluster.work)
    assert_all_done_once(cluster)
    assert workers[other].poll() is None
    wait_for(
        lambda: not cluster.running_on(cut_off),
        timeout=SLOW,
        message=f"nothing left on {cut_off}",
    )
    cut_worker = workers[cut_off]
    assert cut_worker.poll() is None or "fence_exit" not in cluster.processes.log_of(cut_worker)


def test_a_worker_host_cut_off_from_everything_while_the_others_go_on(cluster: Cluster) -> None:
    """The link of the worker running a long body goes down, with a job due every 2 s, and
    stays down until the other worker has run the long body again through to its end and
    several occurrences of the frequent job: no overlap, no lost occurrence, none completed
    twice, and nothing running once the link is back."""
    # The frequent job: every 2 s, half a second each (every 5 s, a second each, once). The
    # long body is fenced after half the lease (unfenced, it would run 7 s past the lease);
    # run again, it lasts a second.
    workers, scheduler = cluster.start(
        often={"every": "PT2S", "seconds": 0.5},
        long={"every": "PT1H", "seconds": 12, "again": 1},
    )
    cut_off, other = taken_by(cluster, "long")
    cluster.net.isolate(cut_off)
    cut_at = database_now(cluster)
    # Only the other worker can start anything while the link is down.
    until(
        lambda: (
            completed_after(cluster, "long", cut_at) >= 1
            and completed_after(cluster, "often", cut_at) >= 3
        ),
        workers[other],
        scheduler,
        message=f"{other} completes the long run and three runs of the frequent job meanwhile",
    )
    cluster.net.heal()
    healed_at = database_now(cluster)
    # The frequent job goes on after the heal; then it is stopped and everything finishes.
    until(
        lambda: due_after(cluster, "often", healed_at, status="completed") >= 2,
        workers[other],
        scheduler,
        message="two occurrences of the frequent job due after the heal complete",
    )
    pause_jobs(cluster, "often")
    wait_settled(cluster, timeout=SLOW)
    assert_no_overlap(cluster.work)
    assert_all_done_once(cluster)
    assert_no_gaps(cluster, "often", 2)
    assert not cluster.query("SELECT 1 FROM scheduling_attempt WHERE outcome = 'running'")
    assert workers[other].poll() is None and scheduler.poll() is None
    wait_for(
        lambda: not cluster.running_on(cut_off),
        timeout=SLOW,
        message=f"nothing left on {cut_off}",
    )


def test_a_scheduler_cut_off_from_the_database_mid_claim(cluster: Cluster) -> None:
    """s1 is inside a claim (its insert waits on a lock the test holds) when it loses
    PostgreSQL; s2 goes on. The cut session's rows never commit, its job locks go with the
    session, and every occurrence is claimed once, by s2. Both jobs are due every 2 s."""
    creating = cluster.add_jobs(
        often={"every": "PT2S", "seconds": 0.5}, also={"every": "PT2S", "seconds": 0.5}
    )
    cluster.workers("w1")
    cluster.finish(creating)
    blocker = cluster.connect(cluster.database)
    s1_address = cluster.net.address("s1")
    try:
        blocker.autocommit = False
        blocker.execute("LOCK TABLE scheduling_execution IN SHARE MODE")
        s1 = cluster.scheduler("s1")
        wait_for(
            # The claim's write waits for the lock on the execution table (its statement is
            # longer than the text pg_stat_activity keeps, so it is known by the lock it awaits).
            lambda: cluster.query(
                "SELECT 1 FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid"
                " WHERE a.client_addr = %s AND NOT l.granted"
                " AND l.relation = 'scheduling_execution'::regclass",
                s1_address,
            ),
            timeout=SLOW,
            message="s1 waits mid-claim",
        )
        cluster.net.cut("s1", "db")
        blocker.rollback()
    finally:
        blocker.close()
    s2 = cluster.scheduler("s2")
    # The cut lasts until the server has ended s1's session (releasing its job locks) and s2
    # has claimed the occurrence s1 was claiming and the next, of both jobs.
    until(
        lambda: (
            not cluster.query("SELECT 1 FROM pg_stat_activity WHERE client_addr = %s", s1_address)
            and executions_of(cluster, "often") >= 2
            and executions_of(cluster, "also") >= 2
        ),
        s2,
        message="s1's session is ended and s2 claims two occurrences of each job",
    )
    cluster.net.heal()
    healed_at = database_now(cluster)
    # s1 is back on the database, and both jobs go on with the two schedulers side by side.
    until(
        lambda: (
            "dispatch.database_back" in cluster.processes.log_of(s1)
            and due_after(cluster, "often", healed_at) >= 1
            and due_after(cluster, "also", healed_at) >= 1
        ),
        s1,
        s2,
        message="s1 reaches the database again and both jobs have occurrences due after the heal",
    )
    pause_jobs(cluster, "often", "also")
    wait_settled(cluster, timeout=SLOW)
    assert_no_overlap(cluster.work)
    assert_all_done_once(cluster)
    assert_no_gaps(cluster, "often", 2)
    assert_no_gaps(cluster, "also", 2)
    assert not cluster.query(
        "SELECT 1 FROM pg_stat_activity WHERE client_addr = %s AND state LIKE 'idle in%%'",
        s1_address,
    )
    assert s1.poll() is None and s2.poll() is None
