"""Job lifecycle: make, edit, plan, pause, resume, run now, retry, cancel and remove jobs.

The command line, the admin and ``scheduling.api`` all come here: one constructor
(``create_job``) and one function per verb (``edit_job``, ``edit_schedule``, ``pause_job``,
``resume_job``, ``run_job_now``, ``cancel_job``, ``cancel_execution``, ``retry_failed``,
``retry_execution``, ``remove_job``, ...), each taking the job itself; callers that hold an
id look the job up first. A job made by any of them passes the same rules (``Job.clean``) and
gets its first occurrence planned the same way. A job is described by three values: its
target (a schedulable task with arguments, or a task-table row), its timing (a ``Schedule``)
and its policies.

Every verb takes ``by`` (an ``audit.Actor``: who, and through which door) and writes its
row of the audit trail in the transaction of its change; ``by`` None is code
(``audit.CODE``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from scheduling import conf
from scheduling.ledger.engines import engine
from scheduling.models import (
    EXECUTION_UNFINISHED,
    Attempt,
    DeclaredIn,
    Execution,
    ExecutionStatus,
    Job,
    JobChangeAction,
    JobStatus,
    Overlap,
    PauseKind,
    Schedule,
)
from scheduling.rules import permissions
from scheduling.rules.tasktables import TASK_ROW_TASK
from scheduling.rules.validation import check_reason, check_target, storable
from scheduling.stages import attempts, audit, pauses, selectors
from scheduling.stages.audit import Actor
from scheduling.timing import schedules
from scheduling.timing.schedules import FiringRule, Misfire

logger = logging.getLogger("scheduling")

#: Username of the owner of jobs made by the system (code without an owner).
SYSTEM_OWNER = "duecourse-system"


@dataclass(frozen=True)
class Target:
    """What a job runs: a schedulable task with JSON arguments, or a task-table row."""

    task: str = ""
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    task_table: str = ""
    task_row_id: int | None = None

    @classmethod
    def of_options(cls, o: dict[str, Any], parsed: dict[str, Any]) -> Target:
        """The target ``jobs add``'s options give (``o``, read by ``cli.parse_job_options``
        into ``parsed``); the declarations in code are read through the same options."""
        return cls(
            task=o["task"],
            args=[] if parsed["args"] is None else parsed["args"],
            kwargs={} if parsed["kwargs"] is None else parsed["kwargs"],
            task_table=o["task_table"],
            task_row_id=o["task_row_id"],
        )


@dataclass(frozen=True)
class Policies:
    """How a job runs: retries, limits, placement and what to do with missed occurrences.

    ``None`` takes the setting's default (``SCHEDULING_DEFAULT_MAX_RETRIES``, ...). ``expires``
    (seconds) skips an attempt that would begin more than that long after the occurrence's due
    time, with the reason recorded, instead of running it late.
    """

    max_retries: int | None = None
    timeout: int | None = None
    retry_backoff: float | None = None
    retry_backoff_max: float | None = None
    jitter: timedelta = timedelta(0)
    misfire: str = Misfire.CATCH_UP.value
    overlap: str = Overlap.FORBID.value
    queue: str = "celery"
    priority: int | None = None
    expires: int | None = None
    note: str = ""
    #: Most of this job's executions running at once (None: no limit; ``scheduling.stages.limits``).
    max_running: int | None = None
    #: Pause the job after this many failed occurrences in a row (None: never;
    #: ``scheduling.stages.failures``).
    pause_after_failures: int | None = None

    @classmethod
    def given(cls, **values: Any) -> Policies:
        """Policies from optional values (command-line flags, an imported row): a value left
        None takes its default, so a caller passes what it was given without sorting it."""
        return cls(**{name: value for name, value in values.items() if value is not None})

    @classmethod
    def of_options(cls, o: dict[str, Any], parsed: dict[str, Any]) -> Policies:
        """The policies ``jobs add``'s options give (see ``Target.of_options``)."""
        return cls.given(
            max_retries=o["max_retries"],
            max_running=o["max_running"] or None,
            pause_after_failures=o["pause_after_failures"] or None,
            timeout=o["timeout"],
            jitter=parsed["jitter"],
            misfire=o["misfire"],
            overlap=o["overlap"],
            queue=o["queue"],
            priority=o["priority"],
            expires=o["expires"],
            note=o["note"],
        )


