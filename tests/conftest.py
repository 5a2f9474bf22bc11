"""Fixtures shared by the whole suite: a fixed clock, users and jobs, and real processes.

Tests that start processes (workers, schedulers, servers) use ``transactional_db`` so that the
processes see committed rows, and register every process with ``processes`` so it is killed
even when the test fails. Waiting is always ``wait_for(condition, timeout=...)``: a poll with a
deadline, never a bare sleep.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import django
import pytest
from django.db import connection

from tests import distribution
from tests.factories import create_job

ROOT = Path(__file__).resolve().parent.parent
FIXED_NOW = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)  # a Monday
SHIPPED_APPS = ("scheduling", "emailer", "subscriptions")


def wait_for(
    condition: Callable[[], Any], *, timeout: float, interval: float = 0.1, message: str = ""
) -> Any:
    """Poll ``condition`` until it returns something truthy; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s: {message or condition}")
        time.sleep(interval)


def send_mail_through(settings: Any, backend: str, **options: Any) -> None:
    """Point the project's default mailer at ``backend`` with ``options``, on any Django.

    Django 6.1 takes mail settings as ``MAILERS`` (and refuses the ``EMAIL_*`` settings beside
    it); earlier versions take ``EMAIL_BACKEND`` and ``EMAIL_<OPTION>``.
    """
    path = f"django.core.mail.backends.{backend}.EmailBackend"
    if django.VERSION >= (6, 1):
        settings.MAILERS = {"default": {"BACKEND": path, "OPTIONS": options}}
        return
    settings.EMAIL_BACKEND = path
    legacy = {"username": "HOST_USER", "password": "HOST_PASSWORD", "host": "HOST"}
    for name, value in options.items():
        setattr(settings, f"EMAIL_{legacy.get(name, name.upper())}", value)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def now() -> datetime:
    return FIXED_NOW


@pytest.fixture
def owner(django_user_model: Any) -> Any:
    return django_user_model.objects.create(username="owner")


@pytest.fixture
def make_job(owner: Any, now: datetime) -> Callable[..., Any]:
    """Create a job through the service, with defaults a test can override."""


    counter = iter(range(1, 1_000_000))

    def make(**overrides: Any) -> Any:
        options: dict[str, Any] = {
            "owner": owner,
            "name": f"job-{next(counter)}",
            "task": "scheduling.diagnostics.noop",
            "now": now,
        }
        if not {"every", "cron", "at", "schedule"} & overrides.keys():
            options["every"] = "PT1M"
        options.update(overrides)
        return create_job(**options)

    return make


