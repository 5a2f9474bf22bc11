"""``make run`` (``manage.py runstack``): a worker, the scheduler and a styled admin to log in to,
with console lines that name jobs."""

from __future__ import annotations

import http.cookiejar
import re
import sys
import urllib.parse
import urllib.request
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduling.management.commands.runstack import DEMO_ADMIN, demo_login
from scheduling.management.console import JobNames
from scheduling.models import Execution, Job
from tests.conftest import Processes, free_port, wait_for

db = pytest.mark.django_db


@db
def test_the_demo_password_is_new_at_every_start() -> None:
    first = demo_login()
    second = demo_login()
    assert first[0] == second[0] == DEMO_ADMIN
    assert first[1] != second[1] and len(second[1]) >= 16
    user = get_user_model().objects.get(username=DEMO_ADMIN)
    assert user.is_superuser and user.check_password(second[1])
    assert not user.check_password(first[1])


@db
def test_the_demo_is_refused_on_a_database_url_someone_set(settings: Any) -> None:
    """This project's settings turn SCHEDULING_DEMO off whenever DATABASE_URL is set."""
    settings.SCHEDULING_DEMO = False
    users = get_user_model().objects
    users.create_user(DEMO_ADMIN, password="theirs-and-unchanged")
    with pytest.raises(CommandError, match="throwaway local database"):
        call_command("loaddemo")
    out = StringIO()
    call_command("loaddemo", "--if-allowed", stdout=out)
    assert "demo not loaded" in out.getvalue()
    assert not Job.objects.exists()
    user = users.get(username=DEMO_ADMIN)
    assert not user.is_superuser and user.check_password("theirs-and-unchanged")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_runstack_on_a_database_url_makes_no_login(
    processes: Processes, process_env: dict[str, str]
) -> None:
    get_user_model().objects.create_user(DEMO_ADMIN, password="theirs-and-unchanged")
    port = free_port()
    stack = processes.start(
        [sys.executable, "manage.py", "runstack", "--port", str(port), "--concurrency", "1"],
        env={k: v for k, v in process_env.items() if k != "SCHEDULING_DEMO"},
        name="runstack",
    )
    wait_for(
        lambda: "log in with your own account" in processes.log_of(stack),
        timeout=60,
        message="the no-demo-login line",
    )
    assert "with password" not in processes.log_of(stack)
    user = get_user_model().objects.get(username=DEMO_ADMIN)
    assert not user.is_superuser and user.check_password("theirs-and-unchanged")


@db
def test_console_lines_name_the_job(make_job: Any, now: Any) -> None:
    job = make_job(name="nightly-report")
    execution = Execution.objects.create(job=job, task=job.task, scheduled_for=now)
    names = JobNames()
    line = f"INFO scheduling execution.started execution={execution.pk} attempt=1"
    assert names.annotate(line) == (
        f"INFO scheduling execution.started name=nightly-report execution={execution.pk} attempt=1"
    )
    assert names.annotate(f"job.paused job={job.pk} reason=-").startswith(
        "job.paused name=nightly-report job="
    )
    assert names.annotate("celery@host ready.") == "celery@host ready."
    assert names.annotate("execution.started execution=999999") == (
        "execution.started execution=999999"
    )


class Browser:
    """Just enough of a browser for Django's login form: cookies and the CSRF token."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> tuple[int, str, str]:
        with self.opener.open(self.base + path, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()

    def login(self, username: str, password: str) -> str:
        _, _, page = self.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert token, page[:500]
        data = urllib.parse.urlencode(
            {
                "csrfmiddlewaretoken": token.group(1),
                "username": username,
                "password": password,
                "next": "/admin/",
            }
        ).encode()
        request = urllib.request.Request(
            self.base + "/admin/login/?next=/admin/",
            data=data,
            headers={"Referer": self.base + "/admin/login/"},
        )
        with self.opener.open(request, timeout=10) as response:
            return str(response.read().decode())


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_runstack_serves_a_styled_admin_and_names_jobs(
    processes: Processes, process_env: dict[str, str], tmp_path: Path, settings: Any
) -> None:
    settings.SCHEDULING_DEMO = True  # this test's database is a throwaway one
    call_command("loaddemo")
    port = free_port()
    stack = processes.start(
        [sys.executable, "manage.py", "runstack", "--port", str(port), "--concurrency", "1"],
        env={**process_env, "SCHEDULING_DEMO": "1"},
        name="runstack",
    )
    login = wait_for(
        lambda: re.search(r"log in as (\S+) with password (\S+)", processes.log_of(stack)),
        timeout=60,
        message="the login line",
    )
    assert f"admin: http://127.0.0.1:{port}/admin/" in processes.log_of(stack)
    browser = Browser(f"http://127.0.0.1:{port}")
    status, content_type, css = browser.get("/static/admin/css/base.css")
    assert status == 200 and content_type.startswith("text/css") and "body" in css
    index = browser.login(login.group(1), login.group(2))
    assert "Site administration" in index and "/dashboard/" in index
    status, _, dashboard = browser.get("/dashboard/")
    assert status == 200 and 'id="panel-chart"' in dashboard
    wait_for(
        lambda: re.search(r"execution\.completed name=quick ", processes.log_of(stack)),
        timeout=60,
        message="a completed execution of the quick job, named",
    )


def test_runstack_prints_each_execution_once_without_celerys_echoes() -> None:
    from scheduling.management.console import Quieter

    quiet = Quieter()
    lines = [
        "[2030-01-07 09:00:00,001: INFO/MainProcess] Task scheduling.run_task_row"
        "[0b6f1c2e-1111-2222-3333-444455556666] received",
        "[2030-01-07 09:00:00,100: WARNING/ForkPoolWorker-1] 2030-01-07 09:00:00,099 INFO "
        "scheduling execution.started execution=7 job=3",
        "[2030-01-07 09:00:00,300: INFO/ForkPoolWorker-1] Task scheduling.run_task_row"
        "[0b6f1c2e-1111-2222-3333-444455556666] succeeded in 0.2s: None",
        "/venv/lib/python3.11/site-packages/celery/platforms.py:829: SecurityWarning: You're "
        "running the worker with superuser privileges: this is",
        "absolutely not recommended!",
        "",
        "2030-01-07 09:00:00,400 INFO scheduling execution.completed execution=7 job=3",
    ]
    assert [kept for line in lines if (kept := quiet.keep(line)) is not None] == [
        "2030-01-07 09:00:00,099 INFO scheduling execution.started execution=7 job=3",
        "2030-01-07 09:00:00,400 INFO scheduling execution.completed execution=7 job=3",
    ]
