"""A process that enqueues a Django task and exits has published it: on every Python.

The outbox publishes committed enqueues from a thread of the enqueuing process and is flushed
when the process exits. Python 3.12 and later refuse a new thread at interpreter shutdown, so
a flush that started one printed ``RuntimeError: can't create new thread at interpreter
shutdown`` and lost the message until the scheduler's republish. Here a stock worker runs and
no scheduler does: a run starts only if the exiting process itself published it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scheduling.celeryapp import celery_app
from tests.conftest import ROOT, Processes, wait_for
from tests.scheduling.test_worker_lifecycle import launch_worker, wait_ready, worker_command
from tests.tasktable_app import tasks

pytestmark = [pytest.mark.slow, pytest.mark.stack, pytest.mark.django_db(transaction=True)]

#: The deadline for the run to start. No scheduler runs, so only the exiting process can have
#: published it: a generous deadline keeps the meaning (without the flush it never starts).
PROMPT = 60.0

SETUP = "import os, django; django.setup()\n"
SCRIPT = SETUP + (
    "from django.db import transaction\n"
    "from tests.tasktable_app.tasks import add\n"
    "with transaction.atomic():\n"
    "    result = add.enqueue(20, 22)\n"
    "print(result.id)\n"
)
SHELL = "from tests.tasktable_app.tasks import add; print(add.enqueue(20, 22).id)"
REQUEST = SETUP + (
    "from django.test import Client\n"
    "from django.test.utils import override_settings\n"
    "with override_settings(ROOT_URLCONF='tests.tasktable_app.urls', ALLOWED_HOSTS=['*']):\n"
    "    response = Client().get('/enqueue/', {'a': 20, 'b': 22})\n"
    "assert response.status_code == 200, response.status_code\n"
    "print(response.content.decode())\n"
)

COMMANDS = {
    "a script": [sys.executable, "-c", SCRIPT],
    "manage.py shell": [sys.executable, "manage.py", "shell", "-c", SHELL],
    "a request's on_commit": [sys.executable, "-c", REQUEST],
}


def settled(result_id: str) -> Any:
    def check() -> Any:
        fresh = tasks.add.get_backend().get_result(result_id)
        return fresh if fresh.is_finished else None

    return check


@pytest.mark.parametrize("how", list(COMMANDS))
def test_a_process_that_enqueues_and_exits_has_published_its_run(
    how: str, processes: Processes, process_env: dict[str, str]
) -> None:
    worker = launch_worker(processes, process_env, "exits")
    wait_ready(processes, worker)

    ended = subprocess.run(
        COMMANDS[how], cwd=ROOT, env=process_env, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert ended.returncode == 0, ended.stderr
    assert ended.stderr == "", f"nothing is printed at exit:\n{ended.stderr}"
    result_id = ended.stdout.strip().splitlines()[-1]

    done = wait_for(settled(result_id), timeout=PROMPT, message="the run starts")
    assert done.status == "SUCCESSFUL" and done.return_value == 42


def test_a_worker_process_that_enqueues_from_a_task_and_exits_has_published_its_run(
    processes: Processes, process_env: dict[str, str], publish_under_prefix: str, tmp_path: Path
) -> None:
    log = tmp_path / "bodies.log"
    env = {**process_env, "DUECOURSE_TEST_BODY_LOG": str(log)}
    # Each pool process runs one task and exits: the enqueue's process is gone right after.
    worker = processes.start(
        [*worker_command("enqueuer"), "--max-tasks-per-child", "1"],
        env=env, name="enqueuer",
    )  # fmt: skip
    wait_ready(processes, worker)

    celery_app().send_task("tests.tasktable_app.enqueue_from_a_worker", args=[40, 2])
    enqueued = wait_for(
        lambda: next(
            (line.split()[1] for line in _lines(log) if line.startswith("enqueued ")), None
        ),
        timeout=PROMPT,
        message="the Celery task enqueues",
    )
    done = wait_for(settled(enqueued), timeout=PROMPT, message="the enqueued run starts")
    assert done.status == "SUCCESSFUL" and done.return_value == 42


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []
