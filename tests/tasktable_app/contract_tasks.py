"""``@task`` functions for the specification of the framework's contract
(``tests/scheduling/test_django_tasks_contract.py``): one per behaviour a backend must show.

Not a ``tasks`` module, so Celery's autodiscovery does not import it: the contract's worker
names it with ``-I``.
"""

from __future__ import annotations

import os
from typing import Any

from scheduling.api import task_options
from scheduling.djangotasks.framework import TaskContext

try:
    from django.tasks import task
except ImportError:  # Django 5.2 with the backport
    from django_tasks import task


@task
def noop(*args: Any, **kwargs: Any) -> None:
    return None


@task
async def noop_async(*args: Any, **kwargs: Any) -> None:
    return None


@task
def meaning_of_life() -> int:
    return 42


@task
async def meaning_of_life_async() -> int:
    return 42


@task
def fails_with_value_error() -> None:
    raise ValueError("failed on purpose with ValueError")


@task
def fails_with_system_exit() -> None:
    raise SystemExit("failed on purpose with SystemExit")


@task
def fails_with_keyboard_interrupt() -> None:
    raise KeyboardInterrupt("failed on purpose with KeyboardInterrupt")


@task
def fails_with_nested_exception() -> None:
    raise ValueError(ValueError("the inner one"))


@task
def returns_a_function() -> Any:
    return lambda: True


@task(takes_context=True)
def as_enqueued(context: TaskContext) -> dict[str, Any]:
    """What the running task sees of its own result: the task as enqueued, and the times."""
    result = context.task_result
    seen = result.task
    return {
        "id": result.id,
        "attempt": context.attempt,
        "priority": seen.priority,
        "queue_name": seen.queue_name,
        "backend": seen.backend,
        "run_after": seen.run_after.isoformat() if seen.run_after else None,
        "result_backend": result.backend,
        "enqueued_at": result.enqueued_at.isoformat() if result.enqueued_at else None,
        "started_at": result.started_at.isoformat() if result.started_at else None,
        "status": str(result.status),
        "worker_ids": list(result.worker_ids),
    }


@task_options(max_retries=2)
@task
def fails_twice(path: str) -> int:
    """Fails on its first two attempts (counted in the file ``path``), then succeeds."""
    with open(path, "a") as handle:
        handle.write("x")
    tries = os.path.getsize(path)
    if tries < 3:
        raise RuntimeError(f"try {tries}")
    return tries
