"""The embedded default: SQLite and kombu's file-system broker, no server at all.

This is what ``make run`` starts on a fresh machine; the test drives the same commands in a
private ``var`` directory and waits for the demo's quick job to complete on a real worker.
"""

from __future__ import annotations

import email
import email.policy
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, Processes, free_port, wait_for
from tests.polling import logged

pytestmark = [pytest.mark.slow, pytest.mark.spread]


def _env(var_dir: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "SITE_URL",
                       "EMAILER_SITE_URL")
        and not key.startswith("SCHEDULING_")
    }
    env.update(DUECOURSE_VAR_DIR=str(var_dir), PYTHONUNBUFFERED="1")
    return env


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_embedded_default_runs_the_demo_and_stops_cleanly(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    env = _env(var_dir)
    migrated = _manage(env, "migrate", "--noinput", "-v0")
    assert migrated.returncode == 0, migrated.stderr
    assert (var_dir / "duecourse.sqlite3").exists()
    assert (var_dir / "secret_key").exists()
    loaded = _manage(env, "loaddemo", "--json")
    assert json.loads(loaded.stdout)["created"] == [
        "job-123456",
        "job-123457",
        "job-123458",
        "job-123459",
        "quick",
        "demo-survey (emailer project)",
        "demo-invitation",
        "ada@example.com (subscription)",
        "accounts@bistro.example.com (subscription)",
        "grace@example.com (subscription)",
    ]

    group = Processes(tmp_path)
    port = free_port()  # not 8000: links in mail must follow the port the stack serves
    stack = group.start(
        [sys.executable, "manage.py", "runstack", "--port", str(port)], env=env, name="runstack"
    )
    try:

        def quick_completed() -> bool:
            listed = _manage(env, "executions", "--job", "quick", "--status", "completed", "--json")
            return listed.returncode == 0 and len(json.loads(listed.stdout)) >= 2

        wait_for(quick_completed, timeout=90, interval=1, message="two runs of the quick job")
        # The demo's email project sends its invitation to files a newcomer can open; a
        # message is whole once the line of dashes that ends it is written.
        mail = var_dir / "mail"

        def whole_message() -> str:
            for file in mail.iterdir() if mail.is_dir() else []:
                text = file.read_text()
                if "-" * 79 in text:
                    return text
            return ""

        written = wait_for(
            whole_message,
            timeout=60,
            interval=1,
            message="the demo invitation written under var/mail",
        )
        first = email.message_from_string(written.split("-" * 79)[0], policy=email.policy.default)
        assert first["Subject"]
        link = f"http://127.0.0.1:{port}/emailer/unsubscribe/"
        assert link in first["List-Unsubscribe"]
        assert link in first.get_body(("plain",)).get_content()
        # The worker logs a run completed after writing it; the stack relays the line.
        output = logged(
            lambda: group.log_of(stack),
            r"execution\.completed",
            timeout=60,
            message="the stack prints a completed execution",
        )
        assert "execution.started" in output
        assert "execution.completed" in output
        os.kill(stack.pid, signal.SIGINT)
        assert stack.wait(timeout=40) == 0
        stopped = group.log_of(stack)
        assert "stopped" in stopped
        assert "Warm shutdown" in stopped
        assert "exited with 'signal" not in stopped  # pool processes were not killed
    finally:
        group.stop_all()

    seeded = json.loads(_manage(env, "jobs", "show", "job-123456", "--json").stdout)
    assert seeded["schedule"]["interval"] == "PT3H"
    assert seeded["max_retries"] == 3
    assert seeded["owner"] == "user1101"
    one_off = json.loads(_manage(env, "jobs", "show", "job-123459", "--json").stdout)
    assert one_off["schedule"]["kind"] == "once"


def _child_running(parent: int, needle: str) -> int | None:
    """The pid of ``parent``'s child whose command line holds ``needle``, if it runs."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and needle in cmdline:
            return int(entry.name)
    return None


def test_runstack_fails_when_one_of_its_processes_dies(tmp_path: Path) -> None:
    """A stack that lost its scheduler says so with a failing exit status, never 0."""
    var_dir = tmp_path / "var"
    env = _env(var_dir)
    assert _manage(env, "migrate", "--noinput", "-v0").returncode == 0
    group = Processes(tmp_path)
    stack = group.start(
        [sys.executable, "manage.py", "runstack", "--no-web"], env=env, name="runstack"
    )
    try:
        scheduler = wait_for(
            lambda: _child_running(stack.pid, "runscheduler"),
            timeout=60,
            message="runstack starts its scheduler",
        )
        os.kill(scheduler, signal.SIGKILL)
        status = stack.wait(timeout=60)
        output = group.log_of(stack)
        assert status != 0, output
        assert "the scheduler exited with status -9" in output
    finally:
        group.stop_all()
