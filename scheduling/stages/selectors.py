"""Reads for the command line and the admin: plain dictionaries, newest first."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from cron_descriptor import Options, get_description
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import (
    BooleanField,
    Count,
    Exists,
    ExpressionWrapper,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
)
from django.db.models.functions import Coalesce

from scheduling import readable
from scheduling.ledger import pgtimes
from scheduling.ledger.probe import Probe as Probe  # the idle tick's answers, read here
from scheduling.ledger.probe import scheduler_probe as scheduler_probe
from scheduling.models import Execution, ExecutionStatus, Job, Schedule, job_due_index
from scheduling.readable import describe_interval
from scheduling.rules.validation import storable
from scheduling.timing.calendar_words import describe_calendar


def _iso(value: datetime | None) -> str | None:
    return pgtimes.describe(value)


def find_job(name: str, *, owner: str | None = None) -> Job:
    """The job called ``name`` (of ``owner`` when given); errors name the field.

    A name no row can hold (a NUL typed on the command line) is simply not found.
    """
    jobs = Job.objects.select_related("schedule", "owner").filter(name=name)
    if owner:
        jobs = jobs.filter(owner__username=owner)
    found = list(jobs[:2]) if storable(name) and storable(owner or "") else []
    if not found:
        suffix = f" owned by {owner!r}" if owner else ""
        raise ValidationError({"name": f"no job named {name!r}{suffix}"})
    if len(found) > 1:
        raise ValidationError({"name": f"several owners have a job named {name!r}; pass --owner"})
    return found[0]


def job_summary(job: Job) -> dict[str, Any]:
    schedule = job.schedule
    return {
        "id": job.pk,
        "name": job.name,
        "owner": job.owner.get_username(),
        "status": job.status,
        "task": job.task,
        "args": job.args,
        "kwargs": job.kwargs,
        "task_table": job.task_table or None,
        "task_row_id": job.task_row_id,
        "schedule": {
            "kind": schedule.kind,
            "interval": schedule.interval or None,
            "cron": schedule.cron or None,
            "rrule": schedule.rrule or None,
            "timezone": schedule.timezone,
            "at": _iso(schedule.run_at),
            "start": _iso(schedule.starts_at),
            "end": _iso(schedule.ends_at),
            "description": describe_schedule(schedule),
        },
        "next_due_at": _iso(job.next_due_at),
        "next_occurrence_at": _iso(job.next_occurrence_at),
        "execute_count": job.execute_count,
        "last_keepalive_at": _iso(job.last_keepalive_at),
        "misfire": job.misfire,
        "overlap": job.overlap,
        "jitter": job.jitter.total_seconds(),
        "timeout": job.timeout,
        "max_retries": job.max_retries,
        "max_running": job.max_running,
        "queue": job.queue,
        "priority": job.priority,
        "expires": job.expires,
        "pause_reason": job.pause_reason or None,
        "pause_kind": job.pause_kind or None,
        "pause_after_failures": job.pause_after_failures,
        "consecutive_failures": job.consecutive_failures,
        "note": job.note,
        "created_at": _iso(job.created_at),
    }


def list_jobs() -> QuerySet[Job]:
    return Job.objects.select_related("schedule", "owner").order_by("name", "owner__username")


def execution_summary(execution: Execution, *, attempts: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": execution.pk,
        "job": execution.job.name if execution.job_id and execution.job else None,
        "task": execution.task,
        "scheduled_for": _iso(execution.scheduled_for),
        "status": execution.status,
        "retry_count": execution.retry_count,
        "task_id": str(execution.task_id),
        "worker": execution.worker or None,
        "queued_at": _iso(execution.queued_at),
        "started_at": _iso(execution.started_at),
        "finished_at": _iso(execution.finished_at),
        "last_heartbeat_at": _iso(execution.last_heartbeat_at),
        "retry_at": _iso(execution.retry_at),
        "last_error": execution.last_error or None,
        "checkpoint": execution.checkpoint,
        "duplicates": execution.duplicates,
        "item_failures": execution.item_failures,
        "item_failure_detail": execution.item_failure_detail or None,
        # Runs enqueued through Django's Tasks framework: arguments and return value or errors.
        "call": execution.call,
        "result": execution.result,
    }
    if attempts:
        data["attempts"] = [a.as_dict() for a in execution.attempts.all()]
    return data


#: The most executions one listing returns (``manage.py executions``, ``api.executions``).
MAX_LISTED = 10_000


def check_limit(limit: Any) -> int:
    """``limit`` when it is a whole number from 1 to ``MAX_LISTED``; else a ValidationError
    on ``limit`` (a limit past what the database counts in would fail there)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LISTED:
        raise ValidationError(
            {"limit": f"must be a whole number, at least 1 and at most {MAX_LISTED:,}"}
        )
    return limit


def check_execution_status(status: str | None) -> None:
    """Refuse a status filter that names no execution status, listing the ones there are."""
    if status and status not in ExecutionStatus.values:
        raise ValidationError(
            {"status": f"{status!r} is not one of {', '.join(ExecutionStatus.values)}"}
        )


