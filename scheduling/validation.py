"""The rules of a valid job, in one place.

``Job.clean`` calls ``validate_job``; the admin (through model forms), the ``jobs`` command and
the services (through ``full_clean``) therefore refuse the same input with the same messages.
The scheduler calls ``check_target`` before each dispatch so a row that became bad later (its
task unregistered, its task-table row deleted) fails that occurrence instead of the tick.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError

from scheduling import arguments, conf, tasktables
from scheduling.celeryapp import celery_app
from scheduling.registry import UnknownTask, get_ledger_task, get_schedulable
from scheduling.tasktables import TASK_ROW_TASK

if TYPE_CHECKING:
    from scheduling.models import Job

MAX_NOTE = 500
# Jitter spreads the jobs due at one instant over a short span; a day is far beyond any use.
MAX_JITTER = timedelta(days=1)


def parse_json_argument(raw: str, *, field: str, expect: type) -> Any:
    """Parse command-line JSON for ``args`` (a list) or ``kwargs`` (an object), within the
    limits of ``scheduling.arguments``."""
    try:
        value = arguments.decode(raw)
    except arguments.Unreadable as exc:
        raise ValidationError(
            {field: f"is {exc}; the limit is {arguments.limits()[0]} levels"}
        ) from None
    except json.JSONDecodeError as exc:
        raise ValidationError(
            {field: f"is not valid JSON ({exc.msg} at position {exc.pos})"}
        ) from None
    _check_json_shape(value, field=field, expect=expect)
    too_much = arguments.problem(value)
    if too_much is not None:
        raise ValidationError({field: too_much})
    return value


def parse_seconds(raw: str, *, field: str, maximum: timedelta) -> timedelta:
    """A command-line number of seconds (``--jitter 2.5``) as a timedelta, within the limit."""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValidationError({field: f"{raw!r} is not a number of seconds"})
    if value < 0:
        raise ValidationError({field: "must be zero or more"})
    if value > maximum.total_seconds():
        raise ValidationError({field: _limit(maximum)})
    return timedelta(seconds=value)


def _limit(maximum: timedelta) -> str:
    return f"must be at most {maximum.total_seconds():g} seconds"


def _check_json_shape(value: Any, *, field: str, expect: type) -> None:
    if not isinstance(value, expect):
        shape = 'a JSON list such as [1, "a"]' if expect is list else 'a JSON object like {"k": 1}'
        raise ValidationError({field: f"must be {shape}, got {type(value).__name__}"})


def _non_finite(value: Any) -> float | None:
    """The first NaN or infinite number anywhere in ``value``, or None.

    Python's JSON reads ``NaN`` and ``Infinity`` (and ``1e999``), but JSON has no such
    numbers: PostgreSQL refuses them in ``jsonb`` and a worker could not send them on.
    Walked without recursion, as a value may be nested past the call stack's depth.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return item
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None


def argument_errors(args: Any, kwargs: Any) -> dict[str, str]:
    """Field -> reason for ``args`` that is not a list or ``kwargs`` that is not an object.

    The same rule as ``validate_job``, on plain values: the claim and the republish loop check
    rows that may have been written behind the model (by raw SQL).
    """
    errors: dict[str, str] = {}
    for field, value, expect in (("args", args, list), ("kwargs", kwargs, dict)):
        try:
            _check_json_shape(value, field=field, expect=expect)
        except ValidationError as exc:
            errors.update({k: " ".join(v) for k, v in exc.message_dict.items()})
        else:
            too_much = arguments.problem(value)
            if too_much is not None:
                errors[field] = too_much
    return errors


def arguments_error(args: Any, kwargs: Any) -> str:
    """``argument_errors`` as the one line recorded on a row that cannot be sent, or ""."""
    errors = argument_errors(args, kwargs)
    return "; ".join(f"{field}: {reason}" for field, reason in errors.items())


def enqueued_error(task: str) -> str:
    """Why a run enqueued through Django's Tasks framework cannot be sent, or ""."""
    try:
        get_ledger_task(task)
    except UnknownTask as exc:
        return f"task: {exc}"
    return ""


