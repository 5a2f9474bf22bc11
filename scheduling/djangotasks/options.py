"""Duecourse's options for a Django task, in a decorator of their own: ``@task_options``.

Django's ``@task`` takes only the framework's own options on Django 6.0 (6.1 and the backport
pass others through to the backend's task class), so Duecourse's options cannot go into it on
every version. They go above it instead, on every version alike::

    from django.tasks import task
    from scheduling.api import task_options

    @task_options(max_retries=3, timeout=600, schedulable=True)
    @task(queue_name="reports")
    def close_books(ledger: str) -> dict: ...

The decorator receives the framework's ``Task`` and returns it with the options set (a copy:
tasks are frozen), so ``.using(...)``, ``enqueue`` and pickling keep them. A task of another
backend (a project whose tests use Django's ``DummyBackend``, say) has nowhere to keep them and
comes back unchanged: the options mean something only to Duecourse's backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType
from typing import Any

from django.core.exceptions import ImproperlyConfigured

framework: ModuleType | None
try:  # scheduling.api imports this module also where no Tasks framework is installed
    from scheduling.djangotasks import framework
except ImportError:
    framework = None

#: What each option means, for the error that names it.
_RULES = {
    "max_retries": "a whole number of 0 or more",
    "timeout": "a positive whole number of seconds",
    "schedulable": "True or False",
}


#: The options' values where a task does not set them.
DEFAULTS: dict[str, Any] = {"max_retries": 0, "timeout": None, "schedulable": False}


def options_problem(*, max_retries: Any, timeout: Any, schedulable: Any) -> str | None:
    """The first option that is out of range, as a sentence naming it; None when all fit."""
    if type(max_retries) is not int or max_retries < 0:
        return f"max_retries must be {_RULES['max_retries']}."
    if timeout is not None and (type(timeout) is not int or timeout <= 0):
        return f"timeout must be {_RULES['timeout']}."
    if type(schedulable) is not bool:
        return f"schedulable must be {_RULES['schedulable']}."
    return None


def task_options(
    *, max_retries: int | None = None, timeout: int | None = None, schedulable: bool | None = None
) -> Callable[[Any], Any]:
    """Set Duecourse's options on the Django task below; see the module docstring.

    ``max_retries``: retries after an error raised by the task, with the engine's backoff (0
    unless given: the framework promises none). ``timeout``: seconds per attempt (the engine's
    ``SCHEDULING_DEFAULT_TIMEOUT`` unless given). ``schedulable``: jobs may run the task on a
    schedule (the allowlist, as ``@schedulable_task`` is for Celery tasks). Options left out
    keep the task's current value. Raises the framework's ``InvalidTask`` naming a bad option.
    """
    given = {
        name: value
        for name, value in (
            ("max_retries", max_retries),
            ("timeout", timeout),
            ("schedulable", schedulable),
        )
        if value is not None
    }

    def apply(task: Any) -> Any:
        if framework is None:
            raise ImproperlyConfigured(
                "@task_options needs Django's Tasks framework: Django 6, or on Django 5.2 the "
                "django-tasks backport (pip install 'duecourse[tasks]')"
            )
        Task, InvalidTask = framework.Task, framework.InvalidTask
        if not isinstance(task, Task):
            raise TypeError(
                f"@task_options goes above @task: it received {task!r}, not a Django task"
            )
        ours = set(_RULES) <= {field.name for field in dataclasses.fields(task)}
        current = {name: getattr(task, name) for name in _RULES} if ours else DEFAULTS
        problem = options_problem(**{**current, **given})
        if problem is not None:
            raise InvalidTask(problem)
        return dataclasses.replace(task, **given) if ours else task

    return apply