@dataclass(frozen=True)
class JobInfo:
    """A job as domain code sees it: plain values, no ORM row."""

    id: int
    name: str
    owner: str
    status: str
    task: str
    task_table: str
    task_row_id: int | None
    schedule: str
    next_due_at: datetime | None
    execute_count: int
    #: Its name as people read it: a job a domain app made for a row without a name
    #: (``emailer.SendEmailTask:3:1``) by that row in its app's words (``selectors.job_titles``).
    title: str = ""

    @property
    def next_due(self) -> datetime | None:
        """When it fires next; None when it is paused (not due) or completed."""
        return pauses.next_due(self)

    @property
    def not_due_word(self) -> str:
        """What to show in place of ``next_due`` when there is none: "paused", "completed"."""
        return pauses.not_due_word(self)

    @classmethod
    def of(cls, job: Job, *, title: str | None = None) -> JobInfo:
        """``job`` as plain values; ``title`` when the caller read the titles of many at once."""
        return cls(
            id=job.pk,
            name=job.name,
            owner=job.owner.get_username(),
            status=job.status,
            task=job.task,
            task_table=job.task_table,
            task_row_id=job.task_row_id,
            schedule=job.schedule.describe(),
            next_due_at=job.next_due_at,
            execute_count=job.execute_count,
            title=selectors.job_titles([job])[job.pk] if title is None else title,
        )


@dataclass(frozen=True)
class ExecutionInfo:
    """One occurrence's history as domain code sees it."""

    id: int
    job_id: int | None
    scheduled_for: datetime
    status: str
    retry_count: int
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None
    last_error: str
    checkpoint: Any


def system_owner() -> Any:
    """The inactive user that owns jobs made by code without an owner (cannot log in)."""
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(
        username=SYSTEM_OWNER, defaults={"is_active": False}
    )
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


def owner_for(username: str | None, *, create: bool = True) -> Any:
    """The owning user for the command line: ``username``, else the first superuser, else
    a ``scheduler`` user, made here unless ``create`` is False (a dry run writes nothing:
    it gets that user unsaved, which owns nothing yet)."""
    user_model = get_user_model()
    if username:
        found = user_model.objects.filter(username=username).first() if storable(username) else None
        if found is None:
            raise ValidationError({"owner": f"no user named {username!r}"})
        return found
    user = user_model.objects.filter(is_superuser=True).order_by("pk").first()
    if user is None:
        user = user_model.objects.filter(username="scheduler").first()
    if user is None:
        user = user_model(username="scheduler")
        if create:
            user.save()
    return user


