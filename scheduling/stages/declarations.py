"""Schedules declared in code, read: each entry the job it declares, or its refusal.

A project declares jobs in two places: Celery's ``beat_schedule`` (``CELERY_BEAT_SCHEDULE`` in
Django settings), each entry a job named after its key, and ``SCHEDULING_JOBS``, name -> the
options of ``jobs add`` as Python values. Both are read into those options
(``beat_schedules.timing_of`` translates a Celery schedule, the one translation
``import_beat`` uses too) and then through ``jobs add``'s own parser, option types and
``parse_job_options``, and the job's rules (``Job.full_clean``), so an entry is refused
exactly as the command line refuses it, in one line naming the entry and the option.

Nothing here writes a job: ``reconciliation`` compares what is read here with the ledger and
applies it (``jobs sync``, each scheduler's start); ``manage.py check`` reports the entries
refused (``code_refusals``); each process's set of entries is known by its fingerprint
(``set_fingerprint``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from scheduling import conf
from scheduling.celeryapp import celery_app
from scheduling.commandline.options import JOB_OPTION_NAMES, job_options_parser, parse_job_options
from scheduling.models import DeclaredIn, Job, Schedule
from scheduling.rules import permissions
from scheduling.rules.registry import CELERY_TASK_RUNNER, UnknownTask, get_registered
from scheduling.rules.validation import first_error, fit_errors
from scheduling.stages import audit, jobs
from scheduling.timing.beat_schedules import Unmappable, interval_of, timing_of

#: The keys a ``beat_schedule`` entry may have (Celery's own).
BEAT_KEYS = frozenset({"task", "schedule", "args", "kwargs", "options", "relative"})
#: A ``beat_schedule`` entry's ``options`` that a job holds, and the option each becomes.
BEAT_OPTIONS = {
    "queue": "queue",
    "priority": "priority",
    "expires": "expires",
    "time_limit": "timeout",
}
#: ``jobs add``'s options a ``SCHEDULING_JOBS`` entry may give, by their Python names.
OPTIONS = {
    "task": "--task",
    "args": "--args",
    "kwargs": "--kwargs",
    "every": "--every",
    "cron": "--cron",
    "rrule": "--rrule",
    "at": "--at",
    "tz": "--tz",
    "allow_past": "--allow-past",
    "start": "--start",
    "end": "--end",
    "max_retries": "--max-retries",
    "max_running": "--max-running",
    "pause_after_failures": "--pause-after-failures",
    "timeout": "--timeout",
    "jitter": "--jitter",
    "misfire": "--misfire",
    "overlap": "--overlap",
    "queue": "--queue",
    "priority": "--priority",
    "expires": "--expires",
    "note": "--note",
    "task_table": "--task-table",
    "task_row_id": "--task-row-id",
    "owner": "--owner",
}
#: A schedule's timing fields, as a declaration gives them.
TIMING = ("interval", "cron", "rrule", "timezone", "run_at", "starts_at", "ends_at")


@dataclass(frozen=True)
class Declaration:
    """One entry: where, under which key, and its options in ``jobs add``'s vocabulary."""

    origin: str
    key: str
    options: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.origin}[{self.key!r}]"


@dataclass(frozen=True)
class Refused:
    """An entry the engine cannot express, and why."""

    origin: str
    key: str
    reason: str

    @property
    def line(self) -> str:
        return f"{self.origin}[{self.key!r}]: {self.reason}"


@dataclass
class Desired:
    """The job an entry declares: unsaved, with the values the ledger's job is compared to."""

    declaration: Declaration
    job: Job
    target: jobs.Target
    policies: jobs.Policies
    declared_task: str
    values: dict[str, Any]
    fingerprint: str


# --- reading the declarations ---------------------------------------------------------------


def read_declarations(*, app: Any = None) -> tuple[list[Declaration], list[Refused]]:
    """Every entry of ``beat_schedule`` and ``SCHEDULING_JOBS`` as ``jobs add`` options; an
    entry that cannot be read is refused with its reason."""
    found: list[Declaration] = []
    refused: list[Refused] = []
    app = app or celery_app()
    beat = app.conf.beat_schedule or {}
    if not isinstance(beat, Mapping):
        refused.append(Refused(DeclaredIn.BEAT_SCHEDULE, "", "must be a dict of entries"))
        beat = {}
    for key, entry in beat.items():
        try:
            found.append(
                Declaration(DeclaredIn.BEAT_SCHEDULE, str(key), _beat_options(entry, app=app))
            )
        except Unmappable as exc:
            refused.append(Refused(DeclaredIn.BEAT_SCHEDULE, str(key), str(exc)))
    declared = conf.declared_jobs() or {}
    if not isinstance(declared, Mapping):
        refused.append(Refused(DeclaredIn.SCHEDULING_JOBS, "", "must be a dict: name -> options"))
        declared = {}
    for key, options in declared.items():
        if not isinstance(options, Mapping):
            refused.append(
                Refused(DeclaredIn.SCHEDULING_JOBS, str(key), "must be a dict of jobs add options")
            )
            continue
        found.append(Declaration(DeclaredIn.SCHEDULING_JOBS, str(key), dict(options)))
    return found, refused


