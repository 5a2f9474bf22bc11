"""Reads for the command line and the admin: plain dictionaries, newest first."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta, tzinfo
from typing import Any, TypeVar

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

from scheduling import conf
from scheduling.commandline.exports import ALL_TIME, Window, in_key_order
from scheduling.ledger import pgtimes
from scheduling.ledger.engines import engine
from scheduling.ledger.values import Probe as Probe  # the idle tick's answers, read here
from scheduling.models import (
    Execution,
    ExecutionStatus,
    Job,
    JobStatus,
    Schedule,
    job_due_index,
)
from scheduling.rules import tasktables
from scheduling.rules.validation import storable
from scheduling.stages import pauses
from scheduling.timing import readable
from scheduling.timing.calendar_words import describe_calendar
from scheduling.timing.readable import describe_interval


def scheduler_probe(**bounds: datetime) -> Probe:
    """Every question of an idle tick, in one round trip (``Engine.probe``)."""
    return engine().probe(**bounds)


def _iso(value: datetime | None) -> str | None:
    """ISO 8601 with the offset; the calendar's ends as ``pgtimes`` says them (year first)."""
    if value is None:
        return None
    if value.year in _EDGE_YEARS:
        return pgtimes.describe(value)
    return value.isoformat()


#: The years in which a time may be one of ``pgtimes``' clamped ends.
_EDGE_YEARS = (datetime.min.year, datetime.max.year)


def cancel_reason(execution_id: int) -> str | None:
    """Why the execution was cancelled (its ``last_error``), or None if it is not cancelled."""
    row = (
        Execution.objects.filter(pk=execution_id, status=ExecutionStatus.CANCELLED)
        .values_list("last_error", flat=True)
        .first()
    )
    return None if row is None else row or "cancelled"


def find_job(name: str, *, owner: str | None = None) -> Job:
    """The job called ``name`` (of ``owner`` when given); errors name the field.

    A name no row can hold (a NUL typed on the command line) is simply not found.
    """
    jobs = pauses.with_pauses(Job.objects.select_related("schedule", "owner").filter(name=name))
    if owner:
        jobs = jobs.filter(owner__username=owner)
    found = list(jobs[:2]) if storable(name) and storable(owner or "") else []
    if not found:
        suffix = f" owned by {owner!r}" if owner else ""
        raise ValidationError({"name": f"no job named {name!r}{suffix}"})
    if len(found) > 1:
        raise ValidationError({"name": f"several owners have a job named {name!r}; pass --owner"})
    return found[0]


# --- runs named for what they are --------------------------------------------------------------

#: The name ``schedule_row`` gives a job when its app gives none: ``app.Model:row id[:n]``.
_ROW_JOB_NAME = re.compile(r"^(?P<label>[\w.]+):(?P<row>\d+)(?::(?P<n>\d+))?$")


def _row_job_number(job: Job) -> int | None:
    """For a job still called by the name ``schedule_row`` made up for it, its number among
    the row's jobs (1 for ``app.Model:7`` and ``app.Model:7:1``); None for any other job."""
    if not job.task_table:
        return None
    found = _ROW_JOB_NAME.match(job.name)
    if found is None or found["label"] != job.task_table or int(found["row"]) != job.task_row_id:
        return None
    return int(found["n"] or 1)


def job_titles(jobs: Iterable[Job]) -> dict[int, str]:
    """Each job's name as people read it, by job id, in one query per task table.

    A job someone named keeps its name. A job a domain app made without one (stored as
    ``app.Model:7:1``) is called by the row it serves, in the words its app declared
    (``@task_table(..., describe=...)``): "email 'welcome' of project Acme"; a row's second
    job "… (schedule 2)". A row that is gone leaves the stored name.
    """
    jobs = list(jobs)
    wanted: dict[str, set[int]] = {}
    for job in jobs:
        if _row_job_number(job) is not None:
            wanted.setdefault(job.task_table, set()).add(int(job.task_row_id))
    words = {label: tasktables.describe_rows(label, ids) for label, ids in wanted.items()}
    titles: dict[int, str] = {}
    for job in jobs:
        number = _row_job_number(job)
        found = words.get(job.task_table, {}).get(job.task_row_id) if number else None
        if found is None:
            titles[job.pk] = job.name
        else:
            titles[job.pk] = found if number == 1 else f"{found} (schedule {number})"
    return titles