def target_error(*, task: str, task_table: str, task_row_id: int | None) -> str:
    """``check_target_values`` as the one line recorded on a row that cannot be sent, or "".

    The claim records it on a due job's execution and the republish loop on an execution row
    it would publish again, so both refuse a task that is not schedulable in the same words.
    """
    try:
        check_target_values(task=task, task_table=task_table, task_row_id=task_row_id)
    except ValidationError as exc:
        return "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
    return ""


def call_error(task_name: str, args: list[Any], kwargs: dict[str, Any]) -> str:
    """Why the task cannot be called with these arguments (a missing or unknown parameter),
    or "": Celery's own check of a call (``task.__header__``, what ``apply_async`` asks), which
    a message published from a row skips, so that a job that can never run is refused when it
    is made, not failed at every occurrence. A task without that check (a class-based one, or
    one with ``typing=False``) is not checked, as Celery does not check it either.
    """
    try:
        task = get_schedulable(task_name)
    except UnknownTask:
        return ""
    header = getattr(task, "__header__", None)
    if header is None or not getattr(task, "typing", True):
        return ""
    try:
        header(*args, **kwargs)
    except TypeError as exc:
        reason = str(exc)
    else:
        return ""
    try:  # the same refusal in the caller's terms (no ``self``), where the signature says it
        signature = inspect.signature(task.run, follow_wrapped=False)
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        return f"do not fit {task_name}({_parameters(signature)}): {exc}"
    except ValueError:
        pass
    return f"do not fit {task_name}: {reason}"


def _parameters(signature: inspect.Signature) -> str:
    """``seconds=1.0, *items`` : the parameters as a caller writes them, without annotations."""
    shown = []
    for parameter in signature.parameters.values():
        stars = {parameter.VAR_POSITIONAL: "*", parameter.VAR_KEYWORD: "**"}.get(parameter.kind, "")
        default = "" if parameter.default is parameter.empty else f"={parameter.default!r}"
        shown.append(f"{stars}{parameter.name}{default}")
    return ", ".join(shown)


def task_row_model(label: str) -> Any:
    """The registered task-table model ``app_label.Model``, or LookupError with the reason."""
    return tasktables.get(label).model


def check_target(job: Job) -> None:
    """Raise ValidationError if the job's target cannot run now (see the module docstring)."""
    check_target_values(task=job.task, task_table=job.task_table, task_row_id=job.task_row_id)


def check_target_values(*, task: str, task_table: str, task_row_id: int | None) -> None:
    """``check_target`` on plain values, for the claim's hot path."""
    errors: dict[str, str] = {}
    if not task:
        errors["task"] = "is required: a schedulable Celery task (or a task table row)"
    else:
        try:
            get_schedulable(task)
        except UnknownTask as exc:
            errors["task"] = str(exc)
    if task == TASK_ROW_TASK and not task_table:
        errors["task"] = (
            f"{TASK_ROW_TASK!r} runs task-table rows; give a task table and row id instead"
        )
    if task_table and task and task != TASK_ROW_TASK:
        errors["task"] = (
            f"a job with a task table runs {TASK_ROW_TASK!r}, which reads the row; got {task!r}"
        )
    if task_table:
        try:
            model = task_row_model(task_table)
        except LookupError as exc:
            errors["task_table"] = str(exc)
        else:
            if task_row_id is None:
                errors["task_row_id"] = "is required with a task table: the id of the row to run"
            elif not model._default_manager.filter(pk=task_row_id).exists():
                errors["task_row_id"] = f"no {task_table} row with id {task_row_id}"
    elif task_row_id is not None:
        errors["task_table"] = "is required when task_row_id is set"
    if errors:
        raise ValidationError(errors)


