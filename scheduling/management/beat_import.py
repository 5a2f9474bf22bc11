"""Moving over from django-celery-beat: its PeriodicTask rows become equivalent jobs.

Each row maps to one job of the same name (owned by the importing user), made and changed
through ``scheduling.stages`` (``jobs``, ``edits``) so the usual rules apply. The mapping:

- IntervalSchedule ``every`` + ``period`` → an ISO-8601 interval. The row's last run is the
  interval's anchor, so the cadence goes on where beat left it instead of firing at import.
- CrontabSchedule → the same five fields as a cron expression, in the crontab's time zone.
- ClockedSchedule (one-off) → a single instant; one that already ran is imported completed.
- ``one_off`` with an interval or crontab → a single instant at that schedule's next time.
- SolarSchedule → not mapped (no sunrise/sunset timing here): reported with the reason.
- ``enabled`` → active or paused; ``start_time`` → start; ``expires`` (an instant) → end;
  ``expire_seconds`` → the job's ``expires``; ``queue`` (or the routing key when the queue is
  empty) → queue; ``priority`` → priority; ``total_run_count`` → the execute count.

Imported jobs use the ``coalesce`` misfire policy, as beat runs a late task once. Running the
import again changes nothing unless a row changed, and then only that row's job. A row that
cannot be mapped is reported with its reason and nothing is written for it.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import connection, transaction

from scheduling.models import Job, JobChangeAction, JobStatus, Schedule
from scheduling.rules.validation import first_error
from scheduling.stages import audit, controls, edits, jobs
from scheduling.stages.audit import Actor
from scheduling.timing.beat_schedules import Unmappable, cron_fields, interval_of
from scheduling.timing.schedules import Misfire, ScheduleError, timing_from

if TYPE_CHECKING:
    from django_celery_beat.models import PeriodicTask

MARK = "Imported from django-celery-beat"
SOURCE_DISABLED = "(its PeriodicTask was disabled on import)"
PAUSE_REASON = "disabled in django-celery-beat"

SCHEDULE_FIELDS = ("interval", "cron", "timezone", "run_at", "starts_at", "ends_at")
JOB_FIELDS = ("task", "args", "kwargs", "queue", "priority", "expires", "note")


@dataclass(frozen=True)
class Spec:
    """The job a PeriodicTask row maps to."""

    schedule: dict[str, Any]
    job: dict[str, Any]
    active: bool
    ran: bool
    anchor: datetime | None
    execute_count: int
    warnings: tuple[str, ...] = ()


@dataclass
class RowResult:
    """What happened to one PeriodicTask row."""

    name: str
    action: str  # created, updated, unchanged, skipped
    detail: str = ""
    changed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    source_disabled: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "action": self.action,
            "detail": self.detail,
            "changed": self.changed,
            "warnings": self.warnings,
            "source_disabled": self.source_disabled,
        }


def _json(text: str | None, *, field_name: str, kind: type) -> Any:
    try:
        value = json.loads(text or ("[]" if kind is list else "{}"))
    except ValueError as exc:
        raise Unmappable(f"{field_name} is not JSON: {exc}") from None
    if not isinstance(value, kind):
        raise Unmappable(f"{field_name} must be a JSON {'list' if kind is list else 'object'}")
    return value


def cron_of(crontab: Any) -> tuple[str, str]:
    """A CrontabSchedule row as a cron expression and its zone (``beat_schedules``' reading,
    the one ``beat_schedule`` entries get too)."""
    expression = cron_fields(
        crontab.minute,
        crontab.hour,
        crontab.day_of_month,
        crontab.month_of_year,
        crontab.day_of_week,
    )
    return expression, str(crontab.timezone)


def spec_of(row: PeriodicTask, *, now: datetime) -> Spec:
    """Map one row; raises Unmappable with the reason."""
    warnings: list[str] = []
    ran = bool(row.last_run_at or row.total_run_count)
    schedule: dict[str, Any] = dict.fromkeys(SCHEDULE_FIELDS)
    schedule.update(interval="", cron="", timezone="UTC")
    anchor = None
    if row.solar_id:
        solar = row.solar
        raise Unmappable(
            f"solar schedules ({solar.event} at {solar.latitude}, {solar.longitude}) have no "
            "equivalent; use a cron expression at the event's usual local time"
        )
    if row.interval_id:
        schedule["interval"] = interval_of(row.interval.every, row.interval.period)
        # Beat runs an interval task one interval after its last run (after it first saw the
        # row when it never ran); the anchor keeps that cadence.
        anchor = row.last_run_at or now
    elif row.crontab_id:
        schedule["cron"], schedule["timezone"] = cron_of(row.crontab)
    elif row.clocked_id:
        schedule["run_at"] = row.clocked.clocked_time
    else:
        raise Unmappable("it has no schedule")
    schedule["starts_at"] = row.start_time if not schedule["run_at"] else None
    schedule["ends_at"] = row.expires if not schedule["run_at"] else None
    if row.one_off and not schedule["run_at"]:
        schedule = _one_off(schedule, row, now=now)
    if row.exchange:
        warnings.append(f"exchange {row.exchange!r} dropped: jobs publish to their queue")
    if row.headers and row.headers not in ("{}", "null"):
        warnings.append("headers dropped: jobs carry no custom message headers")
    if row.queue and row.routing_key and row.routing_key != row.queue:
        warnings.append(f"routing key {row.routing_key!r} dropped: jobs publish to their queue")
    note = f"{MARK} ({row.name})."
    if row.description:
        note = f"{note} {row.description}"
    job = {
        "task": row.task,
        "args": _json(row.args, field_name="args", kind=list),
        "kwargs": _json(row.kwargs, field_name="kwargs", kind=dict),
        "queue": row.queue or row.routing_key or "celery",
        "priority": row.priority,
        "expires": row.expire_seconds,
        "note": note[:500],
    }
    return Spec(
        schedule=schedule,
        job=job,
        active=row.enabled,
        ran=ran,
        anchor=anchor,
        execute_count=row.total_run_count or 0,
        warnings=tuple(warnings),
    )


def _one_off(schedule: dict[str, Any], row: PeriodicTask, *, now: datetime) -> dict[str, Any]:
    """A one-off interval or crontab row runs once, at its schedule's next time."""
    try:
        timing = timing_from(
            schedule["interval"],
            schedule["cron"],
            schedule["timezone"],
            None,
            schedule["starts_at"],
            schedule["ends_at"],
        )
    except ScheduleError as exc:
        raise Unmappable(f"{exc.field}: {exc.reason}") from None
    anchor = row.last_run_at or now
    at = timing.next_after(now, anchor=anchor)
    if at is None:
        raise Unmappable("its one-off schedule has no time left before it expires")
    return {
        **dict.fromkeys(SCHEDULE_FIELDS),
        "interval": "",
        "cron": "",
        "timezone": "UTC",
        "run_at": at,
    }