def run_titles(executions: Iterable[Execution]) -> dict[int, str]:
    """Each execution named for what it runs, by execution id: its job's title
    (``job_titles``), or, for a run without a job (enqueued through Django's Tasks
    framework, or an ad-hoc call), its task's path. Read ``job`` with ``select_related``."""
    executions = list(executions)
    jobs = {e.job_id: e.job for e in executions if e.job_id is not None and e.job is not None}
    by_job = job_titles(jobs.values())
    return {e.pk: by_job.get(e.job_id, e.task) if e.job_id else e.task for e in executions}


Named = TypeVar("Named", Job, Execution)


def titled(rows: Iterable[Named]) -> list[Named]:
    """``rows`` (jobs or executions) as a list, each with ``title`` set to its name in
    words (``job_titles``, ``run_titles``), for a page or a panel that lists them."""
    found: list[Any] = list(rows)
    jobs = [row for row in found if isinstance(row, Job)]
    runs = [row for row in found if isinstance(row, Execution)]
    titles = {("job", pk): t for pk, t in job_titles(jobs).items()}
    titles.update({("run", pk): t for pk, t in run_titles(runs).items()})
    for row in found:
        row.title = titles["job" if isinstance(row, Job) else "run", row.pk]
    return found


def describe_target(job: Job) -> str:
    """What a job runs, as a person reads it: the task's name, or the task-table row by its
    own name ("send email task: invitation"), or why the row cannot be found. The admin's
    job list and ``jobs list`` / ``jobs show`` say it in these words."""
    return describe_targets([job])[job.pk]


def describe_targets(jobs: Iterable[Job]) -> dict[int, str]:
    """``describe_target`` of each job, by job id, in one query per task table."""
    jobs = list(jobs)
    wanted: dict[str, set[int]] = {}
    for job in jobs:
        if job.task_table:
            wanted.setdefault(job.task_table, set()).add(int(job.task_row_id))
    rows: dict[str, tuple[str, dict[int, Any]]] = {}
    for label, ids in wanted.items():
        try:
            model = tasktables.get(label).model
        except LookupError:
            continue
        rows[label] = (str(model._meta.verbose_name), model._default_manager.in_bulk(ids))
    targets: dict[int, str] = {}
    for job in jobs:
        if not job.task_table:
            targets[job.pk] = job.shown_task
        elif job.task_table not in rows:
            targets[job.pk] = f"{job.task_table} #{job.task_row_id} (not a task table)"
        else:
            name, found = rows[job.task_table]
            row = found.get(job.task_row_id)
            gone = f"{name} #{job.task_row_id} (gone)"
            targets[job.pk] = gone if row is None else f"{name}: {row}"
    return targets


def job_warning(job: Job) -> str | None:
    """The warning a job's status carries, or None: an active job whose last runs all ended
    without completing (``unfinished_runs``; read by ``with_health`` or ``list_jobs``, or
    asked here in one query for a job read without it). A paused job warns of nothing."""
    if job.status != JobStatus.ACTIVE:
        return None
    never = getattr(job, "never_completes", None)
    if never is None:
        never = (
            Job.objects.filter(pk=job.pk)
            .annotate(**unfinished_runs())
            .values_list("never_completes", flat=True)
            .first()
        )
    return never_completes_warning() if never else None


def job_summary(job: Job, *, title: str | None = None, target: str | None = None) -> dict[str, Any]:
    """A job as plain values; ``title`` and ``target`` when the caller read those of many
    jobs at once (``job_titles``, ``describe_targets``)."""
    schedule = job.schedule
    return {
        "id": job.pk,
        "name": job.name,
        "title": job_titles([job])[job.pk] if title is None else title,
        "owner": job.owner.get_username(),
        "status": job.status,
        "warning": job_warning(job),
        "task": job.task,
        "target": describe_target(job) if target is None else target,
        "declared_task": job.declared_task or None,
        "declared_in": job.declaration or None,
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
        "paused": pauses.paused_by(job),
        "pause_after_failures": job.pause_after_failures,
        "consecutive_failures": job.consecutive_failures,
        "note": job.note,
        "created_at": _iso(job.created_at),
    }


def list_jobs() -> QuerySet[Job]:
    """Every job, by name, with who paused it (``pauses.with_pauses``) and whether its runs
    never complete (``unfinished_runs``, for ``job_warning``), in one statement."""
    return pauses.with_pauses(
        Job.objects.select_related("schedule", "owner")
        .annotate(**unfinished_runs())
        .order_by("name", "owner__username")
    )


#: The columns an execution's summary is made of: read whole rows for a page, or these
#: alone, as they are, for an export (``export_executions``).
SUMMARY_COLUMNS = (
    "id",
    "job_id",
    "task",
    "scheduled_for",
    "status",
    "retry_count",
    "task_id",
    "worker",
    "queued_at",
    "started_at",
    "finished_at",
    "last_heartbeat_at",
    "retry_at",
    "last_error",
    "checkpoint",
    "duplicates",
    "item_failures",
    "item_failure_detail",
    "call",
    "result",
)


