"""The rules of a valid job, in one place.

``Job.clean`` calls ``validate_job``; the admin (through model forms), the ``jobs`` command and
the services (through ``full_clean``) therefore refuse the same input with the same messages.
The scheduler calls ``check_target`` before each dispatch so a row that became bad later (its
task unregistered, its task-table row deleted) fails that occurrence instead of the tick.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import unicodedata
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError

from scheduling import conf
from scheduling.celeryapp import celery_app
from scheduling.rules import arguments, tasktables
from scheduling.rules.registry import (
    PermanentError,
    UnknownTask,
    get_ledger_task,
    get_schedulable,
)
from scheduling.rules.tasktables import TASK_ROW_TASK
from scheduling.timing import readable

if TYPE_CHECKING:
    from scheduling.models import Job

MAX_NOTE = 500
#: A pause reason or a cancel reason: what the ``pause_reason`` column holds.
MAX_REASON = 500
# Jitter spreads the jobs due at one instant over a short span; a day is far beyond any use.
MAX_JITTER = timedelta(days=1)
#: The highest message priority a job may ask for (AMQP's range; Redis maps it onto its own).
MAX_PRIORITY = 255

#: A queue name a broker takes as it is: letters and digits, then also ``. _ : -``. Anything
#: else (whitespace, a line break, ``/``, kombu's priority separator) could address a broker
#: key that is not a queue, or forge a header.
QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
MAX_QUEUE = 200
#: Names the brokers keep for themselves: kombu's Redis bindings and unacked bookkeeping,
#: RabbitMQ's ``amq.`` namespace, Celery's event and remote-control (pidbox) queues. A job
#: publishing there writes into the broker's own structures.
RESERVED_QUEUE_PREFIXES = ("_kombu.", "amq.", "celeryev.")
RESERVED_QUEUE_SUFFIXES = (".pidbox",)
RESERVED_QUEUES = frozenset({"unacked", "unacked_index", "unacked_mutex"})

#: Unicode characters no name, note or reason may hold, beyond the control characters
#: (category Cc) and lone surrogates (Cs): the line and paragraph separators, which end a line
#: in some log readers, and the bidirectional overrides and isolates, which make a name read
#: differently from how it is stored.
_LINE_AND_DIRECTION_MARKS = frozenset(
    "\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def control_character(text: str) -> str | None:
    """The first character of ``text`` no stored name may hold, described, or None.

    A line break in a job's name or a pause reason forges a line in the log
    (``job.paused job=7 reason=…``); NUL cannot be stored by PostgreSQL at all.
    """
    for position, char in enumerate(text):
        if char in _LINE_AND_DIRECTION_MARKS or unicodedata.category(char) in ("Cc", "Cs"):
            return f"U+{ord(char):04X} at position {position + 1}"
    return None


def text_error(value: Any, *, limit: int) -> str | None:
    """Why ``value`` cannot be stored as a name, note or reason (``limit`` characters), or None."""
    if not isinstance(value, str):
        return f"must be text, got {type(value).__name__}"
    if len(value) > limit:
        return f"is {len(value)} characters; the limit is {limit}"
    found = control_character(value)
    if found is not None:
        return f"holds a control character ({found}); use printable text on one line"
    return None


def check_reason(reason: Any, *, field: str = "reason") -> None:
    """Raise ValidationError naming ``field`` when a pause or cancel reason cannot be stored."""
    error = text_error(reason, limit=MAX_REASON)
    if error is not None:
        raise ValidationError({field: error})


def queue_line(name: Any) -> str:
    """``queue_error`` as the one line recorded on an occurrence that cannot be sent, or "".

    A row written before the rules, or behind them, would otherwise have its message written
    to whatever broker key its queue names: the claim and the republish loop fail it instead.
    """
    error = queue_error(name)
    return f"queue: {error}" if error else ""


def queue_error(name: Any) -> str | None:
    """Why ``name`` cannot be a job's queue, or None (see ``QUEUE_NAME``)."""
    if not isinstance(name, str) or not name.strip():
        return "must not be empty"
    if len(name) > MAX_QUEUE:
        return f"is {len(name)} characters; the limit is {MAX_QUEUE}"
    lowered = name.lower()
    if (
        lowered in RESERVED_QUEUES
        or lowered.startswith(RESERVED_QUEUE_PREFIXES)
        or lowered.endswith(RESERVED_QUEUE_SUFFIXES)
    ):
        return f"{name!r} is a name the broker keeps for its own use"
    if not QUEUE_NAME.fullmatch(name):
        return (
            f"{name!r} is not a queue name: use letters, digits and . _ : - "
            "(starting with a letter or digit)"
        )
    return None


