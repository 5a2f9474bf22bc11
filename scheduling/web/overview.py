"""Reads for the operators' views: the dashboard, ``/health/`` and ``/metrics``.

Every read is bounded in time or limited to a small partial index, so its cost follows the
recent work, never the size of the history: ``due_soon`` reads ``job_due_idx``; ``running``
and ``stale`` read ``execution_running_idx``; ``late`` reads ``job_due_idx`` and
``execution_waiting_idx`` / ``execution_retry_idx``; ``recent_failures`` reads
``execution_failed_idx``; ``item_failures`` reads ``execution_item_failures_idx``;
``lag_percentiles`` reads ``execution_recent_idx`` alone; ``executions_per_hour`` reads the
settled hours' rows and ``execution_recent_idx`` for the rest;
``paused_after_failures`` reads ``job_paused_failures_idx``;
``unconsumed_queues`` reads ``execution_waiting_idx`` and, only for a queue whose work has
waited too long, ``execution_running_idx`` and the newest attempts by primary key;
``awaiting_tasks`` reads ``job_task_unknown_idx`` and ``execution_task_unknown_idx``;
``recent_by_status`` reads ``execution_recent_idx`` alone, or ``execution_task_runs_idx`` for
the Django task runs. bench/dashboard.py times each with a million executions, and
bench/history.py cold with ten million.

``owner_id`` limits a read to one owner's jobs (staff users who are not superusers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import CharField, Count, Min, Q, QuerySet, Subquery, Sum, Value
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce

from scheduling import conf
from scheduling.ledger.engines import engine
from scheduling.models import (
    Attempt,
    Execution,
    ExecutionStatus,
    Job,
    JobStatus,
    PauseKind,
    job_due_index,
)
from scheduling.rules import tasktables
from scheduling.rules.validation import unknown_target
from scheduling.stages import hours as settled_hours
from scheduling.stages import selectors
from scheduling.timing import readable

DAY = timedelta(hours=24)
HOUR = timedelta(hours=1)
LAG_QUANTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True)
class Panel:
    """A count and the first few rows behind it."""

    count: int
    rows: list[Any]


def _jobs(owner_id: int | None, *, internal: bool = True) -> QuerySet[Job]:
    rows = Job.objects.all() if internal else Job.objects.exclude(tasktables.internal_jobs())
    return rows if owner_id is None else rows.filter(owner_id=owner_id)


def _executions(owner_id: int | None) -> QuerySet[Execution]:
    rows = Execution.objects.all()
    return rows if owner_id is None else rows.filter(job__owner_id=owner_id)


def _waiting_jobs(owner_id: int | None, *, internal: bool = True) -> QuerySet[Job]:
    """Active jobs not waiting on an execution (or whose run the next occurrence cancels):
    exactly the rows of ``job_due_idx``.

    ``internal=False`` leaves out the jobs made for a domain app on its own (due batches).
    """
    return _jobs(owner_id, internal=internal).filter(job_due_index())


def _panel(rows: QuerySet[Any], limit: int) -> Panel:
    first = list(rows[:limit])
    count = len(first) if len(first) < limit else rows.order_by().count()
    return Panel(count=count, rows=first)


def due_soon(
    *,
    now: datetime,
    within: timedelta = HOUR,
    limit: int = 10,
    owner_id: int | None = None,
    internal: bool = True,
) -> Panel:
    """Jobs whose next occurrence falls due between now and ``within`` from now."""
    rows = (
        _waiting_jobs(owner_id, internal=internal)
        .filter(next_due_at__gte=now, next_due_at__lt=now + within)
        .select_related("schedule")
        .order_by("next_due_at")
    )
    return _panel(rows, limit)


def running(*, now: datetime, limit: int = 10, owner_id: int | None = None) -> Panel:
    """Executions a worker is running now, longest silent first."""
    rows = (
        _executions(owner_id)
        .filter(status=ExecutionStatus.RUNNING, last_heartbeat_at__isnull=False)
        .select_related("job")
        .order_by("last_heartbeat_at")
    )
    return _panel(rows, limit)


def waiting(*, now: datetime, limit: int = 10, owner_id: int | None = None) -> Panel:
    """Executions held back by a running limit (``scheduling.stages.limits``), oldest first."""
    rows = (
        _executions(owner_id)
        .filter(status=ExecutionStatus.WAITING)
        .select_related("job")
        .order_by("scheduled_for")
    )
    return _panel(rows, limit)


def stale(*, now: datetime, limit: int = 10, owner_id: int | None = None) -> Panel:
    """Running executions whose heartbeat is older than ``SCHEDULING_STALE_AFTER``.

    The scheduler reaps them on its next tick; any that stay here mean no scheduler runs.
    """
    cutoff = now - timedelta(seconds=conf.get("STALE_AFTER"))
    rows = (
        _executions(owner_id)
        .filter(status=ExecutionStatus.RUNNING, last_heartbeat_at__lt=cutoff)
        .select_related("job")
        .order_by("last_heartbeat_at")
    )
    return _panel(rows, limit)


@dataclass(frozen=True)
class Late:
    """Work later than ``SCHEDULING_MISFIRE_GRACE``: unclaimed jobs and unstarted executions."""

    jobs: Panel
    executions: Panel

    @property
    def count(self) -> int:
        return self.jobs.count + self.executions.count


def late(
    *, now: datetime, limit: int = 10, owner_id: int | None = None, internal: bool = True
) -> Late:
    """Jobs still unclaimed and executions still unstarted past their due time plus grace."""
    cutoff = now - timedelta(seconds=conf.get("MISFIRE_GRACE"))
    jobs = (
        _waiting_jobs(owner_id, internal=internal)
        .filter(next_due_at__lt=cutoff)
        .order_by("next_due_at")
    )
    waiting = (
        _executions(owner_id)
        .filter(
            Q(
                status__in=[ExecutionStatus.PENDING, ExecutionStatus.QUEUED],
                scheduled_for__lt=cutoff,
            )
            | Q(status=ExecutionStatus.RETRY, retry_at__lt=cutoff)
        )
        .select_related("job")
        .order_by("scheduled_for")
    )
    return Late(jobs=_panel(jobs, limit), executions=_panel(waiting, limit))


def recent_failures(
    *, now: datetime, within: timedelta = DAY, limit: int = 10, owner_id: int | None = None
) -> Panel:
    """Executions that failed for good within ``within``, newest first."""
    rows = (
        _executions(owner_id)
        .filter(status=ExecutionStatus.FAILED, finished_at__gte=now - within)
        .select_related("job")
        .order_by("-finished_at")
    )
    return _panel(rows, limit)


def paused_after_failures(*, limit: int = 10, owner_id: int | None = None) -> Panel:
    """Jobs that paused themselves after failed occurrences in a row, latest pause first
    (``scheduling.stages.failures``), with their reasons."""
    rows = (
        _jobs(owner_id)
        .filter(status=JobStatus.PAUSED, pause_kind=PauseKind.FAILURES)
        .order_by("-updated_at")
    )
    return _panel(rows, limit)


def never_completing(
    *, now: datetime, within: timedelta = DAY, limit: int = 10, owner_id: int | None = None
) -> Panel:
    """Active jobs whose last runs all ended without completing (``selectors.unfinished_runs``),
    by name: a job whose every run is cancelled by the next still reads "active".

    Only jobs with such an end due within ``within`` are asked (``execution_recent_idx``), so
    the dashboard's cost follows the recent history, not the number of jobs.
    """
    recent = Execution.objects.filter(
        status__in=selectors.NEVER_COMPLETED, scheduled_for__gte=now - within
    ).values("job_id")
    rows = (
        _jobs(owner_id)
        .filter(status=JobStatus.ACTIVE, pk__in=recent)
        .annotate(**selectors.unfinished_runs())
        .filter(never_completes=True)
        .order_by("name")
    )
    return _panel(rows, limit)


@dataclass(frozen=True)
class ItemFailures:
    """Single items that failed inside runs (``RunContext.report_failures``): how many in
    all, and the runs that reported them, newest first."""

    count: int
    runs: Panel


def item_failures(
    *, now: datetime, within: timedelta = DAY, limit: int = 10, owner_id: int | None = None
) -> ItemFailures:
    """Failed items reported by runs due within ``within`` (``execution_item_failures_idx``)."""
    rows = (
        _executions(owner_id)
        .filter(item_failures__gt=0, scheduled_for__gte=now - within)
        .select_related("job")
        .order_by("-scheduled_for")
    )
    total = rows.order_by().aggregate(n=Sum("item_failures"))["n"] or 0
    return ItemFailures(count=int(total), runs=_panel(rows, limit))


def executions_per_hour(
    *, now: datetime, hours: int = 24, owner_id: int | None = None
) -> list[tuple[datetime, dict[str, int]]]:
    """Executions due in each of the last ``hours`` hours, by status, oldest hour first.

    Settled hours come from their ``SettledHour`` rows, counted once (``stages.hours``); a
    page counts only the hours that have not settled, so its cost does not grow with how many
    executions a day brings, nor on the first page after a start.
    """
    return settled_hours.per_hour(now=now, hours=hours, owner_id=owner_id)


def lag_percentiles(
    *, now: datetime, within: timedelta = HOUR, owner_id: int | None = None
) -> dict[float, float | None]:
    """Start minus due time, in seconds, at the 50th, 95th and 99th percentile.

    Over executions due within ``within`` that have started (the latest attempt's start, so a
    retried execution counts its retry delays too; ``scheduled_for`` is the nominal time, so
    a job's jitter is part of its lag).
    """
    return engine().lag_percentiles(
        start=now - within, end=now, owner_id=owner_id, quantiles=LAG_QUANTILES
    )


def unfinished_by_status() -> dict[str, int]:
    """Pending, queued, retry, waiting and running executions now (each a small partial
    index); ``waiting`` are those held back by a running limit (``scheduling.stages.limits``)."""
    counts = dict.fromkeys(
        [
            ExecutionStatus.PENDING,
            ExecutionStatus.QUEUED,
            ExecutionStatus.RETRY,
            ExecutionStatus.WAITING,
            ExecutionStatus.RUNNING,
        ],
        0,
    )
    for status in counts:
        counts[status] = Execution.objects.filter(status=status).count()
    return {str(k): v for k, v in counts.items()}


def recent_by_status(
    *, now: datetime, within: timedelta = HOUR, enqueued_only: bool = False
) -> dict[str, int]:
    """Executions due within ``within`` before now, by status (every status, zero included).

    ``enqueued_only`` counts only runs enqueued through Django's Tasks framework (the rows
    that carry a ``call``; a job's executions do not), in the same bounded index range.
    """
    counts = dict.fromkeys(ExecutionStatus.values, 0)
    recent = Execution.objects.filter(scheduled_for__gte=now - within, scheduled_for__lt=now)
    if enqueued_only:
        recent = recent.filter(call__isnull=False)
    for row in recent.values("status").annotate(n=Count("*")).order_by():
        counts[row["status"]] = row["n"]
    return counts


def stale_count(*, now: datetime, older_than: float | None = None) -> int:
    """Running executions whose heartbeat is older than ``older_than`` seconds."""
    seconds = conf.get("STALE_AFTER") if older_than is None else older_than
    return Execution.objects.stale(now - timedelta(seconds=seconds)).count()


def oldest_due(*, now: datetime) -> datetime | None:
    """The due time of the most overdue unclaimed job (``None`` when none is due)."""
    found: datetime | None = (
        _waiting_jobs(None)
        .filter(next_due_at__lte=now)
        .aggregate(first=Min("next_due_at"))["first"]
    )
    return found


#: Queued executions read for the evidence that a queue has no consumer, longest-queued first.
WAITING_READ = 1000
#: Newest attempts read for the evidence that a queue is consumed after all (by primary key).
STARTS_READ = 2000


@dataclass(frozen=True)
class Unconsumed:
    """A queue whose executions wait for a worker while nothing of that queue starts."""

    queue: str
    #: Executions of the queue that have waited longer than the setting (of those read).
    waiting: int
    #: When the longest of those waits began (its due retry, or its creation).
    since: datetime
    #: Names of the jobs those executions belong to, a few, sorted.
    jobs: list[str]

    def describe(self, now: datetime) -> str:
        names = ", ".join(self.jobs) or "runs enqueued without a job"
        minutes = max(1, round((now - self.since).total_seconds() / 60))
        return (
            f"queue {self.queue!r}: {self.waiting} execution(s) have waited up to {minutes} min "
            f"and nothing of this queue started meanwhile; no worker seems to consume it "
            f"(jobs: {names})"
        )


def _queue_of(execution: str = "") -> Coalesce:
    """The queue an execution's message goes to: its job's, else its Django task run's."""
    return Coalesce(
        f"{execution}job__queue",
        KeyTextTransform("queue", f"{execution}call"),
        Value("celery"),
        output_field=CharField(),
    )


def unconsumed_queues(
    *, now: datetime, idle_after: float | None = None, owner_id: int | None = None
) -> list[Unconsumed]:
    """Queues that, by the ledger's evidence, no worker consumes.

    The evidence is the ledger's own, and costs nothing while every queue moves: a queue is
    named when executions of it have been QUEUED (published, not started) since longer than
    ``idle_after`` seconds (``SCHEDULING_QUEUE_IDLE_WARN``; a wait starts at the creation,
    or at the due retry, so publishing a row again does not restart it), and, for those
    queues only, nothing of the queue is running now and no attempt of it started within
    that time among the newest ``STARTS_READ`` attempts. A queue whose workers are merely busy
    runs its own executions, or starts them; a queue nobody consumes does neither. Worker
    processes write nothing for it, and no broadcast waits for workers to answer. ``owner_id``
    names only that owner's waiting executions; the evidence of consumption is every owner's.
    """
    seconds = conf.get("QUEUE_IDLE_WARN") if idle_after is None else idle_after
    if seconds <= 0:
        return []
    since = now - timedelta(seconds=seconds)
    rows = (
        _executions(owner_id)
        .filter(status=ExecutionStatus.QUEUED)  # execution_waiting_idx
        .order_by("queued_at")
        .annotate(waiting_since=Coalesce("retry_at", "created_at"), on_queue=_queue_of())
        .filter(waiting_since__lt=since)
        .values_list("on_queue", "waiting_since", "job__name")[:WAITING_READ]
    )
    waiting: dict[str, list[tuple[datetime, str | None]]] = {}
    for queue, began, job in rows:
        waiting.setdefault(queue, []).append((began, job))
    if not waiting:
        return []
    running = Execution.objects.running().annotate(on_queue=_queue_of())
    newest = Attempt.objects.order_by("-id").values("id")[:STARTS_READ]
    started = Attempt.objects.filter(id__in=Subquery(newest), started_at__gte=since).annotate(
        on_queue=_queue_of("execution__")
    )
    consumed = set(
        running.filter(on_queue__in=list(waiting)).values_list("on_queue", flat=True)
    ) | set(started.filter(on_queue__in=list(waiting)).values_list("on_queue", flat=True))
    return [
        Unconsumed(
            queue=queue,
            waiting=len(found),
            since=min(began for began, _ in found),
            jobs=sorted({job for _, job in found if job})[:5],
        )
        for queue, found in sorted(waiting.items())
        if queue not in consumed
    ]


@dataclass(frozen=True)
class AwaitingTask:
    """Occurrences of one task (or task table) left for a process that knows it."""

    #: The task's name, or the task table's label.
    task: str
    #: Jobs whose due occurrence no scheduler that knows the task has claimed yet.
    jobs: int
    #: Executions a worker or publisher that did not know the task handed back.
    executions: int
    #: When the longest of those waits began.
    since: datetime
    #: Whether the process asking knows the task (a new release's does; an old one's not).
    known_here: bool

    @property
    def count(self) -> int:
        return self.jobs + self.executions

    def describe(self, now: datetime) -> str:
        waited = readable.span((now - self.since).total_seconds())
        where = (
            "this process knows it: they run once it takes them"
            if self.known_here
            else "this process does not know it (an older release?)"
        )
        return (
            f"{self.count} occurrence(s) of task {self.task!r} wait for a process that knows "
            f"it, the longest for {waited}; {where}; they fail after "
            f"SCHEDULING_UNKNOWN_TASK_GRACE ({conf.get('UNKNOWN_TASK_GRACE'):g} s)"
        )


#: Tasks read for ``awaiting_tasks``: a deploy adds a few, never thousands.
AWAITING_READ = 100


def awaiting_tasks(
    *, owner_id: int | None = None, knows: Callable[[str, str], bool] | None = None
) -> list[AwaitingTask]:
    """The tasks whose occurrences wait for a process that knows them (a rolling deploy):
    jobs a scheduler left unclaimed, and executions a worker or publisher handed back.

    Both read partial indexes that hold only such rows (``job_task_unknown_idx``,
    ``execution_task_unknown_idx``), so the read costs nothing outside a deploy. ``knows``
    answers whether this process knows a ``(task, task_table)`` (by default the registry's
    answer; the system check, which runs while Celery loads the registry, brings its own).
    """
    if knows is None:

        def knows(task: str, table: str) -> bool:
            return not unknown_target(task=task, task_table=table)

    found: dict[tuple[str, str], list[Any]] = {}
    jobs = (
        _jobs(owner_id)
        .filter(task_unknown_since__isnull=False)
        .values("task", "task_table")
        .annotate(count=Count("pk"), since=Min("task_unknown_since"))
        .order_by("task", "task_table")[:AWAITING_READ]
    )
    for row in jobs:
        found[(row["task"], row["task_table"])] = [row["count"], 0, row["since"]]
    executions = (
        _executions(owner_id)
        .filter(status=ExecutionStatus.RETRY, task_unknown_since__isnull=False)
        .values("task")
        .annotate(count=Count("pk"), since=Min("task_unknown_since"))
        .order_by("task")[:AWAITING_READ]
    )
    for row in executions:
        entry = found.setdefault((row["task"], ""), [0, 0, row["since"]])
        entry[1] = row["count"]
        entry[2] = min(entry[2], row["since"])
    return [
        AwaitingTask(
            task=table or task,
            jobs=jobs_count,
            executions=executions_count,
            since=since,
            known_here=knows(task, table),
        )
        for (task, table), (jobs_count, executions_count, since) in sorted(found.items())
    ]