def _beat_options(entry: Any, *, app: Any) -> dict[str, Any]:
    """A ``beat_schedule`` entry as ``jobs add`` options; Unmappable with the reason."""
    if not isinstance(entry, Mapping):
        raise Unmappable("must be a dict with task and schedule")
    unknown = sorted(set(entry) - BEAT_KEYS)
    if unknown:
        raise Unmappable(
            f"{unknown[0]!r} is not a key of a beat_schedule entry{_move_hint(unknown[0])}"
        )
    if not entry.get("task"):
        raise Unmappable("task: is required")
    if entry.get("relative"):
        raise Unmappable("relative: True (rounded to its period) has no equivalent")
    if "schedule" not in entry:
        raise Unmappable("schedule: is required")
    options: dict[str, Any] = {
        "task": entry["task"],
        "args": list(entry.get("args") or ()),
        "kwargs": dict(entry.get("kwargs") or {}),
        # Beat runs a late task once: as ``import_beat`` does, a late occurrence runs once.
        "misfire": "coalesce",
        **timing_of(entry["schedule"], app_zone=app.timezone),
    }
    for name, value in (entry.get("options") or {}).items():
        if name not in BEAT_OPTIONS:
            raise Unmappable(
                f"options: {name!r} has no equivalent in a job (it takes "
                f"{', '.join(BEAT_OPTIONS)}){_move_hint(name)}"
            )
        if name == "expires" and not isinstance(value, int | float):
            raise Unmappable("options: expires must be a number of seconds")
        if name in ("expires", "time_limit") and isinstance(value, float):
            value = int(value) if value.is_integer() else value
        options[BEAT_OPTIONS[name]] = value
    return options


def _move_hint(name: str) -> str:
    """What to do with a ``jobs add`` option a ``beat_schedule`` entry cannot give."""
    if name in OPTIONS:
        return f"; declare the entry in SCHEDULING_JOBS, which takes {name}"
    return ""


def _argv(options: dict[str, Any]) -> list[str]:
    """``jobs add``'s command line for ``options`` (Python values); ValueError naming an
    option ``jobs add`` does not take."""
    argv: list[str] = []
    for name, value in options.items():
        if name not in OPTIONS:
            raise ValueError(f"{name!r} is not an option of jobs add")
        if value is None:
            continue
        flag = OPTIONS[name]
        if name == "allow_past":
            if value is True:
                argv.append(flag)
            continue
        if name in ("args", "kwargs"):
            text = json.dumps(list(value) if isinstance(value, tuple) else value)
        elif isinstance(value, timedelta) and name == "every":
            seconds = value.total_seconds()
            text = interval_of(int(seconds), "seconds") if seconds.is_integer() else str(value)
        elif isinstance(value, timedelta):
            text = f"{value.total_seconds():g}"
        elif isinstance(value, datetime):
            text = value.isoformat()
        else:
            text = str(value)
        argv.append(f"{flag}={text}")
    return argv


def code_refusals(*, now: datetime) -> list[Refused]:
    """The entries the scheduler would refuse, as far as the code alone shows
    (``manage.py check``): ``desired_jobs``' own validation, without reading the ledger (an
    owner named, a task-table row are ``jobs sync --check``'s to say)."""
    return desired_jobs(now=now, reads_ledger=False)[1]


