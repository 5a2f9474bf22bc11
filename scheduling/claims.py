"""The claim: take due jobs, create their executions, advance them, in one short transaction.

This is the scheduler's hot path, so it works on plain rows instead of model instances: one
``SELECT … FOR NO KEY UPDATE SKIP LOCKED`` (the row locks that keep two schedulers apart), the
timing decisions of ``scheduling.schedules.plan_claim`` (the only place they live), one
multi-row INSERT of executions and one UPDATE of the jobs. On PostgreSQL the writes are
``unnest`` statements; SQLite, which serialises writers anyway, uses the ORM's bulk methods.
Nothing is published here: ``scheduling.dispatch`` does that after the commit.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction

from scheduling import conf, schedules
from scheduling.models import Execution, ExecutionStatus, Job, JobStatus, Overlap
from scheduling.schedules import Misfire, ScheduleError, Timing
from scheduling.validation import check_target_values

logger = logging.getLogger("scheduling")

SKIPPED_NOTE = (
    "missed while the scheduler was away or the job was paused; skipped by the misfire policy"
)


@dataclass(frozen=True)
class Doorbell:
    """Everything needed to publish the message for one execution."""

    execution_id: int
    task_id: str
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    priority: int | None
    timeout: int


_DUE_FIELDS = (
    "pk",
    "next_occurrence_at",
    "next_due_at",
    "created_at",
    "misfire",
    "overlap",
    "jitter",
    "task",
    "args",
    "kwargs",
    "queue",
    "priority",
    "timeout",
    "task_table",
    "task_row_id",
    "schedule__interval",
    "schedule__cron",
    "schedule__timezone",
    "schedule__run_at",
    "schedule__starts_at",
    "schedule__ends_at",
)


@dataclass
class _Due:
    """One locked due job, as plain values, and what the claim decides for it."""

    row: dict[str, Any]
    status: str = JobStatus.ACTIVE
    next_occurrence: datetime | None = None
    next_due: datetime | None = None
    executions: list[dict[str, Any]] = field(default_factory=list)
    current_execution_id: int | None = None


def claim_due_jobs(*, now: datetime, limit: int) -> list[Doorbell]:
    """Claim up to ``limit`` due jobs and return the doorbells to publish after the commit.

    A job whose schedule or target is broken gets a FAILED execution naming the reason (and a
    broken schedule pauses it); every other due job in the batch is served as usual.
    """
    grace = timedelta(seconds=conf.get("MISFIRE_GRACE"))
    catch_up_limit = max(1, conf.get("CATCH_UP_LIMIT"))
    with transaction.atomic():
        rows = list(
            Job.objects.filter(
                status=JobStatus.ACTIVE, current_execution__isnull=True, next_due_at__lte=now
            )
            .select_for_update(skip_locked=True, no_key=True, of=("self",))
            .order_by("next_due_at")
            .values(*_DUE_FIELDS)[:limit]
        )
        if not rows:
            return []
        timings: dict[tuple[Any, ...], Timing | ScheduleError] = {}
        targets: dict[tuple[Any, ...], str] = {}
        due = [_plan(row, now, grace, catch_up_limit, timings, targets) for row in rows]
        created = _insert_executions(due, now=now)
        for item in due:
            if item.row["overlap"] == Overlap.FORBID:
                first = next(
                    (e for e in item.executions if e["status"] == ExecutionStatus.PENDING), None
                )
                item.current_execution_id = first["id"] if first else None
        _update_jobs(due, now=now)
    logger.info("dispatch.claimed jobs=%s executions=%s", len(due), len(created))
    bells = []
    for item in due:
        for execution in item.executions:
            logger.debug(
                "job.claimed job=%s execution=%s scheduled_for=%s status=%s",
                item.row["pk"],
                execution["id"],
                execution["scheduled_for"].isoformat(),
                execution["status"],
            )
            if execution["status"] == ExecutionStatus.PENDING:
                bells.append(_bell(item.row, execution))
    return bells


def _bell(row: dict[str, Any], execution: dict[str, Any]) -> Doorbell:
    return Doorbell(
        execution_id=execution["id"],
        task_id=str(execution["task_id"]),
        task=row["task"],
        args=_json(row["args"]),
        kwargs=_json(row["kwargs"]),
        queue=row["queue"],
        priority=row["priority"],
        timeout=row["timeout"],
    )


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def _timing(row: dict[str, Any], cache: dict[tuple[Any, ...], Timing | ScheduleError]) -> Any:
    key = (
        row["schedule__interval"],
        row["schedule__cron"],
        row["schedule__timezone"],
        row["schedule__run_at"],
        row["schedule__starts_at"],
        row["schedule__ends_at"],
    )
    if key not in cache:
        try:
            cache[key] = schedules.timing_from(*key)
        except ScheduleError as exc:
            cache[key] = exc
    return cache[key]


def _target_error(row: dict[str, Any], cache: dict[tuple[Any, ...], str]) -> str:
    key = (row["task"], row["task_table"], row["task_row_id"])
    if key not in cache:
        try:
            check_target_values(
                task=row["task"], task_table=row["task_table"], task_row_id=row["task_row_id"]
            )
        except ValidationError as exc:
            cache[key] = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
        else:
            cache[key] = ""
    return cache[key]


def _execution(row: dict[str, Any], at: datetime, status: str, now: datetime) -> dict[str, Any]:
    return {
        "job_id": row["pk"],
        "task": row["task"],
        "scheduled_for": at,
        "status": status,
        "task_id": uuid.uuid4(),
        "created_at": now,
        "queued_at": now if status == ExecutionStatus.PENDING else None,
        "finished_at": None if status == ExecutionStatus.PENDING else now,
        "last_error": "",
    }


def _plan(
    row: dict[str, Any],
    now: datetime,
    grace: timedelta,
    catch_up_limit: int,
    timings: dict[tuple[Any, ...], Timing | ScheduleError],
    targets: dict[tuple[Any, ...], str],
) -> _Due:
    item = _Due(row=row)
    occurrence = row["next_occurrence_at"] or row["next_due_at"]
    timing = _timing(row, timings)
    if isinstance(timing, ScheduleError):
        failed = _execution(row, occurrence, ExecutionStatus.FAILED, now)
        failed["last_error"] = f"schedule is invalid: {timing}"
        logger.error("execution.failed job=%s error=%s", row["pk"], failed["last_error"])
        item.executions.append(failed)
        item.status = JobStatus.PAUSED
        item.next_occurrence, item.next_due = row["next_occurrence_at"], row["next_due_at"]
        return item
    plan = schedules.plan_claim(
        timing,
        anchor=row["created_at"],
        due=occurrence,
        now=now,
        misfire=Misfire(row["misfire"]),
        allow_overlap=row["overlap"] == Overlap.ALLOW,
        grace=grace,
        catch_up_limit=catch_up_limit,
    )
    error = _target_error(row, targets)
    for at in plan.run:
        if error:
            failed = _execution(row, at, ExecutionStatus.FAILED, now)
            failed["last_error"] = error
            logger.error("execution.failed job=%s scheduled_for=%s error=%s", row["pk"], at, error)
            item.executions.append(failed)
        else:
            item.executions.append(_execution(row, at, ExecutionStatus.PENDING, now))
    if plan.skipped is not None:
        skipped = _execution(row, plan.skipped, ExecutionStatus.SKIPPED, now)
        skipped["last_error"] = SKIPPED_NOTE
        item.executions.append(skipped)
    item.next_occurrence = plan.next_occurrence
    if plan.next_occurrence is None:
        item.status = JobStatus.COMPLETED
    else:
        item.next_due = schedules.due_time(row["pk"], plan.next_occurrence, row["jitter"])
    return item


_INSERT_COLUMNS = (
    ("job_id", "bigint"),
    ("task", "varchar"),
    ("scheduled_for", "timestamptz"),
    ("status", "varchar"),
    ("task_id", "uuid"),
    ("created_at", "timestamptz"),
    ("queued_at", "timestamptz"),
    ("finished_at", "timestamptz"),
    ("last_error", "text"),
)


def _insert_executions(due: Sequence[_Due], *, now: datetime) -> list[dict[str, Any]]:
    """Insert every planned execution in one statement and fill in their ids.

    An occurrence that already has its execution (a manual ``jobs run`` at that very instant)
    is left as it is and dropped from the plan, instead of failing the whole batch on the
    one-per-occurrence constraint.
    """
    rows = [execution for item in due for execution in item.executions]
    if not rows:
        return rows
    if connection.vendor == "postgresql":
        names = ", ".join(name for name, _ in _INSERT_COLUMNS)
        types = ", ".join(f"{name} {kind}" for name, kind in _INSERT_COLUMNS)
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                INSERT INTO {Execution._meta.db_table}
                       ({names}, retry_count, worker, duplicates, updated_at)
                SELECT {names}, 0, '', 0, %s
                  FROM json_to_recordset(%s::json) AS v({types})
                    ON CONFLICT (job_id, scheduled_for) DO NOTHING
                RETURNING id, task_id
                """,
                [now, _to_json(rows, [name for name, _ in _INSERT_COLUMNS])],
            )
            ids = {str(task_id): pk for pk, task_id in cursor.fetchall()}
    else:
        taken = set(
            Execution.objects.filter(
                job_id__in={row["job_id"] for row in rows},
                scheduled_for__in={row["scheduled_for"] for row in rows},
            ).values_list("job_id", "scheduled_for")
        )
        fresh = [row for row in rows if (row["job_id"], row["scheduled_for"]) not in taken]
        Execution.objects.bulk_create([Execution(**row, updated_at=now) for row in fresh])
        ids = dict(
            Execution.objects.filter(task_id__in=[row["task_id"] for row in fresh]).values_list(
                "task_id", "pk"
            )
        )
        ids = {str(task_id): pk for task_id, pk in ids.items()}
    for item in due:
        kept = []
        for row in item.executions:
            pk = ids.get(str(row["task_id"]))
            if pk is None:
                logger.info(
                    "job.occurrence_exists job=%s scheduled_for=%s",
                    row["job_id"],
                    row["scheduled_for"].isoformat(),
                )
                continue
            row["id"] = pk
            kept.append(row)
        item.executions = kept
    return [row for item in due for row in item.executions]