def create_job(
    *,
    owner: Any,
    name: str,
    schedule: Schedule,
    target: Target,
    policies: Policies,
    now: datetime,
    query_constraints: bool = True,
    by: Actor | None = None,
    dry_run: bool = False,
) -> Job:
    """Validate and save a job (and its schedule unless it is saved), planned from ``now``.

    The one way a job is made: the API, the admin's add form, ``jobs add``, ``import_beat`` and
    ``loaddemo`` each turn their input into these values and call this, so every job passes
    the same rules (``Job.clean``, ``scheduling.rules.validation``) and gets its first occurrence
    planned the same way. ``schedule`` is a new, unsaved one (saved here, its owner the job's)
    or an existing one to share. Every reason is collected before anything is saved, each
    field named once.

    ``query_constraints=False`` skips Django's check-constraint validation, one SELECT and two
    savepoints per constraint, for jobs made from code by the API: their values come from
    typed ``Policies`` and timing values, ``clean`` still checks every rule behind the
    constraints, and the database still enforces them on insert.

    ``by`` is who makes it, for the audit trail (``scheduling.stages.audit``; code when None),
    written as ``created`` with the first values in the same transaction.

    ``dry_run`` validates the same and returns the job unsaved: nothing is written, so no id
    (a sequence on PostgreSQL) is taken and nothing is logged as created.
    """
    job = new_job(
        owner=owner, name=name, schedule=schedule, target=target, policies=policies, now=now
    )
    # Kept as ValidationError instances: their codes tell Django's generic messages from ours.
    errors: dict[str, list[ValidationError]] = {}
    if schedule.pk is None:
        if owner is not None:
            schedule.owner = owner  # a new schedule is its job's owner's
        try:
            schedule.full_clean(exclude=["owner"], validate_constraints=query_constraints)
        except ValidationError as exc:
            errors.update(exc.error_dict)
    try:
        job.full_clean(
            exclude=["schedule", "owner"],
            validate_unique=False,
            validate_constraints=query_constraints,
        )
    except ValidationError as exc:
        for name_, found in exc.error_dict.items():
            # Job.clean validates the schedule again; say each reason once.
            known = errors.setdefault(name_, [])
            said = {message for error in known for message in error.messages}
            known.extend(error for error in found if not set(error.messages) <= said)
    saved_owner = owner is not None and owner.pk is not None
    if saved_owner and name and Job.objects.filter(owner=owner, name=name).exists():
        errors.setdefault("name", []).append(
            ValidationError(f"{owner} already has a job named {name!r}")
        )
    if errors:
        raise ValidationError(errors)
    if dry_run:
        return job
    with transaction.atomic():
        if schedule.pk is None:
            schedule.save()
        job.schedule = schedule
        job.save()
        plan_from(job, schedule.timing(), now=now, first=True)
        job.save()
        audit.created(job=job, by=by or audit.CODE, now=now)
    logger.info("job.created job=%s name=%s next_due_at=%s", job.pk, job.name, job.next_due_at)
    return job


def new_job(
    *, owner: Any, name: str, schedule: Schedule, target: Target, policies: Policies, now: datetime
) -> Job:
    """The unsaved job these values make, each policy left None at its setting's default
    (``create_job`` validates and saves it; the declarations in code compare it with the
    ledger's)."""
    return Job(
        owner=owner,
        name=name,
        schedule=schedule,
        task=target.task or (TASK_ROW_TASK if target.task_table else ""),
        args=target.args,
        kwargs=target.kwargs,
        task_table=target.task_table,
        task_row_id=target.task_row_id,
        max_retries=(
            conf.get("DEFAULT_MAX_RETRIES")
            if policies.max_retries is None
            else policies.max_retries
        ),
        timeout=conf.get("DEFAULT_TIMEOUT") if policies.timeout is None else policies.timeout,
        retry_backoff=policies.retry_backoff,
        retry_backoff_max=policies.retry_backoff_max,
        jitter=policies.jitter or timedelta(0),
        misfire=policies.misfire,
        overlap=policies.overlap,
        queue=policies.queue,
        priority=policies.priority,
        expires=policies.expires,
        note=policies.note,
        max_running=policies.max_running,
        pause_after_failures=policies.pause_after_failures,
        created_at=now,
    )


#: Job fields ``edit_job`` may change (timing goes through ``timing`` or ``schedule``).
EDITABLE = frozenset(
    {
        "owner",
        "name",
        "task",
        "args",
        "kwargs",
        "task_table",
        "task_row_id",
        "max_retries",
        "timeout",
        "retry_backoff",
        "retry_backoff_max",
        "jitter",
        "misfire",
        "overlap",
        "queue",
        "priority",
        "expires",
        "note",
        "max_running",
        "pause_after_failures",
    }
)
#: Schedule fields ``edit_job`` takes in ``timing``; giving one kind clears the others.
TIMING_FIELDS = ("interval", "cron", "rrule", "timezone", "run_at", "starts_at", "ends_at")
_KINDS = ("interval", "cron", "rrule", "run_at")
_TEXT_TIMING = ("interval", "cron", "rrule", "timezone")
#: Changes after which the next occurrence is planned again.
_REPLAN = frozenset({"jitter"})


