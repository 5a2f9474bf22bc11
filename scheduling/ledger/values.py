"""What the engine's verbs take and give back: typed values, the same for every engine.

A stage reads these and never a database's rows: an engine decodes its rows into them by
column name (``ledger.rows(..., into=...)``) or builds them from the ORM's values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any


@dataclass(frozen=True)
class Started:
    """One started attempt: what the worker needs to run the body and end it."""

    execution_id: int
    job_id: int | None
    attempt: int
    checkpoint: Any
    scheduled_for: datetime
    #: The worker's clock at the start: with ``attempt``, what ``restore_start`` writes again.
    started_at: datetime
    #: With the message, what a Django task's RUNNING result needs, so that the worker builds
    #: it without reading the run back before the body (``djangotasks.results.started_result``):
    #: when the run was written, the call it was enqueued with (arguments and the options of
    #: ``.using()``; None for a job's occurrence), the errors of its earlier attempts, and their
    #: workers and first start, oldest first. None where the engine did not say.
    created_at: datetime | None = None
    call: dict[str, Any] | None = None
    errors: tuple[dict[str, Any], ...] = ()
    earlier_workers: tuple[str, ...] = ()
    first_started_at: datetime | None = None


@dataclass(frozen=True)
class Completed:
    """A completion that was written, and the job of its execution."""

    job_id: int | None


@dataclass(frozen=True)
class Probe:
    """What an idle tick needs to know, each answer from one index probe.

    ``due``: a job to claim; ``republish``: a message to publish (again); ``stale``: a run
    whose heartbeat stopped; ``next_due_at``: when the next job is due; ``waiting``:
    executions waiting for a running slot (``scheduling.stages.limits``).
    """

    due: bool
    republish: bool
    stale: bool
    next_due_at: datetime | None
    waiting: bool = False


@dataclass(frozen=True)
class Declared:
    """Where the code declares a job: what ``mark_declared`` writes on its row.

    ``origin`` and ``key`` name the entry (``SCHEDULING_JOBS['nightly']``), ``fingerprint``
    its values as the code gives them (the job is in step while they match), ``release`` the
    declaration set that wrote it (``DeclarationSet.sequence``) and ``task`` the Celery task a
    declared non-schedulable task runs through the runner ("" otherwise).
    """

    origin: str
    key: str
    fingerprint: str
    release: int | None
    task: str


@dataclass(frozen=True)
class Cancelled:
    """A run the claim cancelled: its message's id, and whether a worker was running it."""

    execution_id: int
    task_id: str
    was_running: bool


#: Periods of the partitioned history start on a Monday at midnight UTC, counted from this one.
ANCHOR = datetime(2000, 1, 3, tzinfo=UTC)


@dataclass(frozen=True)
class Period:
    """One period of the partitioned history: ``[start, end)`` of ``scheduled_for``."""

    start: datetime
    end: datetime

    @property
    def suffix(self) -> str:
        return self.start.strftime("p%Y%m%d")

    def name(self, table: str) -> str:
        return f"{table}_{self.suffix}"


def period_of(instant: datetime, days: int) -> Period:
    """The period of ``days`` days that holds ``instant``."""
    length = timedelta(days=days)
    start = ANCHOR + ((instant - ANCHOR) // length) * length
    return Period(start, start + length)


@dataclass(frozen=True)
class Latest:
    """The jobs whose latest executions a dropped period may hold, each with its ``keep``-th
    newest occurrence (None: it has fewer, so every one of its executions is kept)."""

    jobs: list[int]
    nth: list[datetime | None]


@dataclass
class Dropped:
    """One period dropped: what went, by job, and how many executions were kept."""

    period: Period
    executions: int
    attempts: int
    kept: int
    by_job: dict[int | None, int] = field(default_factory=dict)


#: The fields of a locked, unplanned job that ``lock_due`` returns and the claim plans from,
#: by name (``schedule__*``: its schedule's).
DUE_FIELDS = (
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
    "schedule__rrule",
    "task_unknown_since",
)
