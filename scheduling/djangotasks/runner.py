"""The worker side of Django's Tasks framework: each ``@task`` function runs as a ledger task.

Every task declared for Duecourse's backend gets a Celery task of its own, named by the
function's module path (``billing.tasks.close_books``) with ``ScheduledTask`` as its base, so a
run is claimed before its body starts, keeps a heartbeat, and has its end written by the same
receivers as any scheduled occurrence. Named by path, a run shows its task in the history,
the admin and the metrics, and a task that opts in to schedules is a job's target like any
``@schedulable_task``. The body calls the framework's task, sends its signals, and leaves the
return value (or the error) on the request for the receiver that writes the end, so the value
is committed in the same statement as the completion.
"""

from __future__ import annotations

import inspect
import json
import traceback
from typing import Any

from celery import shared_task
from celery.exceptions import Ignore, Reject, Retry
from django.db import DatabaseError
from django.utils import timezone
from django.utils.module_loading import import_string

from scheduling.djangotasks import enqueued as runs
from scheduling.djangotasks.framework import (
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_finished,
    task_started,
)
from scheduling.djangotasks.results import result_of, started_result
from scheduling.models import ExecutionStatus
from scheduling.rules import arguments
from scheduling.rules.registry import PermanentError
from scheduling.worker.taskbase import ScheduledTask, worker_is_exiting

#: Celery's own control flow, which is not an error of the task.
_CONTROL = (Ignore, Reject, Retry)

_registered: set[str] = set()
#: Whether each Django task (by module path) opted in to schedules.
_schedulable: dict[str, bool] = {}
#: The parameters each Django task's function takes from its caller (by module path).
_signatures: dict[str, inspect.Signature | None] = {}


class DjangoTaskRunner(ScheduledTask):
    """Base of the Celery task that runs one Django task; see the module docstring."""

    abstract = True
    #: Errors are kept in the run's result (class path and traceback), as the framework asks.
    keeps_errors = True

    @property
    def schedulable(self) -> bool:  # type: ignore[override]
        """Jobs may target it only when the Django task opted in (``schedulable=True``)."""
        return _schedulable.get(self.name, False)

    @property
    def argument_signature(self) -> inspect.Signature | None:
        """The Django task's own parameters, which its runs' arguments must fit (the runner
        itself takes any): ``scheduling.rules.arguments.task_signature`` reads them."""
        return _signatures.get(self.name)


def register_runner(task: Any) -> str:
    """Make sure the Celery task that runs ``task`` exists; return its name (the module path)."""
    name = str(task.module_path)
    # ``@task_options`` makes the task again with its options: the last word counts.
    _schedulable[name] = bool(getattr(task, "schedulable", False))
    parameters_of(task)
    if name in _registered:
        return name

    def run(runner: Any, *args: Any, **kwargs: Any) -> Any:
        return run_django_task(runner, name, list(args), dict(kwargs))

    run.__module__ = task.func.__module__
    run.__qualname__ = run.__name__ = f"{task.func.__name__}_runner"
    shared_task(bind=True, name=name, base=DjangoTaskRunner, acks_late=True)(run)
    _registered.add(name)
    return name


def parameters_of(task: Any) -> inspect.Signature | None:
    """The parameters the Django task ``task`` takes from its caller (its context left out),
    read once per function: what an enqueue's and a job's arguments must fit."""
    name = str(task.module_path)
    if name not in _signatures:
        _signatures[name] = arguments.function_signature(
            task.func, takes_context=task.takes_context
        )
    return _signatures[name]


def _running_result(task: Any, runner: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The run as the framework's result, as a task that takes its context sees it and the
    signals carry it: the result ``get_result`` gives, with the task as enqueued. Built from
    what the attempt's start returned (``results.started_result``), so nothing is read between
    the start and the body. Without a start of its own (a call run eagerly, or outside the
    ledger) it is read from the ledger; where the ledger cannot say (no row, the database away
    for a moment), made from the message alone."""
    started = getattr(runner.request, "duecourse_started", None)
    if started is not None and started.created_at is not None:
        return started_result(
            started,
            task=task,
            alias=task.backend,
            result_id=str(runner.request.id),
            worker=runner.request.hostname or "",
            args=args,
            kwargs=kwargs,
        )
    try:
        run = runs.find_run(str(runner.request.id))
    except DatabaseError:
        run = None
    if run is not None and run.execution.status == ExecutionStatus.RUNNING:
        return result_of(run, task=task, alias=task.backend)
    context = runner.run_context
    now = timezone.now()
    attempt = context.attempt if context is not None else 1
    worker = runner.request.hostname or ""
    return TaskResult(
        task=task,
        id=str(runner.request.id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        errors=[],
        worker_ids=[worker] * attempt,
    )


def run_django_task(runner: Any, path: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Call the Django task at ``path`` with the run's arguments; see the module docstring."""
    task = import_string(path)
    if not isinstance(task, Task):
        raise PermanentError(f"task: {path!r} is not a Django task (declare it with @task)")
    backend = type(task.get_backend())
    result = _running_result(task, runner, args, kwargs)
    task_started.send(sender=backend, task_result=result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        value = _json_round_trip(value)
    except _CONTROL:
        raise
    except BaseException as exc:
        if worker_is_exiting(exc):
            raise  # the worker's shutdown, not the task's error: the run is handed back
        kind = type(exc)
        runner.request.duecourse_task_error = {
            "exception_class_path": f"{kind.__module__}.{kind.__qualname__}",
            "traceback": "".join(traceback.format_exception(exc)),
        }
        result.errors.append(TaskError(**runner.request.duecourse_task_error))
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        object.__setattr__(result, "finished_at", timezone.now())
        task_finished.send(sender=backend, task_result=result)
        raise
    runner.request.duecourse_result = {"value": value}
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    task_finished.send(sender=backend, task_result=result)
    return value


def _json_round_trip(value: Any) -> Any:
    """The return value as JSON gives it back, as the framework requires of results: through
    the framework's own ``normalize_json`` first, so a value it refuses fails the run with its
    own error (``TypeError("Unsupported type: ...")``), as on Django's backends."""
    value = normalize_json(value)
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"return value: must round-trip through JSON ({exc})") from None
