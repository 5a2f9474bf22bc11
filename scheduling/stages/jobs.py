"""Jobs made and read: the one constructor, the values that describe a job, its plan.

The command line, the admin and ``scheduling.api`` all make a job here: one constructor
(``create_job``) from three values, its target (``Target``: a schedulable task with
arguments, or a task-table row), its timing (a ``Schedule``) and its policies (``Policies``),
so a job made by any of them passes the same rules (``Job.clean``) and gets its first
occurrence planned the same way (``plan_from``). Domain code reads jobs and their history as
plain values (``JobInfo``, ``ExecutionInfo``). What is done to a job afterwards has its own
module: ``edits`` (change, re-plan, a schedule's new timing), ``controls`` (pause, resume,
run now, cancel, retry) and ``removals``.

A new job, and a new schedule made for it, are validated by the models' own
``full_clean()`` and written by the engine (``Engine.save_schedule``, ``Engine.insert_job``):
a row no other process can hold yet, so no lock and no compare-and-set to make. Its plan,
once the row has the id its jitter is drawn from, is the engine's too (``Engine.plan_job``),
as every later change of its state is.

``create_job``, like every verb on a job in those modules, takes ``by`` (an ``audit.Actor``:
who, and through which door) and writes its row of the audit trail in the transaction of its
change; ``by`` None is code (``audit.CODE``).
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

from scheduling import conf
from scheduling.ledger.engines import engine
from scheduling.models import (
    Attempt,
    DeclaredIn,
    Execution,
    Job,
    JobStatus,
    Overlap,
    Schedule,
)
from scheduling.rules import permissions
from scheduling.rules.tasktables import TASK_ROW_TASK
from scheduling.rules.validation import storable
from scheduling.stages import audit, pauses, selectors
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
            engine().save_schedule(schedule)
        job.schedule = schedule
        engine().insert_job(job)
        plan_from(job, schedule.timing(), now=now, first=True)
        engine().plan_job(job)
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
        f"is declared in code; change {declaring_setting(job)}[{job.declared_key!r}] and "
        "deploy (pause, resume, run now and backfill work here as for any job)"
    )


def declaring_setting(job: Job) -> str:
    """The setting that declares ``job``, as its refusals name it."""
    return (
        "SCHEDULING_JOBS"
        if job.declared_in == DeclaredIn.SCHEDULING_JOBS
        else "CELERY_BEAT_SCHEDULE (the Celery app's beat_schedule)"
    )


def drop_if_unused(schedule: Schedule, *, owner_id: Any) -> None:
    """Delete a schedule a job left, when no job uses it and it was that job owner's own.

    Another owner's schedule stays, used or not: only its owner (or a superuser) deletes it.
    """
    if schedule.owner_id == owner_id:
        engine().drop_unused_schedule(schedule.pk)


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