def edit_job(
    *,
    job: Job,
    now: datetime,
    timing: dict[str, Any] | None = None,
    schedule: Schedule | None = None,
    by: Actor | None = None,
    allow_past: bool = False,
    past_hint: str | None = None,
    as_declared: bool = False,
    **changes: Any,
) -> Job:
    """Change a job in place, only the given values, keeping its id and history.

    ``timing`` changes the job's schedule; a schedule other jobs share, or one that belongs
    to another owner, is never changed from one job: this job gets its own copy (the job
    owner's), so the others keep their timing. ``schedule`` moves
    the job to an existing schedule instead. Giving a task clears a task-table target and the
    other way round. Every reason is collected before anything is saved, with the rules of
    ``create_job``; when the timing or jitter changed, the next occurrence is planned again from
    ``now`` (an unfinished execution still finishes first). A ``run_at`` changed to an
    instant already past is refused unless ``allow_past`` (``validation.past_run_at_error``;
    ``past_hint`` is the refusal's last sentence, where the caller's door says it better).
    Each field that changed, its timing included, is written to the audit trail with ``by``
    (code when None), in the same transaction.

    A job the code declares (``Job.declared``) is the code's to change: any change is refused
    naming the setting to change (``declared_refusal``), except from the declarations'
    reconciliation itself (``as_declared``).
    """
    unknown = set(changes) - EDITABLE
    if unknown or set(timing or {}) - set(TIMING_FIELDS):
        raise TypeError(f"edit_job cannot change {sorted(unknown | set(timing or {}))}")
    if timing and schedule is not None:
        raise TypeError("edit_job takes timing or an existing schedule, not both")
    job = Job.objects.select_related("schedule", "owner").get(pk=job.pk)
    if job.declared and not as_declared:
        asked = sorted({*changes, *(timing or {}), *(["schedule"] if schedule else [])})
        if asked:
            raise ValidationError({asked[0]: declared_refusal(job)})
    old_schedule = job.schedule
    before = audit.snapshot(job)
    if changes.get("task_table"):
        changes.setdefault("task", TASK_ROW_TASK)
    elif changes.get("task") and changes["task"] != TASK_ROW_TASK:
        changes.setdefault("task_table", "")
        changes.setdefault("task_row_id", None)
    for name, value in changes.items():
        setattr(job, name, value)

    errors: dict[str, list[str]] = {}
    replan = bool(_REPLAN & changes.keys())
    retimed = False  # the job's schedule row (its own, or a new copy) has new values
    if schedule is not None and schedule.pk != old_schedule.pk:
        job.schedule = schedule
        replan = True
    elif timing:
        values = {name: getattr(old_schedule, name) for name in TIMING_FIELDS}
        if any(timing.get(kind) for kind in _KINDS):
            values.update(interval="", cron="", rrule="", run_at=None)
            if not (timing.get("cron") or timing.get("rrule")) and "timezone" not in timing:
                values["timezone"] = "UTC"  # the zone belongs to cron and calendars alone
        values.update({k: "" if v is None and k in _TEXT_TIMING else v for k, v in timing.items()})
        values["timezone"] = values["timezone"] or "UTC"
        if any(values[name] != getattr(old_schedule, name) for name in TIMING_FIELDS):
            shared = old_schedule.jobs.exclude(pk=job.pk).exists()
            own = old_schedule.owner_id == job.owner_id
            target = old_schedule if own and not shared else Schedule(owner=job.owner)
            previous_run_at = old_schedule.run_at  # a copy is judged by what the job had
            for name, value in values.items():
                setattr(target, name, value)
            target.saved_run_at = previous_run_at
            target.allow_past = allow_past
            if past_hint is not None:
                target.past_hint = past_hint
            try:
                target.full_clean()
            except ValidationError as exc:
                errors.update(exc.message_dict)
            job.schedule = target
            retimed = replan = True
    try:
        job.full_clean(exclude=["schedule", "owner"], validate_unique=False)
    except ValidationError as exc:
        for name_, messages in exc.message_dict.items():
            known = errors.setdefault(name_, [])
            known.extend(m for m in messages if m not in known)
    if {"owner", "name"} & changes.keys() and (
        Job.objects.filter(owner=job.owner, name=job.name).exclude(pk=job.pk).exists()
    ):
        errors.setdefault("name", []).append(f"{job.owner} already has a job named {job.name!r}")
    if errors:
        raise ValidationError(errors)
    # Only the edited columns are written: the scheduler and workers own the others
    # (next due time, current execution, counters) and may have moved them meanwhile.
    columns = [*changes, "updated_at"]
    with transaction.atomic():
        if retimed:
            job.schedule.save()
        if job.schedule.pk != old_schedule.pk:
            columns.append("schedule")
        job.save(update_fields=columns)
        if job.schedule.pk != old_schedule.pk:
            _drop_if_unused(old_schedule, owner_id=job.owner_id)
        if replan:
            replan_job(job=job, now=now)
        audit.record(
            job=job,
            action=JobChangeAction.CHANGED,
            by=by or audit.CODE,
            now=now,
            changes=audit.differences(before, audit.snapshot(job)),
        )
    logger.info("job.edited job=%s changed=%s", job.pk, ",".join(sorted(changes)) or "-")
    job.refresh_from_db()
    return job


