"""The fault campaign's cluster: its own servers and processes, on the hosts of ``faultnet``.

PostgreSQL (a data directory of its own, made by ``initdb``) runs on the ``db`` host behind
``faultproxy``'s relay, Redis (``--save ''``: a restart loses what it held) on ``mq``, one
scheduler on each of ``s1``-``s3`` (``manage.py runscheduler`` on two, ``celery beat -S
scheduling.beat:DatabaseScheduler`` on the third: both ways docs/operations.md gives), one
prefork ``celery worker`` on each of ``w1``-``w3`` and the producer on ``p1``. The campaign
itself reads PostgreSQL and Redis through their Unix sockets in the run directory, never
through the hosts' network, so no cut blinds it.

Every process starts in a session of its own, so its whole tree can be signalled at once.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from faultnet import SCHEDULERS, WORKERS, Network, run

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PG_BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
#: libfaketime from Debian's ``faketime`` (scripts/test-services.sh installs it), wherever the
#: machine's architecture puts it; None where it is missing (``skew_unavailable`` says so).
FAKETIME_LIB = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))), None)
DATABASE = "duecourse"
#: The two PostgreSQL servers' ports on the database host: the primary starts on the first;
#: with ``db_failover`` among the faults a synchronous standby runs on the other, and the two
#: swap roles (and ports) at each failover. Clients reach whichever is primary through the
#: relay on port 5432, as through a virtual address that a failover moves.
PG_INNER_PORT = 5433
PG_OTHER_PORT = 5434
STANDBY_NAME = "standby"
#: SCHEDULING_STALE_AFTER and SCHEDULING_HEARTBEAT_INTERVAL for the run: a lease of 6 s, so
#: a freeze or a cut of a few seconds outlasts it.
LEASE = 6
HEARTBEAT = 0.5
WORKER_CONCURRENCY = 4


def wait_for(condition: Callable[[], Any], *, timeout: float, message: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s: {message}")
        time.sleep(0.2)


class Processes:
    """The cluster's children, each in a session of its own, with its log in ``logs``."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.children: list[subprocess.Popen[bytes]] = []
        self.paths: dict[int, Path] = {}
        self.count = 0

    def start(
        self, command: list[str], *, env: dict[str, str], name: str
    ) -> subprocess.Popen[bytes]:
        self.count += 1
        path = self.logs / f"{name}-{self.count}.log"
        log = path.open("wb")
        child = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        self.children.append(child)
        self.paths[child.pid] = path
        return child

    def log_of(self, child: subprocess.Popen[bytes]) -> str:
        path = self.paths.get(child.pid)
        return path.read_text(errors="replace") if path else ""

    @staticmethod
    def signal(child: subprocess.Popen[Any], sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)

    def kill(self, child: subprocess.Popen[Any]) -> None:
        """SIGKILL the whole group (a worker's pool processes too) and reap the leader."""
        self.signal(child, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=30)

    def kill_all(self) -> None:
        for child in self.children:
            self.signal(child, signal.SIGCONT)
            self.signal(child, signal.SIGKILL)
        for child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=30)