def desire(
    declaration: Declaration, *, now: datetime, reads_ledger: bool = True, writes: bool = True
) -> Desired:
    """The job ``declaration`` makes, checked as ``jobs add`` checks it; ValidationError
    with one line naming the option otherwise (``Unmappable`` for what cannot be read).

    Without ``reads_ledger`` (``manage.py check``) no query is made: the owner is an unsaved
    user of the name given, and a task-table row is not looked up. Without ``writes``
    (``jobs sync --dry-run``, ``--check``) the system owner is not created: an unsaved one
    stands in until a sync applies."""
    try:
        argv = _argv(declaration.options)
        o = vars(job_options_parser().parse_args(argv))
    except (ValueError, CommandError) as exc:
        raise ValidationError(str(exc)) from None
    o["action"] = "add"
    parsed = parse_job_options(o, now=now)
    if o["task_table"]:
        refused = permissions.internal_refusal(o["task_table"])
        if refused is not None:
            raise ValidationError({"task_table": refused})
    declared_task = ""
    if o["task"] and not o["task_table"]:
        try:
            task = get_registered(o["task"])
        except UnknownTask as exc:
            raise ValidationError({"task": str(exc)}) from None
        if o["task"].startswith("celery."):
            raise ValidationError({"task": builtin_refusal(o["task"])})
        if not getattr(task, "schedulable", False):
            # The code is the project's own: any task of its Celery app, run through the
            # runner, which records the execution like any other.
            unfit = fit_errors(task, parsed["args"] or [], parsed["kwargs"] or {})
            if unfit:
                raise ValidationError(unfit)
            declared_task, o["task"] = o["task"], CELERY_TASK_RUNNER
    if reads_ledger:
        if o["owner"]:
            owner = jobs.owner_for(o["owner"])
        elif writes:
            owner = jobs.system_owner()
        else:
            owner = get_user_model().objects.filter(
                username=jobs.SYSTEM_OWNER
            ).first() or get_user_model()(username=jobs.SYSTEM_OWNER, is_active=False)
    else:
        owner = get_user_model()(username=o["owner"] or jobs.SYSTEM_OWNER)
    timing = {
        name: value.astimezone(UTC) if isinstance(value, datetime) else value
        for name, value in parsed["timing"].items()
    }
    schedule = Schedule(owner=owner, **timing)
    schedule.allow_past = o["allow_past"]
    target = jobs.Target.of_options(o, parsed)
    policies = jobs.Policies.of_options(o, parsed)
    job = jobs.new_job(
        owner=owner,
        name=declaration.key,
        schedule=schedule,
        target=target,
        policies=policies,
        now=now,
    )
    row_id = job.task_row_id
    if not reads_ledger and row_id is not None:
        job.task_row_id = None  # its row is looked up in the ledger: the rest is checked
    errors: dict[str, list[str]] = {}
    for each, exclude in ((schedule, ["owner"]), (job, ["schedule", "owner"])):
        try:
            each.full_clean(
                exclude=exclude, validate_unique=False, validate_constraints=reads_ledger
            )
        except ValidationError as exc:
            for name, messages in exc.message_dict.items():
                known = errors.setdefault(name, [])
                known.extend(m for m in messages if m not in known)
    if row_id is not None and not reads_ledger:
        errors.pop("task_row_id", None)
        job.task_row_id = row_id
    if errors:
        raise ValidationError(errors)
    values = {**audit.snapshot(job), "declared_task": declared_task}
    text = json.dumps(values, sort_keys=True, default=str)
    return Desired(
        declaration=declaration,
        job=job,
        target=target,
        policies=policies,
        declared_task=declared_task,
        values=values,
        fingerprint=hashlib.sha256(text.encode()).hexdigest(),
    )


def builtin_refusal(name: str) -> str:
    """Why a declaration may not run one of Celery's own tasks."""
    return (
        f"{name!r} is one of Celery's built-in tasks, which no job runs (Celery runs them "
        "itself); remove the entry"
    )


def desired_jobs(
    *, now: datetime, app: Any = None, reads_ledger: bool = True, writes: bool = True
) -> tuple[list[Desired], list[Refused]]:
    """Every entry's job, and every entry refused with its one line (``desire``)."""
    declarations, refused = read_declarations(app=app)
    found: list[Desired] = []
    names: dict[str, str] = {}
    for declaration in declarations:
        other = names.get(declaration.key)
        if other is not None:
            reason = f"{other} declares a job of that name too; give one of them another name"
            refused.append(Refused(declaration.origin, declaration.key, reason))
            continue
        try:
            found.append(desire(declaration, now=now, reads_ledger=reads_ledger, writes=writes))
        except ValidationError as exc:
            reason = first_error(exc, options=JOB_OPTION_NAMES)
            refused.append(Refused(declaration.origin, declaration.key, reason))
            continue
        names[declaration.key] = declaration.where
    return found, refused


def set_fingerprint(*, app: Any = None) -> str:
    """The fingerprint of one process's declaration set: its entries as the code writes them
    (``read_declarations``: a Celery schedule by its translated timing, the rest by value), so
    the same code gives the same fingerprint at any time, against any ledger and whatever
    defaults fill a job's values in. Each entry's own ``Desired.fingerprint`` says whether its
    job is in step; this one only numbers the set."""
    declarations, refused = read_declarations(app=app)
    parts = sorted(
        [json.dumps([d.origin, d.key, _canonical(d.options)], sort_keys=True) for d in declarations]
        + [json.dumps([r.origin, r.key, "unreadable", r.reason]) for r in refused]
    )
    return hashlib.sha256("\x1e".join(parts).encode()).hexdigest()


def _canonical(value: Any) -> Any:
    """``value`` as JSON-ready data that is the same in every process."""
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_canonical(v) for v in value), key=lambda v: json.dumps(v, default=str))
    if isinstance(value, datetime):
        return ["datetime", value.isoformat()]
    if isinstance(value, timedelta):
        return ["timedelta", value.total_seconds()]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return ["repr", repr(value)]
