"""Many runs of one task in one write: ``scheduling.api.enqueue_many``.

A producer that makes work in bursts (an import, a fan-out over a customer list) would pay,
per ``enqueue``, a statement and its round trip. Here every call is checked first, exactly as
``enqueue`` checks one, and a refusal names the call by its position before anything is
written; the rows then go in as one multi-row INSERT in the caller's transaction, and their
messages are handed to the outbox when it commits, which publishes them together (one Redis
pipeline). A rollback takes every row with it, as it takes one enqueue's.

Two kinds of task take part:

- a Django task (``@task``, on ``DuecourseTaskBackend``): the framework's ``TaskResult`` for
  each call, in order, as ``enqueue`` returns them, and ``task_enqueued`` once per run after the
  commit. ``task.using(...)`` applies to every call (a ``run_after`` defers them all).
- a Celery task declared with ``@schedulable_task``: its runs are executions without a job,
  run and recorded as a job's are (retries, timeout, history in ``manage.py executions``); the
  execution ids come back, in order.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from celery import Task as CeleryTask
from django.core.exceptions import ValidationError
from django.db import transaction

from scheduling import conf
from scheduling.celeryapp import celery_app
from scheduling.djangotasks import enqueued as runs
from scheduling.djangotasks.backend import DuecourseTaskBackend
from scheduling.djangotasks.framework import InvalidTask, Task, TaskResult, task_enqueued
from scheduling.djangotasks.outbox import outbox
from scheduling.djangotasks.runner import register_runner
from scheduling.rules import arguments, validation

#: A call: positional arguments and keyword arguments.
Call = tuple[Sequence[Any], Mapping[str, Any]]
#: Retries after the first try of a Celery task's run, as a job's default.
DEFAULT_RETRIES = 3


def enqueue_many(task: Any, calls: Iterable[Call], **options: Any) -> list[Any]:
    """Every call of ``task`` as one run, written in one statement; see the module docstring.

    ``calls``: (args, kwargs) pairs. A Django task takes no ``options`` (``task.using(...)``
    sets them) and gives the framework's results; a schedulable Celery task takes ``queue``,
    ``max_retries`` (3 unless given), ``timeout`` (seconds) and ``run_after``, and gives the
    execution ids. Nothing is written unless every call is valid.
    """
    if isinstance(task, Task):
        if options:
            raise TypeError(
                f"a Django task takes its options from task.using(), not {sorted(options)}"
            )
        return enqueue_django_tasks(task, calls)
    if isinstance(task, CeleryTask):
        return enqueue_celery_tasks(task, calls, **options)
    raise TypeError(f"enqueue_many takes a Django task or a Celery task, got {task!r:.80}")


def enqueue_django_tasks(task: Task, calls: Iterable[Call]) -> list[TaskResult]:
    """Every call of the Django task ``task`` as a run; their results, in order."""
    backend = task.get_backend()
    if not isinstance(backend, DuecourseTaskBackend):
        raise InvalidTask(
            f"enqueue_many writes runs into Duecourse's ledger; {task.module_path} uses the "
            f"backend {type(backend).__name__!r}"
        )
    backend.validate_task(task)
    name = register_runner(task)
    prepared = []
    within = arguments.limits()
    for position, (args, kwargs) in enumerate(_pairs(calls)):
        try:
            prepared.append(backend.call_of(task, name, args, kwargs, within=within))
        except InvalidTask as exc:
            raise InvalidTask(f"calls[{position}]: {exc}") from None
    written = runs.write_runs(task=name, calls=prepared, run_after=task.run_after)
    results = [
        backend.result_of_written(task, one, call)
        for one, call in zip(written, prepared, strict=True)
    ]
    bells = [
        one.doorbell(task=name, call=call)
        for one, call in zip(written, prepared, strict=True)
        if one.due_now
    ]

    def after_commit() -> None:
        for bell in bells:
            outbox.put(bell)
        for result in results:
            task_enqueued.send(type(backend), task_result=result)

    transaction.on_commit(after_commit)
    return results


def enqueue_celery_tasks(
    task: CeleryTask,
    calls: Iterable[Call],
    *,
    queue: str | None = None,
    max_retries: int = DEFAULT_RETRIES,
    timeout: int | None = None,
    run_after: datetime | None = None,
) -> list[int]:
    """Every call of the schedulable Celery task ``task`` as a run; their execution ids."""
    name = str(getattr(task, "name", ""))
    unknown = validation.enqueued_error(name)
    if unknown:
        raise ValidationError({"task": unknown.removeprefix("task: ")})
    options = _celery_options(task, queue=queue, max_retries=max_retries, timeout=timeout)
    signature = arguments.task_signature(task)
    prepared = []
    within = arguments.limits()
    for position, (args, kwargs) in enumerate(_pairs(calls)):
        call_args, call_kwargs = _json_call(position, args, kwargs, within)
        unfit = arguments.binding_error(signature, call_args, call_kwargs, name=name)
        if unfit is not None:
            raise ValidationError({unfit[0]: f"calls[{position}]: {unfit[1]}"})
        prepared.append({"args": call_args, "kwargs": call_kwargs, **options})
    written = runs.write_runs(task=name, calls=prepared, run_after=run_after)
    bells = [
        one.doorbell(task=name, call=call)
        for one, call in zip(written, prepared, strict=True)
        if one.due_now
    ]
    transaction.on_commit(lambda: [outbox.put(bell) for bell in bells])
    return [one.execution_id for one in written]


def _pairs(calls: Iterable[Call]) -> list[tuple[Any, Any]]:
    """``calls`` as (args, kwargs) pairs, or TypeError naming the first that is not one."""
    pairs = []
    for position, call in enumerate(calls):
        if not isinstance(call, (tuple, list)) or len(call) != 2:
            raise TypeError(
                f"calls[{position}]: give each call as a pair (args, kwargs), got {call!r:.80}"
            )
        pairs.append((call[0], call[1]))
    return pairs


def _celery_options(
    task: CeleryTask, *, queue: str | None, max_retries: int, timeout: int | None
) -> dict[str, Any]:
    app = celery_app()
    chosen = queue or getattr(task, "queue", None) or app.conf.task_default_queue or "celery"
    problem = validation.queue_error(str(chosen)) if isinstance(chosen, str) else "not text"
    if problem:
        raise ValidationError({"queue": problem})
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ValidationError(
            {"max_retries": f"must be a whole number of 0 or more, got {max_retries!r:.40}"}
        )
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0
    ):
        raise ValidationError({"timeout": f"must be a positive whole number, got {timeout!r}"})
    return {
        "queue": chosen,
        "broker_priority": None,
        "max_retries": max_retries,
        "timeout": timeout or int(conf.get("DEFAULT_TIMEOUT")),
    }


def _json_call(
    position: int, args: Any, kwargs: Any, within: tuple[int, int]
) -> tuple[list[Any], dict[str, Any]]:
    """A Celery call's arguments as JSON gives them back, within the arguments' limits."""
    if not isinstance(args, (list, tuple)):
        raise ValidationError({"args": f"calls[{position}]: must be a list, got {args!r:.80}"})
    if not isinstance(kwargs, Mapping):
        raise ValidationError(
            {"kwargs": f"calls[{position}]: must be a mapping, got {kwargs!r:.80}"}
        )
    found: dict[str, Any] = {}
    for field, value in (("args", list(args)), ("kwargs", dict(kwargs))):
        reason = arguments.key_problem(value) or arguments.problem(value, within)
        if reason is None:
            try:
                found[field] = json.loads(json.dumps(value, allow_nan=False))
            except (TypeError, ValueError) as exc:
                reason = f"must round-trip through JSON: {exc}"
        if reason is not None:
            raise ValidationError({field: f"calls[{position}]: {reason}"})
    return found["args"], found["kwargs"]