def plan_from(job: Job, timing: FiringRule, *, now: datetime, first: bool = False) -> None:
    """Set the job's next occurrence to the first one at or after ``now``.

    A one-off whose instant has already passed still runs once, at creation: a due time in
    the past means "now", not "never".
    """
    if first and timing.at is not None:
        occurrence = timing.at if timing.end is None or timing.at <= timing.end else None
    else:
        occurrence = timing.occurrence_at_or_after(now, anchor=job.created_at)
    _set_next(job, occurrence)


def _set_next(job: Job, occurrence: datetime | None) -> None:
    job.next_occurrence_at = occurrence
    if occurrence is None:
        job.next_due_at = None
        job.status = JobStatus.COMPLETED
    else:
        job.next_due_at = schedules.due_time(job.pk, occurrence, job.jitter)


def declared_refusal(job: Job) -> str:
    """Why a field of a job the code declares cannot be changed here, naming the setting."""
    return (
        f"is declared in code; change {_setting(job)}[{job.declared_key!r}] and deploy (pause, "
        "resume, run now and backfill work here as for any job)"
    )


def removal_refusal(job: Job) -> str:
    """Why a job the code declares cannot be removed here, naming the setting and the key."""
    return (
        f"is declared in code; remove the entry from {_setting(job)}[{job.declared_key!r}] and "
        "run jobs sync: its job is then paused, its history kept"
    )


def _setting(job: Job) -> str:
    return (
        "SCHEDULING_JOBS"
        if job.declared_in == DeclaredIn.SCHEDULING_JOBS
        else "CELERY_BEAT_SCHEDULE (the Celery app's beat_schedule)"
    )