def summary_of(row: Mapping[str, Any], *, job: str | None, title: str) -> dict[str, Any]:
    """The one form of an execution for the command line and ``api``, from its
    ``SUMMARY_COLUMNS`` (a row read whole or those columns alone), its job's name and its
    name in words; instants in ISO 8601 with their offset."""
    return {
        "id": row["id"],
        "job": job,
        "title": title,
        "task": row["task"],
        "scheduled_for": _iso(row["scheduled_for"]),
        "status": row["status"],
        "retry_count": row["retry_count"],
        "task_id": str(row["task_id"]),
        "worker": row["worker"] or None,
        "queued_at": _iso(row["queued_at"]),
        "started_at": _iso(row["started_at"]),
        "finished_at": _iso(row["finished_at"]),
        "last_heartbeat_at": _iso(row["last_heartbeat_at"]),
        "retry_at": _iso(row["retry_at"]),
        "last_error": row["last_error"] or None,
        "checkpoint": row["checkpoint"],
        "duplicates": row["duplicates"],
        "item_failures": row["item_failures"],
        "item_failure_detail": row["item_failure_detail"] or None,
        # Runs enqueued through Django's Tasks framework: arguments and return value or errors.
        "call": row["call"],
        "result": row["result"],
    }


def execution_summary(
    execution: Execution, *, attempts: bool = False, title: str | None = None
) -> dict[str, Any]:
    """The execution as the command line and ``api`` show it; ``title`` is its name in words
    (``run_titles``, read for a page at once), read here when not given."""
    data = summary_of(
        {column: getattr(execution, column) for column in SUMMARY_COLUMNS},
        job=execution.job.name if execution.job_id and execution.job else None,
        title=run_titles([execution])[execution.pk] if title is None else title,
    )
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


def _executions(
    *, job: Job | None, owner: str | None, status: str | None, window: Window
) -> QuerySet[Execution]:
    """Executions of one job, or of every job ``owner`` (a username) owns, in ``status``,
    due in ``window``; the filters checked, each refusal naming its field."""
    check_execution_status(status)
    rows = window.of(Execution.objects.all(), "scheduled_for")
    if job is not None:
        rows = rows.filter(job=job)
    if owner:
        users = get_user_model().objects.filter(username=owner)
        if not (storable(owner) and users.exists()):
            raise ValidationError({"owner": f"no user named {owner!r}"})
        rows = rows.filter(job__owner__username=owner)
    if status:
        rows = rows.filter(status=status)
    return rows


def list_executions(
    *,
    job: Job | None = None,
    owner: str | None = None,
    status: str | None = None,
    limit: int = 50,
    window: Window = ALL_TIME,
) -> QuerySet[Execution]:
    """Executions newest first: of one job, or of every job ``owner`` (a username) owns."""
    limit = check_limit(limit)
    rows = _executions(job=job, owner=owner, status=status, window=window)
    return rows.select_related("job").order_by("-scheduled_for", "-id")[:limit]