class Cluster:
    def __init__(self, net: Network, root: Path) -> None:
        self.net = net
        self.root = root
        self.logs = root / "logs"
        self.bodies = root / "bodies"
        for folder in (self.logs, self.bodies):
            folder.mkdir(parents=True, exist_ok=True)
            os.chmod(folder, 0o777)
        self.processes = Processes(self.logs)
        self.postgres: subprocess.Popen[bytes] | None = None
        #: The primary's port; the standby (when ``replicated``) runs on the other one.
        self.port = PG_INNER_PORT
        self.replicated = False
        self.standby: subprocess.Popen[bytes] | None = None
        self.failovers = 0
        self.relay: subprocess.Popen[bytes] | None = None
        self.redis: subprocess.Popen[bytes] | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.schedulers: dict[str, subprocess.Popen[bytes]] = {}
        self.skews: dict[str, float] = dict.fromkeys(WORKERS, 0.0)
        self.producer: subprocess.Popen[bytes] | None = None

    # --- PostgreSQL --------------------------------------------------------------------------

    def data(self, port: int) -> Path:
        return self.root / f"pg-{port}"

    @property
    def other_port(self) -> int:
        return PG_OTHER_PORT if self.port == PG_INNER_PORT else PG_INNER_PORT

    def init_postgres(self) -> None:
        account = pwd.getpwnam("postgres")
        os.chown(self.root, account.pw_uid, account.pw_gid)
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / "initdb"), "-D",
             str(self.data(self.port)), "-A", "trust", "-U", "postgres", "-E", "UTF8"],
            check=True, capture_output=True, env={**os.environ, "LC_ALL": "C"}, timeout=120,
        )  # fmt: skip
        self.start_relay()

    def _server(self, port: int, name: str) -> subprocess.Popen[bytes]:
        # Server keepalives and a user timeout end the session of a client cut off
        # mid-transaction within seconds, so its row locks do not outlive the cut. A standby
        # asks for the primary again every half second after losing it.
        server = [
            "ip", "netns", "exec", self.net.ns("db"), "runuser", "-u", "postgres", "--",
            str(PG_BIN / "postgres"), "-D", str(self.data(port)), "-p", str(port),
            "-k", str(self.root), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
            "-c", "max_connections=300", "-c", "tcp_keepalives_idle=1",
            "-c", "tcp_keepalives_interval=1", "-c", "tcp_keepalives_count=2",
            "-c", "tcp_user_timeout=2000", "-c", "shared_buffers=64MB",
            "-c", "wal_retrieve_retry_interval=500ms",
        ]  # fmt: skip
        return self.processes.start(server, env={**os.environ, "LC_ALL": "C"}, name=name)

    def start_postgres(self) -> None:
        self.postgres = self._server(self.port, "postgres")
        wait_for(self.accepts, timeout=60, message="PostgreSQL accepts connections")

    # --- the synchronous standby and the failover (``db_failover``) ----------------------

    def start_standby(self) -> None:
        """A standby made from a base backup of the primary, streaming, then named the
        primary's synchronous standby: from then on a commit that waits for its flush (every
        commit but the start's, which Duecourse sends with ``synchronous_commit`` off) returns
        only once the standby has it."""
        for tries_left in (1, 0):
            self.standby = self._make_standby()
            try:
                wait_for(lambda: self._standby_state() != "", timeout=30,
                         message="the standby streams")  # fmt: skip
                break
            except TimeoutError:
                log = self.processes.log_of(self.standby)[-2000:]
                self.processes.kill(self.standby)
                self.standby = None
                if not tries_left:
                    message = f"the standby does not stream; its log ends:\n{log}"
                    raise RuntimeError(message) from None
                print(f"the standby does not stream; made again. Its log ends:\n{log}")
        with self.connect("postgres") as conn:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
            conn.execute("SELECT pg_reload_conf()")
        wait_for(lambda: self._standby_state() == "sync", timeout=60,
                 message="the standby is synchronous")  # fmt: skip

    def _make_standby(self) -> subprocess.Popen[bytes]:
        port = self.other_port
        shutil.rmtree(self.data(port), ignore_errors=True)
        conninfo = (
            f"host={self.root} port={self.port} user=postgres application_name={STANDBY_NAME}"
        )
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / "pg_basebackup"), "-d", conninfo,
             "-D", str(self.data(port)), "-R", "-X", "stream", "-c", "fast"],
            check=True, capture_output=True, env={**os.environ, "LC_ALL": "C"}, timeout=300,
        )  # fmt: skip
        return self._server(port, "standby")

    def _standby_state(self) -> str:
        """The standby's ``sync_state`` on the primary while it streams, else ""."""
        try:
            with self.connect("postgres") as conn:
                found = conn.execute(
                    "SELECT sync_state FROM pg_stat_replication"
                    " WHERE application_name = %s AND state = 'streaming'",
                    (STANDBY_NAME,),
                ).fetchone()
        except psycopg.OperationalError:
            return ""
        return str(found[0]) if found else ""

    def failover(self) -> None:
        """The primary SIGKILLed (what it had not sent is lost with it), the standby promoted,
        and the relay pointed at it: clients reconnect to the same address and find the new
        primary, with no standby until ``start_standby`` makes one again."""
        if self.standby is None:
            raise RuntimeError("no standby to fail over to")
        if self.postgres is not None:
            self.processes.kill(self.postgres)
        port = self.other_port
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / "pg_ctl"), "promote", "-w",
             "-D", str(self.data(port))],
            check=True, capture_output=True, env={**os.environ, "LC_ALL": "C"}, timeout=120,
        )  # fmt: skip
        self.postgres, self.standby, self.port = self.standby, None, port
        self.failovers += 1
        wait_for(self.accepts, timeout=60, message="the promoted standby accepts connections")
        # Alone now: commits must not wait for a standby that is not there (the base backup
        # carried the old primary's setting), as a failover manager would see to.
        with self.connect("postgres") as conn:
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
            conn.execute("SELECT pg_reload_conf()")
        (self.root / "relay.target").write_text(str(port))
        if self.relay is not None:
            Processes.signal(self.relay, signal.SIGHUP)

    def stop_postgres(self) -> None:
        """Fast shutdown (SIGINT): every session is cut, nothing is left half-written."""
        if self.postgres is not None and self.postgres.poll() is None:
            os.killpg(self.postgres.pid, signal.SIGINT)
            try:
                self.postgres.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.processes.kill(self.postgres)
        self.postgres = None

    def start_relay(self) -> None:
        control = self.root / "relay.delay"
        control.write_text("0")
        target = self.root / "relay.target"
        target.write_text(str(self.port))
        command = [
            "ip", "netns", "exec", self.net.ns("db"), sys.executable,
            str(BENCH / "faultproxy.py"), self.net.address("db"), "5432", "127.0.0.1",
            str(self.port), str(control), str(target),
        ]  # fmt: skip
        self.relay = self.processes.start(command, env=dict(os.environ), name="relay")

    def slow_database(self, milliseconds: int) -> None:
        (self.root / "relay.delay").write_text(str(milliseconds))
        if self.relay is not None:
            Processes.signal(self.relay, signal.SIGUSR1)

    def fast_database(self) -> None:
        if self.relay is not None:
            Processes.signal(self.relay, signal.SIGUSR2)

    def accepts(self) -> bool:
        try:
            with self.connect("postgres"):
                return True
        except psycopg.OperationalError:
            return False

    def connect(self, name: str = DATABASE) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=str(self.root), port=self.port, user="postgres", dbname=name,
            autocommit=True, connect_timeout=5,
        )  # fmt: skip

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with self.connect() as conn:
            return conn.execute(sql, params).fetchall()

    def create_database(self) -> None:
        with self.connect("postgres") as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")

    # --- Redis -------------------------------------------------------------------------------

    def start_redis(self) -> None:
        sock = self.root / "redis.sock"
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()
        command = [
            "ip", "netns", "exec", self.net.ns("mq"), "redis-server", "--bind",
            self.net.address("mq"), "--port", "6379", "--save", "", "--appendonly", "no",
            "--protected-mode", "no", "--unixsocket", str(sock), "--unixsocketperm", "777",
        ]  # fmt: skip
        self.redis = self.processes.start(command, env=dict(os.environ), name="redis")
        wait_for(sock.exists, timeout=60, message="Redis is up")

    def kill_redis(self) -> None:
        if self.redis is not None:
            self.processes.kill(self.redis)
        self.redis = None

    # --- the engine's processes --------------------------------------------------------------

    def env(self, host: str, skew: float = 0.0) -> dict[str, str]:
        timeouts = (
            "connect_timeout=2&keepalives=1&keepalives_idle=1&keepalives_interval=1"
            "&keepalives_count=1&tcp_user_timeout=2000"
        )
        env = {
            **os.environ,
            "PYTHONPATH": f"{BENCH}:{ROOT}",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "SECRET_KEY": "fault-campaign",
            "DATABASE_URL": (
                f"postgres://postgres@{self.net.address('db')}:5432/{DATABASE}?{timeouts}"
            ),
            "CELERY_BROKER_URL": f"redis://{self.net.address('mq')}:6379/0",
            "CELERY_VISIBILITY_TIMEOUT": "300",
            "CELERY_UNACKED_RESTORE_INTERVAL": "1",
            "SCHEDULING_DEFAULT_TIMEOUT": "120",
            "SCHEDULING_HEARTBEAT_INTERVAL": str(HEARTBEAT),
            "SCHEDULING_STALE_AFTER": str(LEASE),
            "SCHEDULING_MAX_SLEEP": "0.5",
            "SCHEDULING_PENDING_GRACE": "3",
            # A queued run whose message the broker lost (a restart) is published again after
            # 10 s rather than the default 10 minutes, so the drain sees it through.
            "SCHEDULING_REQUEUE_AFTER": "10",
            "SCHEDULING_RETRY_BACKOFF_BASE": "0.5",
            "SCHEDULING_RETRY_BACKOFF_CAP": "2",
            "PYTHONUNBUFFERED": "1",
            "FAULT_BODY_LOG": str(self.bodies),
            "FAULT_HOST": host,
            "FAULT_SKEW": f"{skew:g}",
        }
        if skew:
            if FAKETIME_LIB is None:
                raise RuntimeError(skew_unavailable())
            env["LD_PRELOAD"] = str(FAKETIME_LIB)
            env["FAKETIME"] = f"{skew:+g}s"
        return env

    def on(self, host: str, command: list[str], name: str, skew: float = 0.0) -> Any:
        return self.processes.start(
            ["ip", "netns", "exec", self.net.ns(host), *command],
            env=self.env(host, skew),
            name=name,
        )

    def manage(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """A management command on the producer host (the campaign's own has no route to the
        hosts), with the bodies' module imported: a job's target must be a known task."""
        child = self.launch_manage(*args)
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.processes.kill(child)
            out, err = child.communicate()
        return subprocess.CompletedProcess(child.args, child.returncode, out, err)

    def launch_manage(self, *args: str) -> subprocess.Popen[str]:
        """``manage`` started, not awaited: the caller polls it (``communicate`` when done)."""
        code = (
            "import sys, django; django.setup(); import faultbodies;"
            f"from django.core.management import call_command; call_command(*{list(args)!r})"
        )
        command = ["ip", "netns", "exec", self.net.ns("p1"), sys.executable, "-c", code]
        return subprocess.Popen(
            command, cwd=ROOT, env=self.env("p1"), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip

    def script(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        command = [
            "ip", "netns", "exec", self.net.ns("p1"), sys.executable,
            str(BENCH / "faultload.py"), *args,
        ]  # fmt: skip
        return subprocess.run(
            command, cwd=ROOT, env=self.env("p1"), capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip

    def start_worker(self, host: str, skew: float = 0.0) -> None:
        command = [
            sys.executable, "-m", "celery", "-A", "config", "worker", "-P", "prefork",
            "-c", str(WORKER_CONCURRENCY), "-n", f"{host}@faults", "-I", "faultbodies",
            "--without-mingle", "--without-gossip", "--loglevel", "INFO",
        ]  # fmt: skip
        self.skews[host] = skew
        self.workers[host] = self.on(host, command, name=f"worker-{host}", skew=skew)

    def worker_ready(self, host: str) -> bool:
        return "worker.ready" in self.processes.log_of(self.workers[host])

    def kill_worker(self, host: str) -> None:
        self.processes.kill(self.workers[host])

    def pool_children(self, host: str) -> list[int]:
        """The pids of ``host``'s worker pool processes (the children of its main process)."""
        main = self.worker_main_pid(host)
        if main is None:
            return []
        listed = run("pgrep", "-P", str(main), check=False).stdout.split()
        return [int(pid) for pid in listed]

    def worker_main_pid(self, host: str) -> int | None:
        """The celery main process (the child of ``ip netns exec``'s exec: the same pid)."""
        child = self.workers[host]
        return child.pid if child.poll() is None else None

    def start_scheduler(self, host: str) -> None:
        # Both import the bodies' module first: a scheduler publishes only tasks it knows.
        if host == SCHEDULERS[-1]:
            argv = [
                "celery", "-A", "config", "beat", "-S", "scheduling.beat:DatabaseScheduler",
                "--loglevel", "INFO", "--schedule", str(self.root / f"beat-{host}.db"),
            ]  # fmt: skip
            code = (
                "import sys, django; django.setup(); import faultbodies;"
                f"sys.argv = {argv!r}; from celery.__main__ import main; main()"
            )
        else:
            code = (
                "import django; django.setup(); import faultbodies;"
                "from django.core.management import call_command; call_command('runscheduler')"
            )
        command = [sys.executable, "-c", code]
        self.schedulers[host] = self.on(host, command, name=f"scheduler-{host}")

    def kill_scheduler(self, host: str) -> None:
        self.processes.kill(self.schedulers[host])

    def start_producer(self, rate: float, seed: int) -> None:
        stop = self.root / "producer.stop"
        with contextlib.suppress(FileNotFoundError):
            stop.unlink()
        command = [
            sys.executable, str(BENCH / "faultload.py"), "produce", str(rate), str(stop),
            str(self.root / "produced.log"), str(seed),
        ]  # fmt: skip
        self.producer = self.on("p1", command, name="producer")

    def stop_producer(self) -> None:
        (self.root / "producer.stop").touch()
        if self.producer is not None:
            try:
                self.producer.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.processes.kill(self.producer)

    # --- the whole -----------------------------------------------------------------------------

    def start(self, specs_file: Path) -> None:
        """Servers, schema, jobs, then workers (all ready) before any scheduler claims."""
        self.init_postgres()
        self.start_postgres()
        self.start_redis()
        self.create_database()
        wait_for(lambda: self.net.reaches("p1", "db", 5432), timeout=60, message="p1 reaches db")
        migrated = self.manage("migrate", "--noinput", "-v0", timeout=600)
        if migrated.returncode:
            raise RuntimeError(f"migrate failed: {migrated.stderr[-3000:]}")
        made = self.script("jobs", str(specs_file))
        if made.returncode:
            raise RuntimeError(f"the jobs were not made: {made.stderr[-3000:]}")
        if self.replicated:
            self.start_standby()
        for host in WORKERS:
            self.start_worker(host)
        for host in WORKERS:
            wait_for(lambda h=host: self.worker_ready(h), timeout=120, message=f"{host} ready")
        for host in SCHEDULERS:
            self.start_scheduler(host)

    def stop(self) -> None:
        self.net.heal()
        self.fast_database()
        self.processes.kill_all()
        for pid in self.net.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def skew_unavailable() -> str | None:
    """Why a worker's clock cannot be skewed here, or None.

    The checker takes a body's time as its host's clock less the skew the nemesis gave it: a
    skew that did not take (no library, an offset it did not apply) would move every body of
    that host by the skew in the checker's eyes, and report runs early or overlapping that
    were not. So the offset is tried on a child process before the campaign counts on it.
    """
    if FAKETIME_LIB is None:
        return "clock_skew needs libfaketime (Debian's faketime: apt-get install faketime)"
    probe = "import time; print(time.time())"
    env = {**os.environ, "LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": "+2.5s"}
    before = time.time()
    shown = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=False
    )
    after = time.time()
    try:
        seen = float(shown.stdout.strip())
    except ValueError:
        return f"libfaketime at {FAKETIME_LIB} did not run: {shown.stderr.strip()[:200]}"
    if not before + 2.3 <= seen <= after + 2.7:
        return f"libfaketime at {FAKETIME_LIB} did not move the child's clock by +2.5s"
    return None
