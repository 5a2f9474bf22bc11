"""A job changed: its values edited, its next occurrence planned again, a schedule retimed.

``edit_job`` changes only the values it is given, keeping the job's id and history, under
the rules of ``jobs.create_job``; ``replan_job`` moves the next occurrence after an edit;
``edit_schedule`` saves a schedule's new timing and re-plans every job on it. The stage
decides (validation, the copy of a shared schedule, the new plan, the audit trail's rows);
the ledger's engine writes them (``change_job``, ``save_schedule``, ``plan_job``) and holds
the rows (``lock_job``, ``lock_schedule``). A job the code declares is the code's to change
(``jobs.declared_refusal``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from scheduling.ledger.engines import engine
from scheduling.models import Job, JobChangeAction, JobStatus, Schedule
from scheduling.rules.tasktables import TASK_ROW_TASK
from scheduling.stages import audit
from scheduling.stages.audit import Actor
from scheduling.stages.jobs import declared_refusal, drop_if_unused, plan_from

logger = logging.getLogger("scheduling")

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
            engine().save_schedule(job.schedule)
        if job.schedule.pk != old_schedule.pk:
            columns.append("schedule")
        engine().change_job(job, fields=columns)
        if job.schedule.pk != old_schedule.pk:
            drop_if_unused(old_schedule, owner_id=job.owner_id)
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
        engine().plan_job(locked)
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
        saved = engine().lock_schedule(schedule.pk)
        before = audit.timing(saved)
        engine().save_schedule(schedule)
        changes = audit.differences(before, audit.timing(schedule))
        replanned = 0
        for job in schedule.jobs.order_by("pk"):
            replan_job(job=job, now=now, by=by or audit.CODE, changes=changes)
            replanned += 1
    logger.info("schedule.edited schedule=%s jobs=%s", schedule.pk, replanned)
    return replanned