def storable(text: str) -> bool:
    """Whether PostgreSQL can hold ``text`` at all (no NUL, no lone surrogate).

    Lookups by a name typed on the command line ask this first: no stored row can have a
    name that fails it, so the answer is "not found", not a database error.
    """
    return "\x00" not in text and not any(0xD800 <= ord(char) <= 0xDFFF for char in text)


def unstorable_text(value: Any) -> str | None:
    """The first string (or key) in JSON ``value`` that PostgreSQL's ``jsonb`` refuses, or None.

    ``jsonb`` cannot hold ``\\u0000``, and a lone surrogate is not UTF-8: either fails the
    save with a database error instead of a message. Walked without recursion.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not storable(item):
                return item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return None


def _real(value: Any) -> bool:
    """A number the model's own field check accepted (not text, not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


#: The sentence a refused past one-off ends with, where no door says better (the API, the
#: schedules' admin); the command line and the job form give their own (``Schedule.past_hint``).
PAST_RUN_AT_HINT = (
    "a one-off must be in the future; to run it at once, say so (Once(at, allow_past=True), "
    "jobs add --allow-past)"
)
PAST_RUN_AT_ADMIN_HINT = (
    "“Once at” must be in the future; to run the job now, save it with a later time and use "
    "“Run now” on its page"
)


def past_run_at_error(
    run_at: Any, *, now: datetime, previous: datetime | None = None, allow_past: bool = False
) -> str | None:
    """Why a one-off at ``run_at`` cannot be saved at ``now``, or None: it has passed.

    A one-off in the past would run at once with a lag of years; that is refused unless the
    caller says it is meant (``allow_past``). An instant up to ``SCHEDULING_MISFIRE_GRACE``
    ago counts as now: the scheduler itself counts an occurrence that late as on time, and a
    person typing "now" is a few seconds behind. The rule holds for a new one-off and a changed
    one only: a row saved earlier (``previous``, its stored value) whose instant has since
    passed stays saveable for any other change.
    """
    if allow_past or not isinstance(run_at, datetime) or run_at.tzinfo is None:
        return None
    if previous is not None and abs(run_at - previous) < timedelta(seconds=1):
        return None  # the stored instant, posted back by a form that shows whole seconds
    if run_at >= now - timedelta(seconds=conf.get("MISFIRE_GRACE")):
        return None
    return f"{readable.typed(run_at)} has already passed"


def parse_json_argument(raw: str, *, field: str, expect: type) -> Any:
    """Parse command-line JSON for ``args`` (a list) or ``kwargs`` (an object), within the
    limits of ``scheduling.rules.arguments``."""
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


def unknown_target(*, task: str, task_table: str, enqueued: bool = False) -> str:
    """The task (or task table) of a target this process does not know, or "".

    During a rolling deploy a process of the previous release meets jobs and executions of
    tasks only the new release declares (or declares schedulable): it leaves them for a
    process that knows them, for up to ``SCHEDULING_UNKNOWN_TASK_GRACE``, instead of failing
    them. Celery's own tasks (``celery.*``) are never schedulable in any release: a target
    naming one is simply invalid (``target_error``). An ``enqueued`` run (Django's Tasks
    framework, no job) needs its task to be a ledger task, not a schedulable one.
    """
    if task_table:
        try:
            tasktables.get(task_table)
        except LookupError:
            return task_table
        return ""
    if not task or task.startswith("celery."):
        return ""
    try:
        (get_ledger_task if enqueued else get_schedulable)(task)
    except UnknownTask:
        return task
    return ""


def awaiting_task_error(target: str, *, grace: float) -> str:
    """The reason an occurrence fails when no process that knows ``target`` took it in time."""
    return (
        f"task: no process that knows {target!r} took this occurrence within "
        f"SCHEDULING_UNKNOWN_TASK_GRACE ({grace:g} s); this one does not know it"
    )


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


def call_errors(task_name: str, args: Any, kwargs: Any) -> dict[str, str]:
    """``args`` or ``kwargs`` -> why the schedulable task ``task_name`` cannot be called with
    them (a parameter it does not have, too many, a required one missing); empty when it can.

    A message published from a row skips Celery's own check of a call, so a job that could
    never run is refused when it is made (``validate_job``), not failed at every occurrence.
    Anything that makes jobs (a door, a declaration in code) asks this, or ``Job.full_clean``.
    A task unknown here is ``check_target``'s to name; one whose parameters cannot be read,
    or declared with ``typing=False``, is not checked (``arguments.task_signature``).
    """
    try:
        task = get_schedulable(task_name)
    except UnknownTask:
        return {}
    return fit_errors(task, args, kwargs)