class Processes:
    """Child processes of one test, each in its own session so its whole tree can be killed."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(
        self, command: list[str], *, env: dict[str, str], name: str, cwd: Path = ROOT
    ) -> subprocess.Popen[bytes]:
        log = self.log_dir / f"{name}-{len(self.children)}.log"
        handle = log.open("wb")
        child = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.children.append((child, log))
        return child

    def log_of(self, child: subprocess.Popen[bytes]) -> str:
        for candidate, log in self.children:
            if candidate is child:
                return log.read_text(errors="replace")
        return ""

    def kill(self, child: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, sig)

    def stop_all(self) -> None:
        # Descendants that made sessions of their own (``runstack``'s worker, scheduler and
        # web server) are outside their leader's group: noted now, while they are still its
        # descendants, so that none outlives the test if the leader is killed before it
        # stops them.
        own_sessions = [pid for child, _ in self.children for pid in descendants(child.pid)]
        for child, _ in self.children:
            self.kill(child, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for child, _ in self.children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(child, signal.SIGKILL)
                child.wait(timeout=10)
        # A leader that exited can leave members of its group behind (a worker's pool
        # processes, say), still holding database connections: none outlives the test.
        for child, _ in self.children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
        for pid in own_sessions:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def descendants(pid: int) -> list[int]:
    """The processes under ``pid`` that lead a process group of their own (from /proc)."""
    parents: dict[int, int] = {}
    groups: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The fields after the command's closing parenthesis: state, ppid, pgrp, ...
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(entry.name)] = int(fields[1])
        groups[int(entry.name)] = int(fields[2])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent:
                frontier.append(child)
                if groups.get(child) == child:
                    found.append(child)
    return found


@pytest.fixture
def processes(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Processes]:
    group = Processes(tmp_path)
    yield group
    group.stop_all()
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for child, log in group.children:
            sys.stderr.write(f"\n----- {log.name} (exit {child.returncode}) -----\n")
            sys.stderr.write(log.read_text(errors="replace")[-6000:])


@pytest.fixture(scope="session", autouse=True)
def no_stray_sessions_at_the_end(django_db_setup: Any, django_db_blocker: Any) -> Iterator[None]:
    """Let the test database be dropped at the end of the run.

    PostgreSQL ends a killed client's session a moment after the kill, and a connection made
    under the browser tests' event loop or in a test's thread can outlive Django's bookkeeping;
    a test database still in use cannot be dropped. Every other session on it is ended here at
    once (the database is this run's own and is about to go), and the drop waits until they are
    gone. Waiting for them to end by themselves first cost five seconds at the end of nearly
    every run: a thread's connection never ends by itself.
    """
    yield
    # pytest-django sets up only the databases the collected tests use: none, for a run of
    # tests that bring their own (tests/test_install.py), and then there is nothing to drop.
    if connection.vendor != "postgresql" or not str(connection.settings_dict["NAME"]).startswith(
        "test_"
    ):
        return
    others = (
        "SELECT {} FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(others.format("pg_terminate_backend(pid)"))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            cursor.execute(others.format("count(*)"))
            if not cursor.fetchone()[0]:
                return
            time.sleep(0.05)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under the stack matrix (noxfile.py) the apps must come from the installed wheel."""
    if not os.environ.get("DUECOURSE_EXPECT_INSTALLED"):
        return
    found = {name: importlib.util.find_spec(name) for name in SHIPPED_APPS}
    from_checkout = [
        name
        for name, spec in found.items()
        if spec is None or Path(spec.origin or "").resolve() == ROOT / name / "__init__.py"
    ]
    if from_checkout:
        pytest.exit(f"{from_checkout} found in the checkout, not the installed wheel", 3)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Iterator[None]:
    """Outside PostgreSQL, run the specification alone (``engine_rule``); after the other
    plugins, the long units first (``distribution.longest_first``), the order in which
    pytest-xdist hands the units out."""
    engine_rule(config, items)
    yield
    items[:] = distribution.longest_first(items)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadgroup``, a module's tests are one unit of work, a ``spread``
    module's each test (``distribution.ModuleScheduling``); other modes are xdist's own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return distribution.ModuleScheduling(config, log)


def database_engine() -> str:
    """The database the suite runs on, from DATABASE_URL's scheme: postgresql, sqlite or mysql."""
    scheme = os.environ.get("DATABASE_URL", "postgres://").split(":", 1)[0].lower()
    if scheme == "sqlite":
        return "sqlite"
    return "mysql" if scheme in ("mysql", "mariadb") else "postgresql"


def engine_rule(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One specification, every database: the whole suite runs on PostgreSQL; on SQLite and
    MySQL/MariaDB, the modules marked ``specification`` run, less their tests that need
    PostgreSQL itself (marked ``postgres``: skipped, so the run says so) or real worker,
    scheduler or server processes (marked ``slow``: left out, as the other modules are).
    Tests marked ``mysql`` run on MySQL/MariaDB alone, real processes and all, and are
    skipped elsewhere. On MySQL/MariaDB the fault tests (marked ``mariadb_faults``: workers
    and schedulers killed, the database restarted, schedulers contending) run too, real
    processes and all, since the promise of exactly once is the database's as much as the
    engine's.

    A new test in a specification module runs on every database unless it says otherwise.
    """
    engine = database_engine()
    if engine != "mysql":
        needs_mysql = pytest.mark.skip(reason="needs MySQL or MariaDB")
        for item in items:
            if "mysql" in item.keywords:
                item.add_marker(needs_mysql)
    if engine == "postgresql":
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL")
    kept: list[pytest.Item] = []
    left: list[pytest.Item] = []
    for item in items:
        if engine == "mysql" and "mysql" in item.keywords:
            kept.append(item)
            continue
        faults = engine == "mysql" and "mariadb_faults" in item.keywords
        if not faults and ("specification" not in item.keywords or "slow" in item.keywords):
            left.append(item)
            continue
        if "postgres" in item.keywords:
            item.add_marker(skip)
        kept.append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

#: Reported by the page itself for every Content-Security-Policy violation, besides the
#: browser's own console line ("Refused to load ... violates the following Content Security
#: Policy directive").
_REPORT_VIOLATIONS = """
document.addEventListener('securitypolicyviolation', (event) => console.error(
  'Content Security Policy violation: ' + event.violatedDirective + ' ' + event.blockedURI));
"""


def watch_content_security_policy(page: Any) -> list[str]:
    """The Content-Security-Policy violations ``page`` meets from now on, as console lines.

    A test that opens pages sending a policy asserts the list is empty: every script,
    stylesheet and image the page needs was allowed, so its JavaScript ran.
    """
    violations: list[str] = []
    page.add_init_script(_REPORT_VIOLATIONS)
    page.on(
        "console",
        lambda message: violations.append(message.text)
        if "Content Security Policy" in message.text
        else None,
    )
    return violations


@pytest.fixture
def page(live_server: Any, admin_user: Any) -> Iterator[Any]:
    """The admin in Debian's chromium driven by Playwright, logged in as ``admin``.

    ``page.base`` is the live server's address; ``page.csp_violations`` collects the
    Content-Security-Policy violations it meets (``watch_content_security_policy``).
    Playwright's sync API runs an event loop in this thread; the ORM calls a test makes
    between page actions are still synchronous.
    """
    from playwright.sync_api import sync_playwright

    assert os.path.exists(CHROMIUM), "Debian's chromium is required: apt-get install chromium"
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(20_000)
        page.csp_violations = watch_content_security_policy(page)  # type: ignore[attr-defined]
        page.goto(f"{live_server.url}/admin/login/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", "password")
        page.click("input[type=submit]")
        page.wait_for_selector("#site-name")
        page.base = live_server.url  # type: ignore[attr-defined]
        try:
            yield page
        finally:
            browser.close()
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


def database_url() -> str:
    """The URL of the database the tests run on (pytest-django's test database)."""
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{s['NAME']}"
    auth = s["USER"] or ""
    if s["PASSWORD"]:
        auth += f":{s['PASSWORD']}"
    host = s["HOST"] or "127.0.0.1"
    port = f":{s['PORT']}" if s["PORT"] else ""
    scheme = "mysql" if s["ENGINE"].endswith("mysql") else "postgres"
    return f"{scheme}://{auth}@{host}{port}/{s['NAME']}"


@pytest.fixture
def broker_prefix() -> str:
    """A Redis key prefix of this test's own, so tests never see each other's messages."""
    return f"t{uuid.uuid4().hex[:10]}:"


def processes_environment(prefix: str) -> dict[str, str]:
    """The environment of a worker or scheduler on the test database, under the Redis key
    ``prefix``, with the engine's clocks turned down (``process_env`` says which)."""
    env = os.environ.copy()
    env.update(
        DATABASE_URL=database_url(),
        CELERY_BROKER_URL=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
        CELERY_REDIS_KEY_PREFIX=prefix,
        CELERY_VISIBILITY_TIMEOUT="60",
        CELERY_UNACKED_RESTORE_INTERVAL="1",
        SCHEDULING_HEARTBEAT_INTERVAL="1",
        SCHEDULING_STALE_AFTER="10",
        SCHEDULING_PENDING_GRACE="3",
        SCHEDULING_RETRY_BACKOFF_BASE="0.5",
        SCHEDULING_RETRY_BACKOFF_CAP="2",
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def process_env(broker_prefix: str, settings: Any) -> dict[str, str]:
    """Environment for worker and scheduler processes: this test's database and broker."""
    env = processes_environment(broker_prefix)
    settings.CELERY_BROKER_URL = env["CELERY_BROKER_URL"]
    return env


@pytest.fixture(scope="module")
def module_broker_prefix() -> str:
    """A Redis key prefix shared by one module's tests and the processes they share."""
    return f"m{uuid.uuid4().hex[:10]}:"


@pytest.fixture(scope="module")
def shared_processes(tmp_path_factory: Any, django_db_setup: Any) -> Iterator[Processes]:
    """Processes one module's tests share (a worker or scheduler none of them kills or cuts
    off), started once by a module-scoped fixture of that module and stopped after its last
    test, as ``processes`` stops a test's own.

    Starting a worker costs seconds of CPU (Python, Django, Celery, the pool's processes);
    a module whose tests each make their own jobs on the same worker pays it once. The
    ledger is emptied between tests (``transactional_db`` flushes the tables): the processes
    keep no rows in memory and open their connections afresh, so they serve the next test's
    rows as they served the last. A test that uses them asks for ``sharing``.
    """
    group = Processes(tmp_path_factory.mktemp("shared"))
    yield group
    group.stop_all()


@pytest.fixture
def sharing(
    request: pytest.FixtureRequest, shared_processes: Processes, module_broker_prefix: str
) -> Iterator[Processes]:
    """The module's shared processes, for one test: every one still running, the messages an
    earlier test left waiting under the module's prefix gone (their rows went with the flush),
    and their logs printed when the test fails."""
    import redis

    client = redis.Redis.from_url(os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"))
    for key in client.scan_iter(match=f"{module_broker_prefix}*"):
        if client.type(key) == b"list":
            client.delete(key)
    for child, log in shared_processes.children:
        assert child.poll() is None, f"{log.name} ended: {log.read_text(errors='replace')[-3000:]}"
    yield shared_processes
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for child, log in shared_processes.children:
            sys.stderr.write(f"\n----- shared {log.name} (exit {child.returncode}) -----\n")
            sys.stderr.write(log.read_text(errors="replace")[-6000:])


@pytest.fixture
def shared_processes_stopped(shared_processes: Processes) -> None:
    """The module's shared processes stopped, for a test after its sharing tests that starts
    a scheduler of its own: schedulers claim whatever is due in the database they share, so
    the shared one would take this test's jobs to its own broker keys."""
    shared_processes.stop_all()
    shared_processes.children.clear()


#: Added to ``process_env`` by the tests that SIGKILL a worker and wait for the scheduler to
#: reap its run (the emailer's and the subscriptions' worker tests): a lease (STALE_AFTER) of
#: 4 s instead of the suite's 10 s, so the dead run is reaped about 4 s after
#: its last heartbeat. A live run is renewed every quarter second instead of every second
#: (sixteen renewals per lease where the suite has ten), and its body is fenced at 0.7 of the
#: lease (FENCE_AT, the top of the range docs/operations.md gives; the suite's is half): only
#: after 2.8 s without a renewal, its process ended after 3.4 s, both before the reaper may act.
SHORT_LEASE = {
    "SCHEDULING_STALE_AFTER": "4",
    "SCHEDULING_FENCE_AT": "0.7",
    "SCHEDULING_HEARTBEAT_INTERVAL": "0.25",
}


@contextlib.contextmanager
def celery_settings(app: Any, **values: Any) -> Iterator[None]:
    """The Celery app's settings changed to ``values`` for a while, on every supported Celery.

    Celery before 5.7 reads a namespaced app's setting (``CELERY_BROKER_URL`` for
    ``broker_url``) under its namespaced key first, so a plain assignment is not seen there:
    both keys are written, and both put back. The app's pools are dropped each time, since a
    pool made earlier in the process (by another test) keeps the settings it was made with.
    """
    saved = {name: app.conf[name] for name in values}

    def put(settings: dict[str, Any]) -> None:
        for name, value in settings.items():
            app.conf[name] = value
            if app.namespace:
                app.conf[f"{app.namespace}_{name.upper()}"] = value
        # The app keeps its connection and producer pools once made (Celery 5.5 publishes
        # through them): let the next publish make them from the settings as they are now.
        app._pool = None
        if "amqp" in app.__dict__:
            app.amqp._producer_pool = None

    put(values)
    try:
        yield
    finally:
        put(saved)


def with_key_prefix(app: Any, prefix: str) -> contextlib.AbstractContextManager[None]:
    """Messages published through ``app`` go under the Redis key ``prefix`` for a while."""
    options = dict(app.conf.broker_transport_options or {})
    return celery_settings(app, broker_transport_options={**options, "global_keyprefix": prefix})


@pytest.fixture
def publish_under_prefix(broker_prefix: str) -> Iterator[str]:
    """Messages this process publishes (a run-now from the admin) go under the test's prefix,
    where the test's worker processes (``process_env``) read."""
    from config.celery import app

    with with_key_prefix(app, broker_prefix):
        yield broker_prefix


def celery_worker_command(
    *, name: str, concurrency: int = 2, pool: str = "prefork", queues: str = "celery"
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        "-P",
        pool,
        "-c",
        str(concurrency),
        "-n",
        f"{name}@%h",
        "-Q",
        queues,
        "--without-mingle",
        "--without-gossip",
        "--loglevel",
        "INFO",
    ]


def scheduler_command(*extra: str) -> list[str]:
    return [sys.executable, "manage.py", "runscheduler", *extra]