def replan_job(
    *,
    job: Job,
    now: datetime,
    by: Actor | None = None,
    changes: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Recompute an edited job's next occurrence from ``now`` (admin saves, schedule edits).

    A job whose current execution is unfinished keeps waiting for it; the new position only
    decides what comes after. With ``by``, the re-plan is a row of the trail of its own
    (``replanned``: ``changes``, such as the schedule's timing from and to, and the next due
    time from and to); without, the caller's own row tells the change (``edit_job``).
    """
    with transaction.atomic():
        locked = engine().lock_job(job.pk, with_schedule=True)
        if locked is None:
            raise Job.DoesNotExist(f"job {job.pk} does not exist")
        before = (locked.status, locked.next_due_at)
        if locked.status == JobStatus.COMPLETED:
            locked.status = JobStatus.ACTIVE
        plan_from(locked, locked.schedule.timing(), now=now, first=locked.execute_count == 0)
        locked.save(update_fields=["status", "next_due_at", "next_occurrence_at", "updated_at"])
        moved = audit.differences(
            {"status": before[0], "next_due_at": audit.as_json(before[1])},
            {"status": locked.status, "next_due_at": audit.as_json(locked.next_due_at)},
        )
        if by is not None and (changes or moved):
            audit.record(
                job=locked,
                action=JobChangeAction.REPLANNED,
                by=by,
                now=now,
                changes={**(changes or {}), **moved},
            )
    logger.info("job.replanned job=%s next_due_at=%s", job.pk, locked.next_due_at)


def edit_schedule(*, schedule: Schedule, now: datetime, by: Actor | None = None) -> int:
    """Save an edited, validated schedule (the Schedules page) and re-plan every job on it;
    returns how many.

    Each job's trail gets a ``replanned`` row with ``by`` (code when None): the schedule's
    timing fields that changed, from and to, and the job's next due time, from and to, in the
    transaction that saves the schedule. A save that changed no timing and moved no job
    writes none.
    """
    declared = schedule.jobs.exclude(declared_fingerprint="").exclude(declared_in="").first()
    if declared is not None:
        raise ValidationError({"schedule": declared_refusal(declared)})
    with transaction.atomic():
        saved = Schedule.objects.select_for_update().get(pk=schedule.pk)
        before = audit.timing(saved)
        schedule.save()
        changes = audit.differences(before, audit.timing(schedule))
        replanned = 0
        for job in schedule.jobs.order_by("pk"):
            replan_job(job=job, now=now, by=by or audit.CODE, changes=changes)
            replanned += 1
    logger.info("schedule.edited schedule=%s jobs=%s", schedule.pk, replanned)
    return replanned


def pause_job(*, job: Job, now: datetime, reason: str = "", by: Actor | None = None) -> bool:
    """Stop an active job from firing, with a reason shown until it is resumed.

    The reason is refused (ValidationError on ``reason``) when it cannot be stored as one line:
    it goes into the log as ``job.paused … reason=…``. The pause is a person's or code's
    (``PauseKind.MANUAL``), recorded in the audit trail with ``by`` (code when None).
    """
    check_reason(reason)
    with transaction.atomic():
        changed = engine().pause_job(job.pk, reason=reason, kind=PauseKind.MANUAL, now=now)
        if changed:
            audit.paused(
                job=job,
                by=by or audit.CODE,
                now=now,
                reason=reason,
                before=job.pause_reason,
                kind=PauseKind.MANUAL.value,
            )
    if changed:
        logger.info("job.paused job=%s reason=%s", job.pk, reason or "-")
    return bool(changed)


def resume_job(*, job: Job, now: datetime, by: Actor | None = None) -> bool:
    """Make a paused job active again; its misfire policy decides what the pause missed.

    Its count of failed occurrences in a row starts again from zero (``stages.failures``),
    whoever paused it; the resume is recorded in the audit trail with ``by`` (code when None).
    """
    with transaction.atomic():
        locked = engine().lock_job(job.pk, status=JobStatus.PAUSED)
        if locked is None:
            return False
        reason, kind, failed = locked.pause_reason, locked.pause_kind, locked.consecutive_failures
        locked.status = JobStatus.ACTIVE
        locked.pause_reason = ""
        locked.pause_kind = PauseKind.NONE
        locked.consecutive_failures = 0
        if locked.next_occurrence_at is None:
            plan_from(locked, locked.schedule.timing(), now=now)
        locked.save(
            update_fields=[
                "status",
                "pause_reason",
                "pause_kind",
                "consecutive_failures",
                "next_due_at",
                "next_occurrence_at",
                "updated_at",
            ]
        )
        changes = {
            "status": {"from": JobStatus.PAUSED.value, "to": JobStatus.ACTIVE.value},
            "pause_reason": {"from": reason, "to": ""},
            "pause_kind": {"from": kind, "to": PauseKind.NONE.value},
        }
        if failed:
            changes["consecutive_failures"] = {"from": failed, "to": 0}
        audit.record(
            job=locked,
            action=JobChangeAction.RESUMED,
            by=by or audit.CODE,
            now=now,
            changes=changes,
        )
    logger.info("job.resumed job=%s next_due_at=%s", job.pk, locked.next_due_at)
    job.refresh_from_db()
    return True


def remove_job(
    *, job: Job, now: datetime | None = None, by: Actor | None = None, row_gone: bool = False
) -> None:
    """Delete the job, its history (by cascade) and its schedule when nothing else uses it.

    Its audit trail stays: a ``removed`` row (with ``by``, code when None) is written first,
    and the deletion empties the rows' link to the job, which keep its name. A job the code
    declares is refused (``removal_refusal``): the next reconciliation would make it again,
    its history lost; only the deletion of the task-table row it runs (``row_gone``) takes it.
    """
    if job.declared and not row_gone:
        raise ValidationError({"name": removal_refusal(job)})
    job_id = job.pk
    with transaction.atomic():
        schedule = job.schedule
        audit.record(
            job=job,
            action=JobChangeAction.REMOVED,
            by=by or audit.CODE,
            now=now or timezone.now(),
            changes={"status": {"from": job.status, "to": None}},
        )
        job.delete()
        _drop_if_unused(schedule, owner_id=job.owner_id)
    logger.info("job.removed job=%s", job_id)


def _drop_if_unused(schedule: Schedule, *, owner_id: Any) -> None:
    """Delete a schedule a job left, when no job uses it and it was that job owner's own.

    Another owner's schedule stays, used or not: only its owner (or a superuser) deletes it.
    """
    if schedule.owner_id == owner_id and not schedule.jobs.exists():
        schedule.delete()


def run_job_now(*, job: Job, now: datetime, by: Actor | None = None) -> Execution:
    """Create one extra occurrence at ``now``, PENDING like a claimed one, with its row of
    the trail (``run_now``, by ``by``; code when None).

    The caller publishes it after the commit (``scheduling.api.run_now``); if that fails, the
    scheduler publishes it once the pending grace has passed, as after any claim.
    """
    check_target(job)
    with transaction.atomic():
        execution = engine().add_occurrence(job, scheduled_for=now, now=now)
        audit.execution_changed(
            job_id=job.pk,
            job_name=job.name,
            execution_id=execution.pk,
            action=JobChangeAction.RAN_NOW,
            before=None,
            after=ExecutionStatus.PENDING.value,
            by=by or audit.CODE,
            now=now,
        )
    logger.info("job.run_now job=%s execution=%s", job.pk, execution.pk)
    return execution


def cancel_job(*, job_id: int, now: datetime, reason: str, by: Actor | None = None) -> int:
    """Cancel every unfinished execution of the job (``cancel_execution``, each with its row
    of the trail by ``by``, code when None).

    Taken by id: only the executions are touched, and a job that is gone has none left to
    cancel (0). The reason becomes each execution's ``last_error`` and a log line: it must be
    one line of printable text (ValidationError on ``reason`` otherwise).
    """
    check_reason(reason)
    ids = Execution.objects.filter(job_id=job_id, status__in=EXECUTION_UNFINISHED).values_list(
        "pk", flat=True
    )
    return sum(cancel_execution(execution_id=i, now=now, reason=reason, by=by) for i in list(ids))


def cancel_execution(
    *, execution_id: int, now: datetime, reason: str, by: Actor | None = None
) -> bool:
    """A person's or code's cancel of one unfinished execution (``attempts.cancel_execution``),
    with its row of the trail (``cancelled``: the execution's status from and to, and the
    reason; by ``by``, code when None) in the same transaction; False when it was not
    unfinished. A Django task run (no job) has no trail.

    The row is locked first, as ``attempts.cancel_execution`` locks it, so the status
    recorded is the one it had when it was cancelled.
    """
    check_reason(reason)
    with transaction.atomic():
        found = engine().lock_execution(execution_id, statuses=EXECUTION_UNFINISHED)
        if found is None:
            return False
        status, job_id = found.status, found.job_id
        if not attempts.cancel_execution(execution_id=execution_id, now=now, reason=reason):
            return False
        _execution_changed(
            job_id=job_id,
            execution_id=execution_id,
            action=JobChangeAction.CANCELLED,
            before=status,
            after=ExecutionStatus.CANCELLED.value,
            by=by,
            now=now,
            reason=reason,
        )
    return True


def _execution_changed(*, job_id: int | None, by: Actor | None, **values: Any) -> None:
    """``audit.execution_changed`` for an execution of a job (none for a Django task run)."""
    if job_id is None:
        return
    name = Job.objects.filter(pk=job_id).values_list("name", flat=True).first()
    if name is not None:
        audit.execution_changed(job_id=job_id, job_name=name, by=by or audit.CODE, **values)


def retry_execution(*, execution_id: int, now: datetime, by: Actor | None = None) -> bool:
    """Give a failed execution of a job one more attempt; False when it is not failed.

    The row goes back to RETRY, due now, so the scheduler's next tick publishes it like any
    retry; its attempts so far stay in its history and the next one is numbered after them.
    The retry is a row of the job's trail (``retried``, by ``by``; code when None), written
    in the same transaction.
    """
    with transaction.atomic():
        changed = engine().retry_failed_execution(execution_id, now=now)
        if changed:
            _execution_changed(
                job_id=Execution.objects.filter(pk=execution_id)
                .values_list("job_id", flat=True)
                .first(),
                execution_id=execution_id,
                action=JobChangeAction.RETRIED,
                before=ExecutionStatus.FAILED.value,
                after=ExecutionStatus.RETRY.value,
                by=by,
                now=now,
            )
    if changed:
        logger.info("execution.retried execution=%s by=hand", execution_id)
    return bool(changed)


def retry_failed(
    *, job: Job, now: datetime, since: datetime | None = None, by: Actor | None = None
) -> int:
    """``retry_execution`` for each failed execution of the job (due since ``since``)."""
    rows = Execution.objects.filter(job=job, status=ExecutionStatus.FAILED)
    if since is not None:
        rows = rows.filter(scheduled_for__gte=since)
    ids = list(rows.values_list("pk", flat=True))
    return sum(retry_execution(execution_id=pk, now=now, by=by) for pk in ids)


def jobs_for_row(task_table: str, task_row_id: int, *, viewer: Any = None) -> list[JobInfo]:
    """The jobs that run the row; with ``viewer``, only those that user may see."""
    rows = Job.objects.select_related("schedule", "owner").filter(
        task_table=task_table, task_row_id=task_row_id
    )
    if viewer is not None:
        rows = permissions.visible_jobs(viewer, rows)
    found = list(rows.order_by("pk"))
    titles = selectors.job_titles(found)
    return [JobInfo.of(job, title=titles[job.pk]) for job in found]


def remove_jobs_for_row(task_table: str, task_row_id: int, *, by: Actor | None = None) -> int:
    """Delete every job that runs the row (and, by cascade, their history), each removal a
    row of its trail by ``by`` (code when None)."""
    removed = 0
    for job in Job.objects.select_related("schedule").filter(
        task_table=task_table, task_row_id=task_row_id
    ):
        remove_job(job=job, by=by, row_gone=True)
        removed += 1
    return removed


def executions(job_id: int, *, limit: int, status: str | None) -> list[ExecutionInfo]:
    # A subquery, not a GROUP BY: on the partitioned history the primary key is (id,
    # scheduled_for), and grouping by id alone no longer covers the other columns.
    tries = (
        Attempt.objects.filter(execution_id=OuterRef("pk"), scheduled_for=OuterRef("scheduled_for"))
        .order_by()
        .values("execution_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    rows = Execution.objects.filter(job_id=job_id).annotate(
        attempt_count=Coalesce(Subquery(tries), 0)
    )
    selectors.check_execution_status(status)
    if status:
        rows = rows.filter(status=status)
    return [
        ExecutionInfo(
            id=row.pk,
            job_id=row.job_id,
            scheduled_for=row.scheduled_for,
            status=row.status,
            retry_count=row.retry_count,
            attempts=row.attempt_count,
            started_at=row.started_at,
            finished_at=row.finished_at,
            last_error=row.last_error,
            checkpoint=row.checkpoint,
        )
        for row in rows.order_by("-scheduled_for", "-id")[: selectors.check_limit(limit)]
    ]