def validate_job(job: Job) -> None:
    """Every rule of a valid job beyond what the fields check themselves."""
    errors: dict[str, Any] = {}
    if not (job.name or "").strip():
        errors["name"] = "must not be empty"
    for field, expect in (("args", list), ("kwargs", dict)):
        value = getattr(job, field)
        try:
            _check_json_shape(value, field=field, expect=expect)
        except ValidationError as exc:
            errors.update(exc.message_dict)
            continue
        too_much = arguments.problem(value)
        bad = None if too_much else _non_finite(value)
        if too_much is not None:
            errors[field] = too_much
        elif bad is not None:
            errors[field] = f"holds {bad!r}; JSON numbers must be finite (no NaN or Infinity)"
    if job.note and len(job.note) > MAX_NOTE:
        errors["note"] = f"is {len(job.note)} characters; the limit is {MAX_NOTE}"
    if job.timeout is not None:
        if job.timeout < 1:
            errors["timeout"] = "must be at least 1 second"
        else:
            limit = visibility_timeout()
            if limit is not None and job.timeout + conf.get("HARD_TIMEOUT_GRACE") >= limit:
                errors["timeout"] = (
                    f"{job.timeout}s plus the hard-kill grace must stay under the broker's "
                    f"visibility timeout ({limit}s), or Redis would redeliver running tasks"
                )
    if job.max_retries is not None and job.max_retries < 0:
        errors["max_retries"] = "must be zero or more"
    if job.jitter is not None and job.jitter.total_seconds() < 0:
        errors["jitter"] = "must be zero or more"
    elif job.jitter is not None and job.jitter > MAX_JITTER:
        errors["jitter"] = _limit(MAX_JITTER)
    for field in ("retry_backoff", "retry_backoff_max"):
        value = getattr(job, field)
        if value is not None and value < 0:
            errors[field] = "must be zero or more"
    if job.priority is not None and not 0 <= job.priority <= 255:
        errors["priority"] = "must be between 0 and 255"
    if not (job.queue or "").strip():
        errors["queue"] = "must not be empty"
    if job.task_table:
        # Stored as registered, whatever case it was typed in: a row's delete finds its jobs
        # by this label.
        with contextlib.suppress(LookupError):  # check_target says so
            job.task_table = tasktables.get(job.task_table).label
    try:
        check_target(job)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if not errors.keys() & {"task", "args", "kwargs"} and not job.task_table:
        mismatch = call_error(job.task, job.args, job.kwargs)
        if mismatch:
            errors["args" if job.args and not job.kwargs else "kwargs"] = mismatch
    # An unsaved schedule (a form building both) is cached on the job but has no id yet.
    if job.schedule_id is not None or type(job).schedule.is_cached(job):
        schedule = job.schedule
        try:
            schedule.clean()
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)


def visibility_timeout() -> int | None:
    """The broker's redelivery timeout, for brokers that have one (Redis, SQS).

    Read from the host's Celery app, which is what the workers obey, however the host
    configured it.
    """
    celery_conf = celery_app().conf
    url = str(celery_conf.broker_url or "")
    if not url.startswith(("redis", "rediss", "sqs")):
        return None
    options = celery_conf.broker_transport_options or {}
    return int(options.get("visibility_timeout", 3600))


def first_error(exc: ValidationError, *, options: dict[str, str] | None = None) -> str:
    """One line naming each field and its reason, for command-line output.

    ``options`` maps a field to the command-line option that set it, so ``--every PT0S`` is
    reported as ``interval (--every): …``.
    """
    if hasattr(exc, "error_dict"):
        parts = []
        for field, errors in exc.error_dict.items():
            name = "input" if field == "__all__" else field
            if options and field in options:
                name = f"{name} ({options[field]})"
            parts.append(f"{name}: {_reason(errors)}")
        return "; ".join(parts)
    return "; ".join(exc.messages)


def _reason(errors: list[ValidationError]) -> str:
    """The field's reason, said once.

    A field can fail both Django's generic validator ("Ensure this value is greater than or
    equal to 1.", which has a ``code``) and the rule in ``validate_job`` that says the same
    thing in our words (no code); ours is kept, and distinct reasons are joined with "; ".
    """
    ours = [e for e in errors if e.code is None] or errors
    messages: list[str] = []
    for error in ours:
        for message in error.messages:
            if message not in messages:
                messages.append(message)
    return "; ".join(messages)