def _to_json(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> str:
    """Rows as one JSON array for ``json_to_recordset``: a C-speed encoding of a whole batch
    (binding arrays per column costs more in Python than the statement costs the server)."""
    return json.dumps([{name: row[name] for name in names} for row in rows], default=_plain)


def _plain(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _update_jobs(due: Sequence[_Due], *, now: datetime) -> None:
    """Write every claimed job's new position in one statement."""
    if connection.vendor == "postgresql":
        values = [
            {
                "id": item.row["pk"],
                "next_due_at": item.next_due,
                "next_occurrence_at": item.next_occurrence,
                "current_execution_id": item.current_execution_id,
                "status": item.status,
            }
            for item in due
        ]
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                UPDATE {Job._meta.db_table} AS j
                   SET next_due_at = v.next_due_at,
                       next_occurrence_at = v.next_occurrence_at,
                       current_execution_id = v.current_execution_id,
                       status = v.status,
                       updated_at = %s
                  FROM json_to_recordset(%s::json) AS v(id bigint, next_due_at timestamptz,
                       next_occurrence_at timestamptz, current_execution_id bigint,
                       status varchar)
                 WHERE j.id = v.id
                """,
                [now, _to_json(values, list(values[0]))],
            )
        return
    jobs = [
        Job(
            pk=item.row["pk"],
            next_due_at=item.next_due,
            next_occurrence_at=item.next_occurrence,
            current_execution_id=item.current_execution_id,
            status=item.status,
            updated_at=now,
        )
        for item in due
    ]
    Job.objects.bulk_update(
        jobs, ["next_due_at", "next_occurrence_at", "current_execution", "status", "updated_at"]
    )
