"""Schedules declared in code, reconciled with the ledger: ``reconcile`` is the one service.

A project declares jobs in two places: Celery's ``beat_schedule`` (``CELERY_BEAT_SCHEDULE`` in
Django settings), each entry a job named after its key, and ``SCHEDULING_JOBS``, name -> the
options of ``jobs add`` as Python values. Both are read into those options
(``beat_schedules.timing_of`` translates a Celery schedule, the one translation
``import_beat`` uses too) and then through ``jobs add``'s own parser, option types and
``parse_job_options``, and the job's rules (``Job.full_clean``), so an entry is refused
exactly as the command line refuses it, in one line naming the entry and the option.

``reconcile`` makes the ledger match: a new entry becomes a job (``create_job``), a changed
entry changes its job (``edit_job``, each field from and to in the audit trail, by
``CODE_ACTOR``), and a job whose entry is gone is paused with a reason that says so, its
history kept (its ``declared_fingerprint`` emptied: it is a person's job again). A job a
person made with a declaration's name is a conflict, adopted only when asked. It is run by
``manage.py jobs sync``, by each scheduler at start (``SCHEDULING_SYNC_ON_START``) and, to
report refused entries, by ``manage.py check``.

Rolling deploys: each process's declarations are one set, known by its fingerprint and
numbered when the ledger first sees it (``DeclarationSet.sequence``). A scheduler applies its
set at start only when no set with a higher number has been applied; ``jobs sync`` always
applies its set and makes it the newest. Reconciliations take one lock
(``ledger.declarations.lock_declarations``), so schedulers starting at once reconcile one
after the other and the later ones find nothing to change.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.db import transaction
from django.db.models import Max

from scheduling import conf
from scheduling.celeryapp import celery_app
from scheduling.commandline.options import JOB_OPTION_NAMES, job_options_parser, parse_job_options
from scheduling.ledger.engines import engine
from scheduling.models import (
    ChangeSource,
    DeclarationSet,
    DeclaredIn,
    Job,
    JobChangeAction,
    JobStatus,
    Schedule,
)
from scheduling.rules import permissions
from scheduling.rules.registry import CELERY_TASK_RUNNER, UnknownTask, get_registered
from scheduling.rules.validation import first_error, fit_errors
from scheduling.stages import audit, jobs
from scheduling.stages.audit import Actor
from scheduling.timing.beat_schedules import Unmappable, interval_of, timing_of

logger = logging.getLogger("scheduling")

#: Who reconciles, in the audit trail: the code, through its declarations.
CODE_ACTOR = Actor(who="code", source=ChangeSource.CODE)


def code_actor() -> Actor:
    """The code, through this process's declarations, and the account it runs as:
    ``code (os: deploy)`` (``jobs sync`` and a scheduler at start alike)."""
    return Actor(who=f"code (os: {audit.os_account()})"[: audit.MAX_WHO], source=ChangeSource.CODE)


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
_TIMING = ("interval", "cron", "rrule", "timezone", "run_at", "starts_at", "ends_at")


def removed_reason(origin: str) -> str:
    """The pause reason of a job whose entry is gone from the code."""
    return f"removed from {origin}: its declaration is gone from the code (history kept)"


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


@dataclass
class Change:
    """What reconciling does (or would do) to one entry's job."""

    action: str  # created, changed, disabled, adopted, unchanged, refused, conflict
    origin: str
    key: str
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    reason: str = ""

    @property
    def drift(self) -> bool:
        return self.action != "unchanged"

    @property
    def line(self) -> str:
        text = f"{self.action:9} {self.origin}[{self.key!r}]"
        if self.reason:
            text += f": {self.reason}"
        if self.fields:
            shown = ", ".join(
                f"{name} {audit.value_text(v.get('from'))} -> {audit.value_text(v.get('to'))}"
                for name, v in self.fields.items()
            )
            text += f" ({shown})"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "declared_in": self.origin,
            "key": self.key,
            "fields": self.fields,
            "reason": self.reason,
        }


