"""Finding the schedulable Celery tasks: the only tasks a job may target.

A task is schedulable when it was declared with ``@schedulable_task`` (``scheduling.taskbase``),
which marks it ``schedulable``. This module only looks tasks up, so that the rules of a valid
job can ask without depending on the worker side.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from scheduling.celeryapp import celery_app

EXECUTION_HEADER = "duecourse_execution"
#: The task a job declared in code runs when its Celery task is not schedulable
#: (``scheduling.tasks.run_celery_task``).
CELERY_TASK_RUNNER = "scheduling.run_celery_task"


class PermanentError(Exception):
    """Raise (or subclass) this from a task for an error that retrying cannot fix."""


class UnknownTask(LookupError):
    """The named task is not registered, or not marked schedulable."""


@functools.cache
def _load_tasks() -> Any:
    """The host's Celery app with every task module imported, done once per process.

    Once, because ``import_default_modules`` makes Celery's Django fix-up run the whole system
    check framework (tens of milliseconds); a claim asks for a task per due job. The app's task
    registry stays live, so tasks registered later are still found.
    """
    app = celery_app()
    app.loader.import_default_modules()
    return app


def load_tasks(*, run_checks: bool = True) -> Any:
    """``_load_tasks``; without ``run_checks`` (a system check loading them) Celery's Django
    fix-up does not run the whole check framework again from inside."""
    if run_checks:
        return _load_tasks()
    before = os.environ.get("CELERY_SKIP_CHECKS")
    os.environ["CELERY_SKIP_CHECKS"] = "1"
    try:
        return _load_tasks()
    finally:
        if before is None:
            del os.environ["CELERY_SKIP_CHECKS"]
        else:
            os.environ["CELERY_SKIP_CHECKS"] = before


def _registered(name: str) -> Any:
    task = _load_tasks().tasks.get(name)
    if task is None:
        raise UnknownTask(f"{name!r} is not a registered Celery task")
    return task


def get_schedulable(name: str) -> Any:
    """Return the schedulable task called ``name``, or raise UnknownTask with the reason."""
    task = _registered(name)
    if not getattr(task, "schedulable", False):
        raise UnknownTask(
            f"{name!r} is registered but not schedulable (declare it with @schedulable_task, "
            "or a Django task with @task_options(schedulable=True))"
        )
    return task


def schedulable_names() -> list[str]:
    """Every schedulable task's name, sorted: the choices a job's target may take."""
    app = _load_tasks()
    return sorted(name for name, task in app.tasks.items() if getattr(task, "schedulable", False))


def get_registered(name: str) -> Any:
    """The Celery task called ``name``, schedulable or not, or raise UnknownTask: what a job
    declared in code may target (``scheduling.stages.declarations``)."""
    return _registered(name)


def get_ledger_task(name: str) -> Any:
    """The task called ``name`` whose runs the ledger keeps (a ``ScheduledTask``, whether or
    not jobs may target it: a Django task enqueued without opting in to schedules), or raise
    UnknownTask."""
    task = _registered(name)
    if not getattr(task, "ledger", False):
        raise UnknownTask(f"{name!r} is registered but its runs are not kept in the ledger")
    return task
