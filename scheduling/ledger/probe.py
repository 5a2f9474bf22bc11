"""The idle tick's statement: every question a scheduler asks when nothing may be due.

- ``scheduler_probe``: is a job due, is a message to publish again, is a run stale, when is the
  next job due, and is a run waiting for a slot, in one round trip of index probes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils.dateparse import parse_datetime

from scheduling import ledger
from scheduling.models import Execution, ExecutionStatus, Job, JobStatus, Overlap

JOB = Job._meta.db_table
EXECUTION = Execution._meta.db_table
ACTIVE = JobStatus.ACTIVE.value
PENDING, QUEUED, RETRY = (
    s.value for s in (ExecutionStatus.PENDING, ExecutionStatus.QUEUED, ExecutionStatus.RETRY)
)
RUNNING, WAITING = ExecutionStatus.RUNNING.value, ExecutionStatus.WAITING.value
CANCEL_OTHER = Overlap.CANCEL_OTHER.value


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


# -- scheduler_probe: every question of an idle tick, each an index probe (the same text runs
#    on both databases). The states are literals, so each probe matches its partial index's
#    predicate whatever way the driver binds parameters.
SCHEDULER_PROBE = ledger.Statement.portable(
    f"""
    SELECT
      EXISTS (SELECT 1 FROM {JOB} WHERE status = '{ACTIVE}'
               AND (current_execution_id IS NULL OR overlap = '{CANCEL_OTHER}')
               AND next_due_at <= %(now)s) AS due,
      EXISTS (SELECT 1 FROM {EXECUTION} WHERE status = '{PENDING}'
               AND queued_at < %(pending_before)s)
      OR EXISTS (SELECT 1 FROM {EXECUTION} WHERE status = '{QUEUED}'
               AND queued_at < %(queued_before)s)
      OR EXISTS (SELECT 1 FROM {EXECUTION} WHERE status = '{RETRY}'
               AND retry_at <= %(now)s) AS republish,
      EXISTS (SELECT 1 FROM {EXECUTION} WHERE status = '{RUNNING}'
               AND last_heartbeat_at < %(stale_before)s) AS stale,
      (SELECT MIN(next_due_at) FROM {JOB} WHERE status = '{ACTIVE}'
               AND (current_execution_id IS NULL OR overlap = '{CANCEL_OTHER}')
               AND next_due_at > '-infinity' AND next_due_at < 'infinity') AS next_due_at,
      EXISTS (SELECT 1 FROM {EXECUTION} WHERE status = '{WAITING}') AS waiting
    """,
    columns=("due", "republish", "stale", "next_due_at", "waiting"),
)


def scheduler_probe(
    *, now: datetime, pending_before: datetime, queued_before: datetime, stale_before: datetime
) -> Probe:
    """Ask every question of an idle tick in one round trip."""
    found = ledger.row(
        SCHEDULER_PROBE,
        {
            "now": now,
            "pending_before": pending_before,
            "queued_before": queued_before,
            "stale_before": stale_before,
        },
    )
    next_due = found["next_due_at"]
    if isinstance(next_due, str):  # SQLite returns the raw text of the column
        parsed = parse_datetime(next_due)
        next_due = parsed.replace(tzinfo=UTC) if parsed and parsed.tzinfo is None else parsed
    return Probe(
        bool(found["due"]),
        bool(found["republish"]),
        bool(found["stale"]),
        next_due,
        bool(found["waiting"]),
    )
