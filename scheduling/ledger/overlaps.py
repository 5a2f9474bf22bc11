"""The statements of the overlap policy ``cancel_other``: find the runs a claim replaces, and
cancel them in the claim's transaction.

The claim holds the job's row lock; a worker ending a run locks the execution row first and
the job's row after it (``COMPLETE``, ``cancel_execution``). So the claim takes the execution
rows with ``SKIP LOCKED``: a run whose row another transaction holds (a worker ending it, a
heartbeat) is left to the caller, who cancels it after the claim has committed
(``attempts.cancel_execution``, in the workers' order), never waiting on it here under the job's
lock. Both databases run the same ORM statements (SQLite serialises writers, and takes the
lock clause as nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from scheduling.ledger.attempt import finish_attempt
from scheduling.models import (
    EXECUTION_UNFINISHED,
    AttemptOutcome,
    Execution,
    ExecutionStatus,
    Job,
)


@dataclass(frozen=True)
class Cancelled:
    """A run the claim cancelled: its message's id, and whether a worker was running it."""

    execution_id: int
    task_id: str
    was_running: bool


def current_runs(*, job_ids: Iterable[int]) -> dict[int, int]:
    """The execution each of these jobs holds as current (jobs holding none are absent)."""
    return dict(
        Job.objects.filter(pk__in=list(job_ids), current_execution__isnull=False).values_list(
            "pk", "current_execution_id"
        )
    )


def cancel_runs(*, now: datetime, reasons: Mapping[int, str]) -> tuple[list[Cancelled], set[int]]:
    """Cancel the unfinished executions named in ``reasons`` (id: reason), in the caller's
    transaction; returns those cancelled, and the ids left because another transaction held
    their row (the caller cancels them once its own transaction has committed)."""
    if not reasons:
        return [], set()
    ids = list(reasons)
    locked = list(
        Execution.objects.select_for_update(skip_locked=True, no_key=True, of=("self",))
        .filter(pk__in=ids)
        .values_list("pk", "task_id", "status")
    )
    seen = {pk for pk, _, _ in locked}
    cancelled = []
    for pk, task_id, status in locked:
        if status not in EXECUTION_UNFINISHED:
            continue
        Execution.objects.filter(pk=pk, status=status).update(
            status=ExecutionStatus.CANCELLED,
            finished_at=now,
            retry_at=None,
            last_error=reasons[pk],
            updated_at=now,
        )
        finish_attempt(pk, AttemptOutcome.CANCELLED, reasons[pk], now)
        cancelled.append(Cancelled(pk, str(task_id), status == ExecutionStatus.RUNNING))
    return cancelled, set(ids) - seen