def list_executions(
    *,
    job: Job | None = None,
    owner: str | None = None,
    status: str | None = None,
    limit: int = 50,
) -> QuerySet[Execution]:
    """Executions newest first: of one job, or of every job ``owner`` (a username) owns."""
    check_execution_status(status)
    limit = check_limit(limit)
    rows = Execution.objects.select_related("job").order_by("-scheduled_for", "-id")
    if job is not None:
        rows = rows.filter(job=job)
    if owner:
        users = get_user_model().objects.filter(username=owner)
        if not (storable(owner) and users.exists()):
            raise ValidationError({"owner": f"no user named {owner!r}"})
        rows = rows.filter(job__owner__username=owner)
    if status:
        rows = rows.filter(status=status)
    return rows[:limit]


def task_row_target(execution_id: int) -> tuple[str, int] | None:
    """The task table and row id of the execution's job, if it targets a task-table row."""
    row = (
        Execution.objects.filter(pk=execution_id, job__isnull=False)
        .exclude(job__task_table="")
        .values("job__task_table", "job__task_row_id")
        .first()
    )
    return (row["job__task_table"], int(row["job__task_row_id"])) if row else None


# --- the schedule in words, and the job list's health columns --------------------------------

_CRON_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def describe_cron(expression: str) -> str:
    """A cron expression in English ("At 09:00, Monday through Friday"), or itself if odd."""
    text = _CRON_MACROS.get(expression.strip().lower(), expression)
    options = Options()
    options.use_24hour_time_format = True
    try:
        return str(get_description(text, options))
    except Exception:  # the describer knows fewer spellings than our parser
        return expression


def describe_schedule(schedule: Schedule) -> str:
    """The schedule as a person reads it: kind, zone and window."""
    if schedule.interval:
        text = describe_interval(schedule.interval)
    elif schedule.cron:
        text = f"{describe_cron(schedule.cron)} ({schedule.timezone})"
    elif schedule.rrule:
        text = describe_calendar(schedule.rrule, schedule.timezone)
    elif schedule.run_at:
        text = f"once at {readable.instant(schedule.run_at)}"
    else:
        text = "once"
    if schedule.starts_at:
        text += f", from {schedule.starts_at:%Y-%m-%d %H:%M} UTC"
    if schedule.ends_at:
        text += f", until {schedule.ends_at:%Y-%m-%d %H:%M} UTC"
    return text


#: An occurrence this long past its due time without a claim or a start counts as late.
LATE_AFTER = timedelta(minutes=1)
#: Statuses of the last run that make a job "failing".
FAILING = (ExecutionStatus.FAILED, ExecutionStatus.RETRY)


def with_health(jobs: QuerySet[Job], *, now: datetime) -> QuerySet[Job]:
    """Annotate each job with its last run, failures in 24 h and lateness, in one statement.

    Each value is a correlated subquery on the ``(job, scheduled_for)`` unique index (or the
    partial index of waiting executions), so a page of jobs costs one query, not one per row:
    ``last_status``, ``last_scheduled_for``, ``last_started_at``, ``last_retry_count``,
    ``failures_24h`` and ``is_late``. The last run is the newest occurrence that left the queue
    (pending and queued ones have not run yet).
    """
    history = Execution.objects.filter(job=OuterRef("pk"))
    last = history.exclude(
        status__in=[ExecutionStatus.PENDING, ExecutionStatus.QUEUED]
    ).order_by("-scheduled_for", "-id")
    failures = (
        history.filter(status=ExecutionStatus.FAILED, scheduled_for__gte=now - timedelta(days=1))
        .order_by()
        .values("job")
        .annotate(n=Count("pk"))
        .values("n")[:1]
    )
    waiting = history.filter(
        status__in=[ExecutionStatus.PENDING, ExecutionStatus.QUEUED],
        scheduled_for__lt=now - LATE_AFTER,
    )
    return jobs.annotate(
        last_status=Subquery(last.values("status")[:1]),
        last_scheduled_for=Subquery(last.values("scheduled_for")[:1]),
        last_started_at=Subquery(last.values("started_at")[:1]),
        last_retry_count=Subquery(last.values("retry_count")[:1]),
        failures_24h=Coalesce(Subquery(failures, output_field=IntegerField()), 0),
        is_late=ExpressionWrapper(
            Q(job_due_index(), next_due_at__lt=now - LATE_AFTER) | Exists(waiting),
            output_field=BooleanField(),
        ),
    )


def failing(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """Jobs (annotated by ``with_health``) whose last run failed or is waiting to retry."""
    return jobs.filter(last_status__in=FAILING)


def late(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """Jobs (annotated by ``with_health``) with an occurrence overdue by ``LATE_AFTER``."""
    return jobs.filter(is_late=True)


def recent_executions(job: Job, *, limit: int = 20) -> list[Execution]:
    """The job's newest executions with their attempts, in two queries."""
    return list(
        Execution.objects.filter(job=job)
        .order_by("-scheduled_for", "-id")
        .prefetch_related("attempts")[:limit]
    )