def export_executions(
    *,
    job: Job | None = None,
    owner: str | None = None,
    status: str | None = None,
    window: Window = ALL_TIME,
    limit: int | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """Every matching execution's summary (``summary_of``), oldest first by
    ``(scheduled_for, id)``, a page at a time, in memory that does not grow with the ledger
    (``exports.in_key_order``); at most ``limit`` when given, else no cap.

    Only ``SUMMARY_COLUMNS`` are read, as tuples: no model is built per row. Jobs are read
    once per page for the ones not met yet (their names and titles kept, up to
    ``_JOBS_KEPT``, then read again), so a page costs two queries.
    """
    rows = _executions(job=job, owner=owner, status=status, window=window).values_list(
        *SUMMARY_COLUMNS
    )
    at, pk, job_at = (SUMMARY_COLUMNS.index(c) for c in ("scheduled_for", "id", "job_id"))
    names: dict[int, tuple[str, str]] = {}
    for page in in_key_order(
        rows,
        time_field="scheduled_for",
        key=lambda row: (row[at], row[pk]),
        limit=limit,
    ):
        ids = {row[job_at] for row in page if row[job_at] is not None}
        wanted = ids - names.keys()
        if wanted:
            if len(names) + len(wanted) > _JOBS_KEPT:
                names.clear()  # then every job of this page is read again, not only the new
                wanted = ids
            met = list(Job.objects.filter(pk__in=wanted))
            titles = job_titles(met)
            names.update({j.pk: (j.name, titles[j.pk]) for j in met})
        summaries = []
        for values in page:
            row = dict(zip(SUMMARY_COLUMNS, values, strict=False))
            name, title = names.get(row["job_id"], (None, row["task"]))
            summaries.append(summary_of(row, job=name, title=title))
        yield summaries


#: Jobs whose names an export keeps between pages.
_JOBS_KEPT = 10_000


def task_row_target(execution_id: int) -> tuple[str, int] | None:
    """The task table and row id of the execution's job, if it targets a task-table row."""
    row = (
        Execution.objects.filter(pk=execution_id, job__isnull=False)
        .exclude(job__task_table="")
        .values("job__task_table", "job__task_row_id")
        .first()
    )
    return (row["job__task_table"], int(row["job__task_row_id"])) if row else None


def declared_target(execution_id: int) -> str:
    """The Celery task a declared job runs through ``scheduling.run_celery_task``, or ""."""
    found = (
        Execution.objects.filter(pk=execution_id, job__isnull=False)
        .values_list("job__declared_task", flat=True)
        .first()
    )
    return found or ""


# --- the schedule in words, and the job list's health columns --------------------------------


def describe_cron(expression: str) -> str:
    """A cron expression in words ("at 09:00, Monday through Friday"): ``readable``'s rule."""
    return readable.describe_cron(expression)


def describe_schedule(schedule: Schedule, zone: tzinfo | None = None) -> str:
    """The schedule as a person reads it: kind, zone and window (its instants in ``zone``,
    the current one when not given)."""
    if schedule.interval:
        text = describe_interval(schedule.interval)
    elif schedule.cron:
        text = f"{describe_cron(schedule.cron)} ({schedule.timezone})"
    elif schedule.rrule:
        text = describe_calendar(schedule.rrule, schedule.timezone)
    elif schedule.run_at:
        text = f"once at {readable.instant(schedule.run_at, zone)}"
    else:
        text = "once"
    if schedule.starts_at:
        text += f", from {readable.instant(schedule.starts_at, zone)}"
    if schedule.ends_at:
        text += f", until {readable.instant(schedule.ends_at, zone)}"
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
    ``failures_24h``, ``is_late`` and ``never_completes`` (``unfinished_runs``). The last run
    is the newest occurrence that left the queue (pending and queued ones have not run yet).
    """
    history = Execution.objects.filter(job=OuterRef("pk"))
    last = history.exclude(status__in=[ExecutionStatus.PENDING, ExecutionStatus.QUEUED]).order_by(
        "-scheduled_for", "-id"
    )
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
        **unfinished_runs(),
    )


#: How a run ended that did not complete: stopped, replaced, or failed.
NEVER_COMPLETED = (
    ExecutionStatus.CANCELLED,
    ExecutionStatus.SUPERSEDED,
    ExecutionStatus.FAILED,
)


def never_completes_warning(*, why: bool = True) -> str:
    """What the job list and the dashboard say of a job whose runs never complete; without
    ``why``, the short form a status in parentheses holds ("active (none of its last 5 runs
    completed)")."""
    n = conf.get("WARN_AFTER_UNFINISHED_RUNS")
    said = f"none of its last {n} runs completed"
    return f"{said} (cancelled, superseded or failed)" if why else said


def unfinished_runs() -> dict[str, Any]:
    """Annotations saying whether a job's last N finished runs all ended without completing
    (``NEVER_COMPLETED``), N being ``SCHEDULING_WARN_AFTER_UNFINISHED_RUNS``: a job whose every
    run is cancelled by the next (``cancel_other`` with a body longer than the interval) or
    fails reads "active" and looks healthy otherwise.

    Two correlated subqueries on the ``(job, scheduled_for)`` unique index, read backwards:
    the N-th newest finished run's time (``nth_finished_at``), then whether any finished run
    since then completed or was skipped. Runs not finished yet (the one in flight) are not
    counted. ``never_completes`` is False for a job with fewer than N finished runs.
    """
    n = conf.get("WARN_AFTER_UNFINISHED_RUNS")
    finished = Execution.objects.finished().filter(job=OuterRef("pk"))
    nth = finished.order_by("-scheduled_for").values("scheduled_for")[n - 1 : n]
    completed_since = finished.filter(scheduled_for__gte=OuterRef("nth_finished_at")).exclude(
        status__in=NEVER_COMPLETED
    )
    return {
        "nth_finished_at": Subquery(nth),
        "never_completes": ExpressionWrapper(
            Q(nth_finished_at__isnull=False) & ~Exists(completed_since),
            output_field=BooleanField(),
        ),
    }


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
