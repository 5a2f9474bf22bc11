"""Django's Tasks framework's ``@task`` functions for the backend's specifications.

Workers import this module through Celery's autodiscovery of ``tasks`` modules, as a host
project's workers import theirs. Bodies that need to be seen from outside append a line to the
file named by ``DUECOURSE_TEST_BODY_LOG``; the framework's signals do the same when fired in a
worker, so a test can tell that they were sent where the run happened.
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.db import transaction
from django.dispatch import receiver

from scheduling.api import Fenced, schedulable_task, task_options
from scheduling.djangotasks.framework import TaskContext, task_finished, task_started

try:
    from django.tasks import task
except ImportError:  # Django 5.2 with the backport
    from django_tasks import task


def _note(line: str) -> None:
    path = os.environ.get("DUECOURSE_TEST_BODY_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(line + "\n")


@task
def add(a: int, b: int) -> int:
    _note(f"add {a} {b}")
    return a + b


@schedulable_task(name="tests.tasktable_app.note_call")
def note_call(label: str, *, times: int = 1) -> str:
    """A schedulable Celery task whose runs say what they were called with."""
    _note(f"celery {label} {times}")
    return label * times


@task
def echo(value: Any) -> Any:
    return value


@task
def explode(reason: str) -> None:
    raise ValueError(f"exploded: {reason}")


@task(takes_context=True)
def who_am_i(context: TaskContext) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt}


@task_options(timeout=60)
@task
def slow(label: str, seconds: float) -> str:
    _note(f"start {label}")
    time.sleep(seconds)
    _note(f"end {label}")
    return label


@task_options(max_retries=2)
@task
def flaky(path: str) -> str:
    """Fails until it has run twice (counted in the file ``path``), then succeeds."""
    with open(path, "a") as handle:
        handle.write("x")
    with open(path) as handle:
        runs = len(handle.read())
    if runs < 3:
        raise RuntimeError(f"flaky: try {runs}")
    return f"ok after {runs}"


@task_options(schedulable=True)
@task
def tick(label: str) -> str:
    _note(f"tick {label}")
    return label


@receiver(task_started)
def _started(sender: Any, task_result: Any, **_: Any) -> None:
    _note(f"signal started {task_result.id}")


@receiver(task_finished)
def _finished(sender: Any, task_result: Any, **_: Any) -> None:
    _note(f"signal finished {task_result.id} {task_result.status}")


@shared_task(name="tests.tasktable_app.enqueue_from_a_worker")
def enqueue_from_a_worker(a: int, b: int) -> str:
    """A Celery task that enqueues a Django task, as a project's tasks do: the enqueue is
    published after its transaction commits, from the worker's pool process."""
    with transaction.atomic():
        result = add.enqueue(a, b)
    _note(f"enqueued {result.id}")
    return str(result.id)


@schedulable_task(name="tests.overlap.sleep_noting", bind=True)
def sleep_noting(self: Any, seconds: float) -> float:
    """Sleep ``seconds``, noting the run's start, its end, or the clean-up it did when it was
    stopped (``cancel_other``: Celery's soft time limit signal raises in the body)."""
    run = self.request.id
    _note(f"start {run}")
    try:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.2))
    except SoftTimeLimitExceeded:
        _note(f"cleanup {run}")
        raise
    _note(f"end {run}")
    return seconds


@schedulable_task(name="tests.overlap.sleep_ignoring_stop", bind=True)
def sleep_ignoring_stop(self: Any, seconds: float) -> float:
    """Like ``sleep_noting``, but swallow the stop (the soft time limit's exception) and go
    on; a fence is obeyed, as the docs ask of every body (``Fenced`` is a subclass)."""
    run = self.request.id
    _note(f"start {run}")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            time.sleep(0.2)
        except Fenced:
            _note(f"fenced {run}")
            raise
        except SoftTimeLimitExceeded:
            _note(f"ignored {run}")
    _note(f"end {run}")
    return seconds