@dataclass
class Report:
    """A reconciliation: each entry's change, and whether this process applied them."""

    changes: list[Change]
    applied: bool
    #: Why a scheduler at start left the ledger alone (an older declaration set), or "".
    skipped: str = ""
    #: The number of this process's declaration set (``DeclarationSet.sequence``), if seen.
    release: int | None = None

    @property
    def drift(self) -> list[Change]:
        return [c for c in self.changes if c.drift]

    @property
    def refused(self) -> list[Change]:
        return [c for c in self.changes if c.action in ("refused", "conflict")]

    def as_dict(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "skipped": self.skipped,
            "release": self.release,
            "changes": [c.as_dict() for c in self.changes],
        }


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


# --- comparing and applying -----------------------------------------------------------------


def _current(job: Job) -> dict[str, Any]:
    return {**audit.snapshot(job), "declared_task": job.declared_task}


def plan(found: list[Desired], refused: list[Refused], *, adopt: bool) -> list[Change]:
    """What reconciling would do, entry by entry (reads only)."""
    declared = {
        (job.declared_in, job.declared_key): job
        for job in Job.objects.select_related("schedule", "owner").exclude(declared_in="")
    }
    changes: list[Change] = []
    for desired in found:
        d = desired.declaration
        job = declared.pop((d.origin, d.key), None)
        if job is None:
            changes.append(_new(desired, adopt=adopt))
            continue
        fields = audit.differences(_current(job), desired.values)
        if not job.declared_fingerprint:
            changes.append(Change("adopted", d.origin, d.key, fields, "declared again"))
        elif fields:
            changes.append(Change("changed", d.origin, d.key, fields))
        else:
            changes.append(Change("unchanged", d.origin, d.key))
    for refusal in refused:
        declared.pop((refusal.origin, refusal.key), None)  # its job stays as it is
        changes.append(Change("refused", refusal.origin, refusal.key, reason=refusal.reason))
    for (origin, key), job in sorted(declared.items()):
        if job.declared_fingerprint:
            changes.append(Change("disabled", origin, key, reason=removed_reason(origin)))
    return changes


def _new(desired: Desired, *, adopt: bool) -> Change:
    d = desired.declaration
    made = list(Job.objects.select_related("owner").filter(name=d.key, declared_in=""))
    if not made:
        fields = {name: {"from": None, "to": value} for name, value in desired.values.items()}
        return Change("created", d.origin, d.key, fields)
    owners = ", ".join(sorted(job.owner.get_username() for job in made))
    if adopt and len(made) == 1:
        fields = audit.differences(_current(made[0]), desired.values)
        return Change("adopted", d.origin, d.key, fields, f"the job {owners} made")
    return Change(
        "conflict",
        d.origin,
        d.key,
        reason=f"{owners} made a job named {d.key!r} that is not declared; rename it, or run "
        f"`manage.py jobs sync --adopt` to let {d.where} own it",
    )


def _mark(job: Job, desired: Desired, *, release: int | None) -> None:
    Job.objects.filter(pk=job.pk).update(
        declared_in=desired.declaration.origin,
        declared_key=desired.declaration.key,
        declared_fingerprint=desired.fingerprint,
        declared_release=release,
        declared_task=desired.declared_task,
    )


def _apply(
    change: Change, desired: Desired | None, *, now: datetime, by: Actor, release: int | None
) -> None:
    """Do one entry's change, in the caller's transaction."""
    if change.action == "disabled":
        job = Job.objects.get(declared_in=change.origin, declared_key=change.key)
        jobs.pause_job(job=job, now=now, reason=removed_reason(change.origin), by=by)
        Job.objects.filter(pk=job.pk).update(declared_fingerprint="")
        return
    assert desired is not None
    d = desired.declaration
    if change.action == "created":
        job = jobs.create_job(
            owner=desired.job.owner,
            name=d.key,
            schedule=desired.job.schedule,
            target=desired.target,
            policies=desired.policies,
            now=now,
            by=by,
        )
        _mark(job, desired, release=release)
        return
    job = Job.objects.filter(declared_in=d.origin, declared_key=d.key).first()
    if job is None:  # adopting a person's job
        job = Job.objects.get(name=d.key, declared_in="")
        audit.record(
            job=job,
            action=JobChangeAction.CHANGED,
            by=by,
            now=now,
            changes={
                "declared_in": {"from": "", "to": d.origin},
                "declared_key": {"from": "", "to": d.key},
            },
        )
    editable = {
        name: getattr(desired.job, name)
        for name in change.fields
        if name in jobs.EDITABLE and name != "name"
    }
    timing = None
    if any(name in _TIMING for name in change.fields):
        timing = {name: getattr(desired.job.schedule, name) for name in _TIMING}
    if editable or timing:
        jobs.edit_job(
            job=job, now=now, timing=timing, by=by, allow_past=True, as_declared=True, **editable
        )
    _mark(job, desired, release=release)
    job.refresh_from_db()
    if job.status == JobStatus.PAUSED and job.pause_reason == removed_reason(d.origin):
        jobs.resume_job(job=job, now=now, by=by)