def _differences(job: Job, spec: Spec) -> list[str]:
    changed = [f for f in JOB_FIELDS if getattr(job, f) != spec.job[f]]
    changed += [f for f in SCHEDULE_FIELDS if getattr(job.schedule, f) != spec.schedule[f]]
    return changed


def _create(
    row: PeriodicTask, spec: Spec, *, owner: Any, now: datetime, by: Actor, dry_run: bool
) -> Job:
    """The job of a new row; a dry run returns it validated and unsaved."""
    s = spec.schedule
    schedule = Schedule(
        interval=s["interval"] or "",
        cron=s["cron"] or "",
        timezone=s["timezone"] or "UTC",
        run_at=s["run_at"],
        starts_at=s["starts_at"],
        ends_at=s["ends_at"],
    )
    # Beat's own one-offs are imported as they are: one already run is kept as history
    # (completed below), one not yet run runs at once, as beat would have run it.
    schedule.allow_past = True
    job = jobs.create_job(
        owner=owner,
        name=row.name,
        schedule=schedule,
        target=jobs.Target(
            task=spec.job["task"],
            args=[] if spec.job["args"] is None else spec.job["args"],
            kwargs={} if spec.job["kwargs"] is None else spec.job["kwargs"],
        ),
        policies=jobs.Policies.given(
            misfire=Misfire.COALESCE.value,
            queue=spec.job["queue"],
            priority=spec.job["priority"],
            expires=spec.job["expires"],
            note=spec.job["note"],
        ),
        now=now,
        by=by,
        dry_run=dry_run,
    )
    if dry_run:
        return job
    fields: dict[str, Any] = {"execute_count": spec.execute_count}
    if s["run_at"] and spec.ran:
        # A one-off that beat already ran is history, not a new occurrence.
        fields.update(status=JobStatus.COMPLETED, next_due_at=None, next_occurrence_at=None)
    if spec.anchor is not None and s["interval"] and not s["starts_at"]:
        fields["created_at"] = spec.anchor
    Job.objects.filter(pk=job.pk).update(**fields)
    job.refresh_from_db()
    if "created_at" in fields:
        # Carry beat's cadence: the first occurrence after now on the grid of its last run.
        edits.replan_job(job=job, now=now + timedelta(microseconds=1))
    if not spec.active:
        controls.pause_job(job=job, now=now, reason=PAUSE_REASON, by=by)
    return job


