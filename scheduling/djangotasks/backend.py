"""Django's Tasks framework on the ledger: ``TASKS = {"default": {"BACKEND":
"scheduling.tasks_backend.DuecourseTaskBackend"}}``.

``enqueue`` writes the run into the ledger inside the caller's transaction and publishes it to
Celery once that transaction commits; the stock Celery workers run it as a ledger task (claimed
once, heartbeat, history), and ``get_result`` reads the ledger. docs/django-tasks.md has the
semantics side by side with the peers'.

Duecourse's own options for a task (retries, timeout, schedules) go in
``scheduling.api.task_options``, stacked above the framework's ``@task``
(``scheduling.djangotasks.options`` says why); they are fields of this backend's task class.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils.module_loading import import_string

from scheduling import conf
from scheduling.celeryapp import celery_app
from scheduling.djangotasks import enqueued as runs
from scheduling.djangotasks.framework import (
    DEFAULT_TASK_QUEUE_NAME,
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
)
from scheduling.djangotasks.options import DEFAULTS, options_problem
from scheduling.djangotasks.outbox import outbox
from scheduling.djangotasks.results import call_options, result_of
from scheduling.djangotasks.runner import parameters_of, register_runner
from scheduling.rules import arguments

#: The framework's range of priorities (``TASK_MIN_PRIORITY``, ``TASK_MAX_PRIORITY``).
MIN_PRIORITY, MAX_PRIORITY = -100, 100


@dataclass(frozen=True, slots=True, kw_only=True)
class DuecourseTask(Task):  # type: ignore[misc]
    """The framework's ``Task`` with Duecourse's options (``scheduling.djangotasks.options``).

    Django 6.1 and the backport also pass them through ``@task(max_retries=...)``; Django 6.0
    does not, so the documented way is ``@task_options`` above ``@task``, on every version.
    """

    max_retries: int = DEFAULTS["max_retries"]
    timeout: int | None = DEFAULTS["timeout"]
    schedulable: bool = DEFAULTS["schedulable"]

    def __post_init__(self) -> None:
        # Zero-argument super() does not work in a slotted dataclass.
        Task.__post_init__(self)
        problem = options_problem(
            max_retries=self.max_retries, timeout=self.timeout, schedulable=self.schedulable
        )
        if problem is not None:
            raise InvalidTask(problem)
        register_runner(self)


def broker_priority(priority: int, broker_url: str) -> int | None:
    """The framework's priority (-100 … 100, higher runs first) as the broker's.

    RabbitMQ: 0 … 9, higher first (the queue needs ``x-max-priority``). Redis: kombu's lanes
    run 0 first and put a message without a priority in lane 0 too, so priority 0 and above
    share the first lane and only a lower priority can be expressed (lanes 3, 6, 9). Other
    brokers: none.
    """
    if priority == 0:
        return None
    if broker_url.startswith(("amqp", "pyamqp")):
        return round((priority + 100) * 9 / 200)
    if broker_url.startswith(("redis", "rediss")):
        if priority > 0:
            return None
        return 3 if priority >= -33 else 6 if priority >= -66 else 9
    return None


class DuecourseTaskBackend(BaseTaskBackend):
    """Runs the framework's tasks on the project's Celery workers with Duecourse's ledger."""

    task_class = DuecourseTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def validate_task(self, task: Task) -> None:
        """The framework's checks, with the types it assumes checked first.

        The framework compares ``priority`` with its range, which raises TypeError on text
        (``.using(priority="high")``); it asks ``timezone.is_aware(task.run_after)``, which
        raises AttributeError on anything but a datetime (``.using(run_after=timedelta(
        seconds=5))``, a common slip); and it compares the queue name with its allowed set.
        Here a wrong type is the framework's own refusal, ``InvalidTask``, in its words.
        """
        priority = task.priority
        if isinstance(priority, bool) or not (
            isinstance(priority, int) or (isinstance(priority, float) and priority.is_integer())
        ):
            # The framework compares it with its range first: a bare TypeError for "high".
            raise InvalidTask(
                f"priority must be a whole number between {MIN_PRIORITY} and {MAX_PRIORITY}, "
                f"got {priority!r}"
            )
        run_after = task.run_after
        if run_after is not None and not isinstance(run_after, datetime):
            raise InvalidTask(
                f"run_after must be an aware datetime, got {type(run_after).__name__} "
                "(for a delay, give timezone.now() + the delay)"
            )
        if not isinstance(task.queue_name, str):
            raise InvalidTask(f"queue_name must be text, got {type(task.queue_name).__name__}")
        super().validate_task(task)

    def celery_queue(self, queue_name: str) -> str:
        """The framework's queue as a Celery queue: ``default`` is the app's default queue."""
        if queue_name == DEFAULT_TASK_QUEUE_NAME:
            return str(celery_app().conf.task_default_queue or "celery")
        return queue_name

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:  # type: ignore[override]
        self.validate_task(task)
        name = register_runner(task)
        call = self.call_of(task, name, args, kwargs)
        written = runs.write_run(task=name, call=call, run_after=task.run_after)
        result = self.result_of_written(task, written, call)
        bell = written.doorbell(task=name, call=call) if written.due_now else None

        def after_commit() -> None:
            if bell is not None:
                outbox.put(bell)
            task_enqueued.send(type(self), task_result=result)

        transaction.on_commit(after_commit)
        return result

    def call_of(
        self,
        task: Task,
        name: str,
        args: Any,
        kwargs: Any,
        *,
        within: tuple[int, int] | None = None,
    ) -> dict[str, Any]:
        """The run's ``call`` (everything its message needs), or InvalidTask naming the reason.

        ``task`` has passed ``validate_task``; ``name`` is its runner's (``register_runner``);
        ``within``: the arguments' limits (``arguments.limits()``), read once for many calls.
        """
        call_args, call_kwargs = _json_arguments(args, kwargs, within=within or arguments.limits())
        unfit = arguments.binding_error(parameters_of(task), call_args, call_kwargs, name=name)
        if unfit is not None:
            raise InvalidTask(f"Task {unfit[0]}: {unfit[1]}")
        broker_url = str(celery_app().conf.broker_url or "")
        return {
            **call_options(task, alias=self.alias),
            "args": call_args,
            "kwargs": call_kwargs,
            "queue": self.celery_queue(task.queue_name),
            "broker_priority": broker_priority(task.priority, broker_url),
            "max_retries": int(getattr(task, "max_retries", 0)),
            "timeout": getattr(task, "timeout", None) or int(conf.get("DEFAULT_TIMEOUT")),
        }

    def result_of_written(
        self, task: Task, written: runs.Written, call: dict[str, Any]
    ) -> TaskResult:
        """The framework's result of a run just written: READY, nothing attempted."""
        return TaskResult(
            task=task,
            id=written.task_id,
            status=TaskResultStatus.READY,
            enqueued_at=written.created_at,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=call["args"],
            kwargs=call["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

    def get_result(self, result_id: str) -> TaskResult:
        run = runs.find_run(result_id)
        if run is None:
            raise TaskResultDoesNotExist(result_id)
        path = run.execution.task
        try:
            task = import_string(path)
        except ImportError:
            raise TaskResultDoesNotExist(
                f"{result_id}: its task {path!r} can no longer be imported"
            ) from None
        if not isinstance(task, Task):
            raise TaskResultDoesNotExist(f"{result_id}: {path!r} is not a Django task")
        return result_of(run, task=task, alias=self.alias)


def _json_arguments(
    args: Any, kwargs: Any, *, within: tuple[int, int]
) -> tuple[list[Any], dict[str, Any]]:
    """The arguments as JSON gives them back, within ``scheduling.rules.arguments``' limits of
    depth and size.

    They go through the framework's own ``normalize_json`` first, so what the framework refuses
    raises its own error (``TypeError("Unsupported type: ...")`` for a date, an object, a set;
    ``ValueError`` for bytes that are not UTF-8), as on Django's backends. What the framework
    lets through but JSON would not give back as given is refused with ``InvalidTask``: a key
    that is not text (JSON would hand the task ``{"1": "a"}`` for ``{1: "a"}``), NaN or an
    infinity, and arguments past the depth or size limit.
    """
    call_args, call_kwargs = list(args), dict(kwargs)
    for name, value in (("args", call_args), ("kwargs", call_kwargs)):
        # Before the framework's conversion, which recurses: past the limit it would not return.
        depth = arguments.nesting_depth(value)
        if depth > within[0]:
            raise InvalidTask(f"Task {name} {arguments.problem(value, within)}")
    call_args, call_kwargs = normalize_json(call_args), normalize_json(call_kwargs)
    for name, value in (("args", call_args), ("kwargs", call_kwargs)):
        keys = arguments.key_problem(value)
        if keys is not None:
            raise InvalidTask(f"Task {name} {keys}")
    try:
        call_args = json.loads(json.dumps(call_args, allow_nan=False))
        call_kwargs = json.loads(json.dumps(call_kwargs, allow_nan=False))
    except ValueError as exc:
        raise InvalidTask(f"Task arguments must round-trip through JSON: {exc}") from None
    for name, value in (("args", call_args), ("kwargs", call_kwargs)):
        too_much = arguments.problem(value, within)
        if too_much is not None:
            raise InvalidTask(f"Task {name} {too_much}")
    return call_args, call_kwargs
