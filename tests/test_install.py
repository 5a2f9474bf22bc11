"""Duecourse installed from its built wheel into somebody else's project, tried from outside.

The wheel and the sdist are built from this checkout (the wheel from the sdist, so the sdist is
proved complete too), installed into a fresh virtual environment, and run in a copy of
``tests/host_project``: a cookiecutter-django-shaped project with its own ``config`` package,
its own Celery app in ``config/celery_app.py`` and its own task. The host's processes are the
stock ones: ``celery -A config.celery_app worker`` and ``celery -A config.celery_app beat -S
scheduling.beat:DatabaseScheduler``. Nothing of this repository's ``config`` is on their path.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import django
import psycopg
import pytest
from django.db import connection

from tests.conftest import ROOT, Processes, wait_for

#: ``stack`` on every test but the domain apps' own installs, which prove the wheel's shape
#: (which apps import which) and so run on the full stacks only (noxfile.py).
pytestmark = [pytest.mark.slow, pytest.mark.postgres]

HOST_TEMPLATE = ROOT / "tests" / "host_project"
SHIPPED = {"scheduling", "emailer", "subscriptions"}


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path
    venv: Path

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")


def run(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, (
        f"{' '.join(command)} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


def pinned_stack() -> list[str]:
    """This process's Django and Celery (and kombu), pinned: the host gets the same stack."""
    import celery
    import kombu

    return [
        f"django=={django.get_version()}",
        f"celery=={celery.__version__}",
        f"kombu=={kombu.__version__}",
    ]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The sdist and wheel of this checkout, and a fresh virtualenv with the wheel installed.

    Under the stack matrix (noxfile.py) the session's wheel is given in ``DUECOURSE_WHEEL``
    and only the sdist is built here. The host gets this process's Django and Celery, and the
    Django Tasks backport where Django does not have the framework (5.2).
    """
    where = tmp_path_factory.mktemp("dist")
    ours = ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")
    clean = {k: v for k, v in os.environ.items() if k not in ours}
    given = os.environ.get("DUECOURSE_WHEEL")
    uv = installer()
    # Both build the sdist, then the wheel from it, each in an isolated build environment.
    build = [uv, "build", "--quiet", "--out-dir"] if uv else [sys.executable, "-m", "build", "-o"]
    run([*build, str(where), *(["--sdist"] if given else []), str(ROOT)], cwd=where, env=clean)
    wheel = Path(given) if given else next(where.glob("duecourse-*.whl"))
    sdist = next(where.glob("duecourse-*.tar.gz"))
    venv = where / "venv"
    extras = "[tasks]" if django.VERSION < (6,) else ""
    wanted = [f"duecourse{extras} @ {wheel.as_uri()}", *pinned_stack()]
    if uv:
        run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], cwd=where, env=clean)
        run([uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), *wanted],
            cwd=where, env=clean)  # fmt: skip
    else:
        run([sys.executable, "-m", "venv", str(venv)], cwd=where, env=clean)
        run([str(venv / "bin" / "pip"), "install", "--quiet", *wanted], cwd=where, env=clean)
    return Built(wheel=wheel, sdist=sdist, venv=venv)


def installer() -> str | None:
    """uv, where the suite's environment has it (the test extra installs it): it installs the
    host's packages from its cache in a second, where pip takes ten. Either installs the same
    wheel with the same pinned Django and Celery; pip where uv is absent, or where
    ``DUECOURSE_INSTALL_WITH=pip`` asks for the installer docs/install.md names (the oldest
    stack's nox session does)."""
    if os.environ.get("DUECOURSE_INSTALL_WITH") == "pip":
        return None
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.exists() else shutil.which("uv")


@pytest.mark.stack
def test_the_wheel_holds_only_the_apps_with_their_templates_and_migrations(built: Built) -> None:
    names = zipfile.ZipFile(built.wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == SHIPPED
    for app in SHIPPED:
        assert f"{app}/migrations/0001_initial.py" in names
    assert "scheduling/templates/scheduling/dashboard.html" in names
    assert "scheduling/static/scheduling/duecourse.css" in names  # its pages' only styles
    assert "emailer/templates/admin/emailer/project/import.html" in names
    metadata = zipfile.ZipFile(built.wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))
    ).decode()
    for version in ("5.2", "6.0", "6.1"):
        assert f"Framework :: Django :: {version}" in metadata
    for version in ("3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {version}" in metadata
    assert "Requires-Python: >=3.11" in metadata
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    core = [line for line in requires if "extra ==" not in line]
    assert not any("django-celery-beat" in line for line in core), "beat is an extra"
    django_pin = next(line for line in core if line.split()[1].lower().startswith("django"))
    assert "<" not in django_pin, f"no cap on the host's Django: {django_pin}"
    assert "License-Expression: MIT" in metadata
    assert "Project-URL: Changelog" in metadata


@pytest.mark.stack
def test_the_wheel_ships_the_test_gateway_as_an_app_a_host_adds(built: Built) -> None:
    """``subscriptions.testgateway`` is in the wheel, its migrations and statements with it,
    for the hosts that list it; ``subscriptions`` alone has none of its models or pages."""
    names = zipfile.ZipFile(built.wheel).namelist()
    for path in ("apps.py", "migrations/0001_initial.py", "sql/postgresql.sql", "admin.py"):
        assert f"subscriptions/testgateway/{path}" in names
    assert "subscriptions/models/gateway.py" not in names
    assert "subscriptions/admin/gateway.py" not in names


@pytest.mark.stack
def test_the_sdist_holds_the_apps_and_their_documents_only(built: Built) -> None:
    with tarfile.open(built.sdist) as archive:
        paths = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    top = {path.split("/")[0] for path in paths}
    assert {"config", "tests", "bench", "deploy", "manage.py"}.isdisjoint(top)
    assert top >= SHIPPED
    assert {"README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml"} <= top


class Host:
    """A copy of the host project, its own database and broker prefix, run with the venv."""

    def __init__(self, built: Built, root: Path, extra_apps: str = "") -> None:
        self.built = built
        self.root = root
        shutil.copytree(HOST_TEMPLATE, root)
        self.db_name = f"host_{uuid.uuid4().hex[:10]}"
        self.run_log = root / "runs.log"
        s = connection.settings_dict
        keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
        self.env = {k: v for k, v in os.environ.items() if k in keep}
        self.env.update(
            HOST_DB_NAME=self.db_name,
            HOST_DB_HOST=s["HOST"] or "127.0.0.1",
            HOST_DB_PORT=str(s["PORT"] or "5432"),
            HOST_DB_USER=s["USER"] or "postgres",
            HOST_DB_PASSWORD=s["PASSWORD"] or "",
            HOST_BROKER_URL=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
            HOST_BROKER_PREFIX=f"h{uuid.uuid4().hex[:10]}:",
            HOST_RUN_LOG=str(self.run_log),
            HOST_EXTRA_APPS=extra_apps,
            DJANGO_SUPERUSER_PASSWORD="host-admin-password",
            PYTHONUNBUFFERED="1",
        )
        with self._server() as server:
            server.execute(f'CREATE DATABASE "{self.db_name}"')

    def _server(self) -> psycopg.Connection[Any]:
        s = connection.settings_dict
        return psycopg.connect(
            dbname="postgres",
            host=s["HOST"] or "127.0.0.1",
            port=s["PORT"] or 5432,
            user=s["USER"] or "postgres",
            password=s["PASSWORD"] or None,
            autocommit=True,
        )

    def drop(self) -> None:
        with self._server() as server:
            server.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')

    def manage(self, *args: str) -> str:
        return run([self.built.python, "manage.py", *args], cwd=self.root, env=self.env)

    def python(self, code: str) -> str:
        return run([self.built.python, "-c", code], cwd=self.root, env=self.env)

    def celery(self, *args: str) -> list[str]:
        return [str(self.built.venv / "bin" / "celery"), "-A", "config.celery_app", *args]


@pytest.fixture
def host(built: Built, tmp_path: Path) -> Iterator[Host]:
    project = Host(built, tmp_path / "host")
    yield project
    project.drop()


ENQUEUE = """
import os, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
from django.db import transaction
from hostproj.billing.tasks import send_receipt
with transaction.atomic():
    result = send_receipt.enqueue(42)
print(result.id)
"""

RESULT = """
import json, os, time, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
from hostproj.billing.tasks import send_receipt
deadline = time.monotonic() + 60
result = send_receipt.get_result(%r)
while not result.is_finished and time.monotonic() < deadline:
    time.sleep(0.2)
    result.refresh()
print(json.dumps({
    "status": str(result.status),
    "value": result.return_value if result.status == "SUCCESSFUL" else None,
    "workers": result.worker_ids,
}))
"""

ADMIN_PAGES = """
import json, os, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
from django.contrib.auth import get_user_model
from django.test import Client
client = Client()
client.force_login(get_user_model().objects.get(username="admin"))
pages = {}
for url in %r:
    response = client.get(url)
    pages[url] = [response.status_code, response.content.decode()]
print(json.dumps(pages))
"""


def admin_pages(host: Host, *urls: str) -> dict[str, tuple[int, str]]:
    code = ADMIN_PAGES % (list(urls),)
    answers = json.loads(host.python(code).splitlines()[-1])
    return {url: (status, body) for url, (status, body) in answers.items()}


@pytest.mark.stack
def test_a_host_project_runs_its_own_task_on_a_schedule_from_the_wheel(
    host: Host, processes: Processes
) -> None:
    where = host.python("import scheduling, config; print(scheduling.__file__, config.__file__)")
    scheduling_file, config_file = where.split()
    assert scheduling_file.startswith(str(host.built.venv)), "the engine comes from the wheel"
    assert config_file.startswith(str(host.root)), "config is the host's own package"

    assert "no issues" in host.manage("check")
    host.manage("migrate", "--noinput", "-v0")
    without_beat = subprocess.run(
        [host.built.python, "manage.py", "import_beat"],
        cwd=host.root, env=host.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert without_beat.returncode != 0
    assert without_beat.stderr.strip().count("\n") == 0, "one line"
    assert 'pip install "duecourse[beat]"' in without_beat.stderr
    assert "Traceback" not in without_beat.stderr
    host.manage("createsuperuser", "--noinput", "--username", "admin", "--email", "a@example.org")
    host.manage(
        "jobs", "add", "close-books", "--task", "billing.close_books",
        "--kwargs", '{"ledger": "main"}', "--every", "PT1S",
    )  # fmt: skip

    worker = processes.start(
        host.celery("worker", "-c", "2", "-n", "host@%h", "--without-mingle", "--without-gossip"),
        env=host.env, name="host-worker", cwd=host.root,
    )  # fmt: skip
    beat = processes.start(
        host.celery("beat", "-S", "scheduling.beat:DatabaseScheduler", "--loglevel", "INFO"),
        env=host.env, name="host-beat", cwd=host.root,
    )  # fmt: skip

    enqueued = host.python(ENQUEUE).splitlines()[-1]

    def bodies() -> list[str]:
        return host.run_log.read_text().splitlines() if host.run_log.exists() else []

    wait_for(lambda: len(bodies()) >= 5, timeout=90, message="five runs of the host's task")
    processes.kill(beat, 15)
    beat.wait(timeout=30)

    def history() -> list[dict[str, Any]]:
        out = host.manage("executions", "--job", "close-books", "--limit", "1000", "--json")
        return list(json.loads(out))

    settled = wait_for(
        lambda: (rows := history()) and all(r["status"] == "completed" for r in rows) and rows,
        timeout=60,
        message="every execution completed",
    )
    assert worker.poll() is None, processes.log_of(worker)

    ran = [line.split()[0] for line in bodies()]
    completed = sorted(str(row["id"]) for row in settled)
    assert sorted(ran) == completed, "each occurrence's body ran exactly once"
    due = sorted(datetime.fromisoformat(row["scheduled_for"]) for row in settled)
    assert len(set(due)) == len(due), "no occurrence twice"
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(due)), (
        "no occurrence lost between the first and the last"
    )

    receipt = json.loads(host.python(RESULT % (enqueued,)).splitlines()[-1])
    assert receipt["status"] == "SUCCESSFUL", receipt
    assert receipt["value"] == {"order": 42, "sent": True}
    assert receipt["workers"][0].startswith("host@")

    pages = admin_pages(
        host,
        "/admin/scheduling/job/",
        "/admin/scheduling/execution/",
        "/ops/dashboard/",
        "/ops/health/live/",
        "/ops/metrics",
    )
    status, job_list = pages["/admin/scheduling/job/"]
    assert status == 200 and "close-books" in job_list
    assert 'href="/ops/dashboard/"' in job_list, "the job list links the mounted dashboard"
    assert pages["/admin/scheduling/execution/"][0] == 200
    assert pages["/ops/dashboard/"][0] == 200
    assert pages["/ops/health/live/"][0] == 200
    assert pages["/ops/metrics"][0] == 200 and "duecourse_" in pages["/ops/metrics"][1]


#: What a host lists for each domain app: the subscriptions' default gateway is the test
#: gateway, an app of its own that a host without a payment gateway of its own adds.
DOMAIN_APPS = {"emailer": "emailer", "subscriptions": "subscriptions,subscriptions.testgateway"}


@pytest.mark.parametrize("app", ["emailer", "subscriptions"])
def test_each_domain_app_installs_on_its_own_beside_the_engine(
    built: Built, tmp_path: Path, app: str
) -> None:
    project = Host(built, tmp_path / "host", extra_apps=DOMAIN_APPS[app])
    try:
        assert "no issues" in project.manage("check")
        project.manage("migrate", "--noinput", "-v0")
        project.manage(
            "createsuperuser", "--noinput", "--username", "admin", "--email", "a@example.org"
        )
        assert "no issues" in project.manage("check", "--database", "default")
        changelists = {
            "emailer": ["/admin/emailer/project/", "/admin/emailer/sendemailtask/"],
            "subscriptions": ["/admin/subscriptions/subscription/"],
        }[app]
        for url, (status, _) in admin_pages(project, *changelists).items():
            assert status == 200, url
        assert app in project.manage("help")
    finally:
        project.drop()


DJANGO_TASKS_DOC = ROOT / "docs" / "django-tasks.md"


def verbatim(label: str) -> str:
    """The code block docs/django-tasks.md marks ``<!-- verbatim: label -->``, as written."""
    text = DJANGO_TASKS_DOC.read_text()
    marker = f"<!-- verbatim: {label} -->\n```"
    start = text.index("\n", text.index(marker) + len(marker)) + 1
    return text[start : text.index("\n```", start)] + "\n"


@pytest.mark.stack
def test_the_django_tasks_examples_run_as_written_on_this_stack(
    built: Built, tmp_path: Path, processes: Processes
) -> None:
    project = Host(built, tmp_path / "host", extra_apps="reports")
    try:
        app = project.root / "reports"
        app.mkdir()
        (app / "__init__.py").write_text("")
        (app / "tasks.py").write_text(verbatim("reports/tasks.py"))
        project.manage("migrate", "--noinput", "-v0")
        project.manage(
            "createsuperuser", "--noinput", "--username", "admin", "--email", "a@example.org"
        )
        processes.start(
            project.celery("worker", "-Q", "celery,reports", "-c", "2", "-n", "docs@%h",
                           "--without-mingle", "--without-gossip"),
            env=project.env, name="docs-worker", cwd=project.root,
        )  # fmt: skip

        printed = project.manage("shell", "-c", verbatim("manage.py shell")).splitlines()
        assert printed[-2:] == ["SUCCESSFUL receipt 42 sent", "no such run"], printed

        env = {**project.env, "PATH": f"{built.venv / 'bin'}{os.pathsep}{project.env['PATH']}"}
        run(["bash", "-ec", verbatim("sh")], cwd=project.root, env=env)
        job = json.loads(project.manage("jobs", "show", "nightly-close", "--json"))
        assert job["task"] == "reports.tasks.close_books"
        assert (job["schedule"]["cron"], job["schedule"]["timezone"]) == (
            "0 2 * * *", "Europe/Berlin",
        )

        options = project.python(
            "import os, django; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings');"
            " django.setup(); from reports.tasks import close_books as t;"
            " u = t.using(priority=0); print(u.max_retries, u.timeout, u.schedulable, u.queue_name)"
        )
        assert options.split() == ["3", "600", "True", "reports"], "the options survive using()"
    finally:
        project.drop()