def _update(job: Job, spec: Spec, changed: list[str], *, now: datetime, by: Actor) -> None:
    before = audit.snapshot(job)
    schedule = job.schedule
    timing_changed = any(f in SCHEDULE_FIELDS for f in changed)
    if timing_changed:
        if schedule.jobs.exclude(pk=job.pk).exists() or schedule.owner_id != job.owner_id:
            schedule = Schedule(owner=job.owner)  # shared, or another's: this job gets its own
        for name, value in spec.schedule.items():
            setattr(schedule, name, value)
        schedule.allow_past = True  # beat's one-offs are imported as they are (``_create``)
        schedule.full_clean()
        schedule.save()
        job.schedule = schedule
    for name, value in spec.job.items():
        setattr(job, name, value)
    job.full_clean(exclude=["schedule", "owner"], validate_unique=False)
    job.save()
    if timing_changed:
        edits.replan_job(job=job, now=now)
    audit.record(
        job=job,
        action=JobChangeAction.CHANGED,
        by=by,
        now=now,
        changes=audit.differences(before, audit.snapshot(job)),
    )


def _status_change(job: Job, spec: Spec) -> str | None:
    """"resume" or "pause" when the job should follow the row's ``enabled``, unless the
    import itself disabled the row; None when it already does."""
    if SOURCE_DISABLED in job.note or job.status == JobStatus.COMPLETED:
        return None
    if spec.active and job.status == JobStatus.PAUSED and job.pause_reason == PAUSE_REASON:
        return "resume"
    if not spec.active and job.status == JobStatus.ACTIVE:
        return "pause"
    return None


def _sync_status(job: Job, spec: Spec, *, now: datetime, by: Actor, dry_run: bool) -> str | None:
    """Follow the row's ``enabled`` (``_status_change``); a dry run only says it would."""
    change = _status_change(job, spec)
    if change is None:
        return None
    if dry_run:
        return "enabled"
    if change == "resume":
        controls.resume_job(job=job, now=now, by=by)
    else:
        controls.pause_job(job=job, now=now, reason=PAUSE_REASON, by=by)
    return "enabled"


def _import_row(
    row: PeriodicTask,
    *,
    owner: Any,
    now: datetime,
    disable_source: bool,
    by: Actor,
    dry_run: bool,
) -> RowResult:
    """Import one row; a dry run validates and compares the same and writes nothing."""
    try:
        spec = spec_of(row, now=now)
    except Unmappable as exc:
        return RowResult(name=row.name, action="skipped", detail=str(exc))
    result = RowResult(name=row.name, action="unchanged", warnings=list(spec.warnings))
    existing = None
    if owner.pk is not None:  # an owner a dry run would make owns nothing yet
        existing = Job.objects.select_related("schedule").filter(owner=owner, name=row.name).first()
    if existing is not None and not existing.note.startswith(MARK):
        result.action, result.detail = (
            "skipped",
            (f"{owner} already has a job named {row.name!r} that was not imported"),
        )
        return result
    try:
        with transaction.atomic():
            if existing is None:
                job = _create(row, spec, owner=owner, now=now, by=by, dry_run=dry_run)
                result.action = "created"
            else:
                job = existing
                spec = _keep_disabled_mark(job, spec)
                if row.one_off and not row.clocked_id and job.schedule.run_at:
                    # The instant was chosen at the first import; later runs keep it.
                    spec.schedule["run_at"] = job.schedule.run_at
                result.changed = _differences(job, spec)
                if result.changed and not dry_run:
                    _update(job, spec, result.changed, now=now, by=by)
                status = _sync_status(job, spec, now=now, by=by, dry_run=dry_run)
                if status:
                    result.changed.append(status)
                if result.changed:
                    result.action = "updated"
            if disable_source and row.enabled:
                _disable(row, job)
                result.source_disabled = True
    except ValidationError as exc:
        return RowResult(name=row.name, action="skipped", detail=first_error(exc))
    if job.pk is None:  # a dry run's new job, validated and not saved
        result.detail = job.schedule.describe()
    else:
        result.detail = Job.objects.select_related("schedule").get(pk=job.pk).schedule.describe()
    return result