def fit_errors(task: Any, args: Any, kwargs: Any) -> dict[str, str]:
    """``call_errors`` for the Celery task ``task`` itself, already looked up."""
    signature = arguments.task_signature(task)
    found = arguments.binding_error(signature, args, kwargs, name=str(task.name))
    return dict([found]) if found else {}


def call_error(task_name: str, args: Any, kwargs: Any) -> str:
    """``call_errors`` as one line (``kwargs: missing required argument 'period'``), or ""."""
    return "; ".join(f"{f}: {r}" for f, r in call_errors(task_name, args, kwargs).items())


class ArgumentsDoNotFit(PermanentError):
    """A run's arguments do not fit its task's parameters (the task's code changed after its
    job was saved): retrying cannot fix it, so the run fails once, naming why."""


def check_run_arguments(task: Any, args: Any, kwargs: Any) -> None:
    """Raise ``ArgumentsDoNotFit`` naming the argument when ``task`` (a Celery task, about to
    run) cannot be called with ``args`` and ``kwargs``; the worker asks before the body."""
    unfit = fit_errors(task, args, kwargs)
    if unfit:
        raise ArgumentsDoNotFit("; ".join(f"{f}: {r}" for f, r in unfit.items()))


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
    if not isinstance(job.name, str) or not job.name.strip():
        errors["name"] = "must not be empty"
    elif (found := control_character(job.name)) is not None:
        errors["name"] = f"holds a control character ({found}); a name is one line of text"
    for field, expect in (("args", list), ("kwargs", dict)):
        value = getattr(job, field)
        try:
            _check_json_shape(value, field=field, expect=expect)
        except ValidationError as exc:
            errors.update(exc.message_dict)
            continue
        too_much = arguments.problem(value)
        if too_much is not None:
            errors[field] = too_much
            continue
        bad = _non_finite(value)
        text = unstorable_text(value)
        key = arguments.key_problem(value)
        if key is not None:
            errors[field] = key
        elif bad is not None:
            errors[field] = f"holds {bad!r}; JSON numbers must be finite (no NaN or Infinity)"
        elif text is not None:
            errors[field] = (
                f"holds {text!r}, which cannot be stored: no NUL (\\u0000) or lone "
                "surrogate (\\ud800-\\udfff) in JSON text"
            )
    if job.note:
        note_error = text_error(job.note, limit=MAX_NOTE)
        if note_error is not None:
            errors["note"] = note_error
    if _real(job.timeout):
        if job.timeout < 1:
            errors["timeout"] = "must be at least 1 second"
        else:
            limit = visibility_timeout()
            if limit is not None and job.timeout + conf.get("HARD_TIMEOUT_GRACE") >= limit:
                errors["timeout"] = (
                    f"{job.timeout}s plus the hard-kill grace must stay under the broker's "
                    f"visibility timeout ({limit}s), or Redis would redeliver running tasks"
                )
    if _real(job.max_retries) and job.max_retries < 0:
        errors["max_retries"] = "must be zero or more"
    if isinstance(job.jitter, timedelta) and job.jitter.total_seconds() < 0:
        errors["jitter"] = "must be zero or more"
    elif isinstance(job.jitter, timedelta) and job.jitter > MAX_JITTER:
        errors["jitter"] = _limit(MAX_JITTER)
    for field in ("retry_backoff", "retry_backoff_max"):
        value = getattr(job, field)
        if _real(value) and not 0 <= value <= conf.RETRY_DELAY_LIMIT:  # NaN fails both
            errors[field] = (
                f"must be a number of seconds from 0 to {conf.RETRY_DELAY_LIMIT:g} (a week)"
            )
    if _real(job.priority) and not 0 <= job.priority <= MAX_PRIORITY:
        errors["priority"] = f"must be between 0 and {MAX_PRIORITY}"
    queue_problem = queue_error(job.queue)
    if queue_problem is not None:
        errors["queue"] = queue_problem
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
        errors.update(call_errors(job.task, job.args, job.kwargs))
    # An unsaved schedule (a form building both) is cached on the job but has no id yet.
    if job.schedule_id is not None or type(job).schedule.is_cached(job):
        schedule = job.schedule
        # This job's due times are its schedule's occurrences plus its jitter: they must fit
        # the calendar too (a one-off at 9999-12-31 23:59 cannot take an hour of jitter).
        usable = "jitter" not in errors and isinstance(job.jitter, timedelta)
        try:
            schedule.check_timing(jitter=job.jitter if usable else timedelta(0))
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
