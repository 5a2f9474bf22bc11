"""Reads for the command line and the admin: plain dictionaries, newest first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime

from scheduling import pgtimes, sql
from scheduling.models import Execution, ExecutionStatus, Job


def _iso(value: datetime | None) -> str | None:
    return pgtimes.describe(value)


def find_job(name: str, *, owner: str | None = None) -> Job:
    """The job called ``name`` (of ``owner`` when given); errors name the field."""
    jobs = Job.objects.select_related("schedule", "owner").filter(name=name)
    if owner:
        jobs = jobs.filter(owner__username=owner)
    found = list(jobs[:2])
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
            "timezone": schedule.timezone,
            "at": _iso(schedule.run_at),
            "start": _iso(schedule.starts_at),
            "end": _iso(schedule.ends_at),
            "description": schedule.describe(),
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
        "queue": job.queue,
        "priority": job.priority,
        "expires": job.expires,
        "pause_reason": job.pause_reason or None,
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
    }
    if attempts:
        data["attempts"] = [a.as_dict() for a in execution.attempts.all()]
    return data


def list_executions(
    *, job: Job | None = None, status: str | None = None, limit: int = 50
) -> QuerySet[Execution]:
    if status and status not in ExecutionStatus.values:
        raise ValidationError(
            {"status": f"{status!r} is not one of {', '.join(ExecutionStatus.values)}"}
        )
    if limit < 1:
        raise ValidationError({"limit": "must be at least 1"})
    rows = Execution.objects.select_related("job").order_by("-scheduled_for", "-id")
    if job is not None:
        rows = rows.filter(job=job)
    if status:
        rows = rows.filter(status=status)
    return rows[:limit]


def task_row_target(execution_id: int) -> tuple[str, int] | None:
    """The task table and row id of the execution's job, if it targets a task-table row."""
    row = (
        Execution.objects.filter(pk=execution_id, job__isnull=False)
        .exclude(job__task_table="")
        .values_list("job__task_table", "job__task_row_id")
        .first()
    )
    return (row[0], int(row[1])) if row else None


@dataclass(frozen=True)
class Probe:
    """What one scheduler tick has to do, from one statement.

    ``due``: jobs to claim; ``republish``: executions to publish again; ``stale``: running
    executions to reap; ``next_due_at``: when the next job falls due (for the idle sleep).
    """

    due: bool
    republish: bool
    stale: bool
    next_due_at: datetime | None


def scheduler_probe(
    *, now: datetime, pending_before: datetime, queued_before: datetime, stale_before: datetime
) -> Probe:
    """Ask every question of an idle tick in one round trip, each an index probe.

    An idle scheduler otherwise spends a transaction on each of claim, republish and reap;
    with this it pays one short query per tick, whatever the number of jobs.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SCHEDULER_PROBE,
            [now, pending_before, queued_before, now, stale_before],
        )
        due, republish, stale, next_due = cursor.fetchone()
    if isinstance(next_due, str):  # SQLite returns the raw text of the column
        parsed = parse_datetime(next_due)
        next_due = parsed.replace(tzinfo=UTC) if parsed and parsed.tzinfo is None else parsed
    return Probe(bool(due), bool(republish), bool(stale), next_due)