def _keep_disabled_mark(job: Job, spec: Spec) -> Spec:
    if SOURCE_DISABLED not in job.note:
        return spec
    note = f"{spec.job['note'][: 499 - len(SOURCE_DISABLED)]} {SOURCE_DISABLED}"
    return Spec(**{**spec.__dict__, "job": {**spec.job, "note": note}})


def _disable(row: PeriodicTask, job: Job) -> None:
    """Disable the source row (beat notices through its change marker) and note it."""
    row.enabled = False
    row.save()  # PeriodicTask.save bumps PeriodicTasks.last_update, which a running beat reads
    note = f"{job.note[: 499 - len(SOURCE_DISABLED)]} {SOURCE_DISABLED}"
    Job.objects.filter(pk=job.pk).update(note=note)


def _source() -> Any:
    """django-celery-beat's PeriodicTask model, looked up when needed: the app is optional, and
    its models cannot even be imported where it is not installed."""
    return apps.get_model("django_celery_beat", "PeriodicTask")


#: The schedule tables a PeriodicTask row points at (read with it by ``periodic_tasks``).
_SCHEDULE_TABLES = ("interval", "crontab", "solar", "clocked")


def periodic_tasks() -> Iterator[PeriodicTask]:
    return (
        _source().objects.select_related(*_SCHEDULE_TABLES)
        .order_by("name")
        .iterator()
    )


def check_source() -> None:
    """Refuse, naming what is missing: the app itself, or its tables in this database."""
    if importlib.util.find_spec("django_celery_beat") is None:
        raise ValidationError(
            {
                "source": 'django-celery-beat is not installed; pip install "duecourse[beat]" '
                'and add "django_celery_beat" to INSTALLED_APPS to read its PeriodicTask rows'
            }
        )
    if not apps.is_installed("django_celery_beat"):
        raise ValidationError(
            {
                "source": "django-celery-beat is not in INSTALLED_APPS; add "
                '"django_celery_beat" there to read its PeriodicTask rows'
            }
        )
    model = _source()
    needed = [model._meta.db_table]
    needed += [model._meta.get_field(n).related_model._meta.db_table for n in _SCHEDULE_TABLES]
    present = set(connection.introspection.table_names())
    missing = [table for table in needed if table not in present]
    if missing:
        raise ValidationError(
            {
                "source": f"django-celery-beat's tables are missing from this database "
                f"({', '.join(missing)}); run `manage.py migrate django_celery_beat` first"
            }
        )


def import_beat(
    *,
    owner: Any,
    now: datetime,
    dry_run: bool = False,
    disable_source: bool = False,
    by: Actor | None = None,
) -> list[RowResult]:
    """Import every PeriodicTask row; with ``dry_run`` validate and report the same, writing
    nothing (no job, schedule or audit row is inserted, so no id is taken, and nothing is
    logged as created); the transaction is rolled back all the same, as a second guard.

    Each job made, changed, paused or resumed is recorded in the audit trail with ``by``
    (``manage.py import_beat``: the operating system's user; code when None).
    """
    check_source()
    results: list[RowResult] = []
    with transaction.atomic():
        for row in periodic_tasks():
            results.append(
                _import_row(
                    row,
                    owner=owner,
                    now=now,
                    disable_source=disable_source and not dry_run,
                    by=by or audit.CODE,
                    dry_run=dry_run,
                )
            )
        if dry_run:
            transaction.set_rollback(True)
    return results