def _seen(fingerprint: str, *, entries: int, now: datetime) -> DeclarationSet:
    """This set's row, numbered after every other when the ledger first sees it."""
    found = DeclarationSet.objects.filter(fingerprint=fingerprint).first()
    if found is not None:
        return found
    top = DeclarationSet.objects.aggregate(top=Max("sequence"))["top"] or 0
    return DeclarationSet.objects.create(
        fingerprint=fingerprint, sequence=top + 1, entries=entries, first_seen_at=now
    )


def reconcile(
    *,
    now: datetime,
    apply: bool,
    adopt: bool = False,
    on_start: bool = False,
    by: Actor = CODE_ACTOR,
    app: Any = None,
) -> Report:
    """Make the ledger match the declarations (``apply``), or say how it differs.

    ``on_start`` (a scheduler starting): a conflict or a refused entry is left alone and
    logged, and nothing is written when a newer declaration set has been applied. Otherwise
    (``jobs sync``) a conflict refuses the whole reconciliation, naming it (ValidationError),
    and the set applied becomes the newest. Without ``apply`` nothing is written.
    """
    found, refused = desired_jobs(now=now, app=app, writes=apply)
    by_key = {(d.declaration.origin, d.declaration.key): d for d in found}
    if not apply:
        return Report(changes=plan(found, refused, adopt=adopt), applied=False)
    fingerprint = set_fingerprint(app=app)
    with transaction.atomic():
        engine().lock_declarations()
        seen = _seen(fingerprint, entries=len(found) + len(refused), now=now)
        newest = (
            DeclarationSet.objects.filter(applied_at__isnull=False).order_by("-sequence").first()
        )
        if on_start and newest is not None and newest.sequence > seen.sequence:
            skipped = (
                f"declaration set #{seen.sequence} is older than #{newest.sequence}, already "
                "applied: this process changes nothing (docs/operations.md, Rolling deploys)"
            )
            return Report(changes=[], applied=False, skipped=skipped, release=seen.sequence)
        changes = plan(found, refused, adopt=adopt)
        conflicts = [c for c in changes if c.action == "conflict"]
        if conflicts and not on_start:
            first = conflicts[0]
            raise ValidationError({"name": f"{first.origin}[{first.key!r}]: {first.reason}"})
        if not on_start:
            # Applied by hand (a rollback included): this set is the newest from now on.
            top = DeclarationSet.objects.aggregate(top=Max("sequence"))["top"] or 0
            if seen.sequence < top:
                seen.sequence = top + 1
        for change in changes:
            if change.action in ("unchanged", "refused", "conflict"):
                continue
            try:
                with transaction.atomic():
                    _apply(
                        change,
                        by_key.get((change.origin, change.key)),
                        now=now,
                        by=by,
                        release=seen.sequence,
                    )
            except ValidationError as exc:
                change.action = "refused"
                change.reason = first_error(exc, options=JOB_OPTION_NAMES)
        seen.applied_at = now
        seen.save(update_fields=["sequence", "applied_at"])
    for change in changes:
        if change.action in ("refused", "conflict"):
            logger.error("declarations.refused %s", change.line)
        elif change.drift:
            logger.info("declarations.%s %s", change.action, change.line)
    return Report(changes=changes, applied=True, release=seen.sequence)


def sync_on_start(*, now: datetime, app: Any = None) -> Report | None:
    """A scheduler's start: ``reconcile`` when ``SCHEDULING_SYNC_ON_START`` is on. A failure
    is logged and the scheduler goes on (its loop waits out a database that is away)."""
    if not conf.get("SYNC_ON_START"):
        return None
    try:
        report = reconcile(now=now, apply=True, on_start=True, app=app, by=code_actor())
    except Exception:
        logger.exception("declarations.sync_failed")
        return None
    if report.skipped:
        logger.info("declarations.skipped %s", report.skipped)
    return report
