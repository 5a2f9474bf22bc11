"""A run in the ledger as the framework's ``TaskResult``: what ``get_result`` and ``aget_result``
return, and what a task sees on the worker (``context.task_result``, the signals' result).

The result carries the task as it was enqueued, not the bare module-level task: the options the
caller set with ``.using(...)`` (priority, queue name, ``run_after``, backend alias) are kept on
the run's row, in ``call``, and put back here. So ``backend.get_result(id) == result`` holds as
it does on Django's own backends, and ``refresh()`` of a result enqueued through a second alias
reads through that alias. ``enqueued_at`` is when the run was written (not when it falls due),
``started_at`` the first attempt's start, ``last_attempted_at`` the latest's.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from scheduling.djangotasks.enqueued import RunView
from scheduling.djangotasks.framework import (
    Task,
    TaskError,
    TaskResult,
    TaskResultStatus,
)
from scheduling.ledger.values import Started
from scheduling.models import ExecutionStatus

STATUS = {
    ExecutionStatus.PENDING: TaskResultStatus.READY,
    ExecutionStatus.QUEUED: TaskResultStatus.READY,
    ExecutionStatus.RETRY: TaskResultStatus.READY,
    ExecutionStatus.RUNNING: TaskResultStatus.RUNNING,
    ExecutionStatus.COMPLETED: TaskResultStatus.SUCCESSFUL,
    ExecutionStatus.FAILED: TaskResultStatus.FAILED,
    ExecutionStatus.SKIPPED: TaskResultStatus.FAILED,
    ExecutionStatus.SUPERSEDED: TaskResultStatus.FAILED,
    ExecutionStatus.CANCELLED: TaskResultStatus.FAILED,
}

FINISHED = (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)


def call_options(task: Task, *, alias: str) -> dict[str, Any]:
    """What ``.using(...)`` set on ``task``, as the run's ``call`` keeps it (JSON)."""
    return {
        "backend": alias,
        "queue_name": task.queue_name,
        "priority": task.priority,
        "run_after": task.run_after.isoformat() if task.run_after is not None else None,
    }


def task_as_enqueued(task: Task, call: dict[str, Any]) -> Task:
    """``task`` (the module-level one) with the options its run was enqueued with.

    Not through ``.using()``: that validates again, against the settings as they are now, and a
    run enqueued before a queue left ``QUEUES`` (or an alias left ``TASKS``) must stay readable.
    The options were checked when the run was enqueued.
    """
    changes: dict[str, Any] = {}
    if call.get("backend"):
        changes["backend"] = str(call["backend"])
    if call.get("queue_name") is not None:
        changes["queue_name"] = str(call["queue_name"])
    if call.get("priority") is not None:
        changes["priority"] = call["priority"]
    if call.get("run_after"):
        changes["run_after"] = datetime.fromisoformat(str(call["run_after"]))
    if all(getattr(task, name) == value for name, value in changes.items()):
        return task
    # A frozen, slotted dataclass: a copy field by field, without its __post_init__.
    copy = object.__new__(type(task))
    for field in dataclasses.fields(task):
        object.__setattr__(copy, field.name, changes.get(field.name, getattr(task, field.name)))
    return copy


def result_of(run: RunView, *, task: Task, alias: str) -> TaskResult:
    """The framework's result of ``run``, whose module-level task is ``task``; ``alias`` is the
    backend's, for a run that does not name one (a job's occurrence)."""
    execution = run.execution
    status = STATUS[ExecutionStatus(execution.status)]
    stored = execution.result or {}
    result = TaskResult(
        task=task_as_enqueued(task, execution.call or {}),
        id=str(execution.task_id),
        status=status,
        enqueued_at=execution.created_at,
        started_at=run.first_attempted_at or execution.started_at,
        finished_at=execution.finished_at if status in FINISHED else None,
        last_attempted_at=run.last_attempted_at,
        args=run.args,
        kwargs=run.kwargs,
        backend=run.backend or alias,
        errors=[TaskError(**error) for error in stored.get("errors", [])],
        worker_ids=run.workers,
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", stored.get("value"))
    return result


def started_result(
    started: Started,
    *,
    task: Task,
    alias: str,
    result_id: str,
    worker: str,
    args: list[Any],
    kwargs: dict[str, Any],
) -> TaskResult:
    """The RUNNING result of the attempt that ``started`` began, as ``result_of`` reads it
    back from the ledger, built from what the start returned and the message: no read before
    the body. ``args`` and ``kwargs`` are the message's, kept for a job's occurrence (whose
    call is None): the arguments the body is given."""
    call = started.call or {}
    return TaskResult(
        task=task_as_enqueued(task, call),
        id=result_id,
        status=TaskResultStatus.RUNNING,
        enqueued_at=started.created_at,
        started_at=started.first_started_at or started.started_at,
        finished_at=None,
        last_attempted_at=started.started_at,
        args=list(call.get("args", args)),
        kwargs=dict(call.get("kwargs", kwargs)),
        backend=call.get("backend") or alias,
        errors=[TaskError(**error) for error in started.errors],
        worker_ids=[*started.earlier_workers, worker],
    )
