"""The bound on waiting occurrences per job (``SCHEDULING_MAX_WAITING_PER_JOB``).

A job whose overlap is ``allow`` is claimed at every occurrence whatever runs; when its own
running limit or its owner's is reached, each of those executions waits in the ledger
(``scheduling.stages.limits``), one row per occurrence. Behind a limit that never frees up
(an owner whose other jobs run for hours), that pile would grow without bound. So the claim
counts the job's waiting executions, up to the bound, and once the job has that many, the
occurrence it claims is written SKIPPED with the reason: in the ledger, never silently
dropped, and no message is sent for it. The plain claim does this in its locking statement on
PostgreSQL (``lock_due`` in ``ledger/engines/sql/postgresql/claim.sql``, from ``sql_bound``);
every row planned in Python goes through ``skip_past_bound`` before it is written. Other
overlap policies hold the job's next occurrence while a run of it is unfinished, so their
waiting rows cannot pile up by the claim.

Executions already claimed when the bound is reached (published, not yet started) may still
wait when they start: the bound is exceeded by those in flight. So may a retry: an execution
whose attempt failed or timed out and is retried passes the running limit again and may go
back to WAITING past the bound. That is on purpose: its occurrence was counted when it was
claimed, and a retry of it is never dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from django.db.models import Count

from scheduling import conf
from scheduling.models import Execution, ExecutionStatus, Overlap

logger = logging.getLogger("scheduling")


def note(bound: int) -> str:
    """The reason a SKIPPED execution past the bound carries.

    The claim counts the job's waiting executions only up to the bound (the count stops
    there, on the index), so the reason says "at least": the real number may be higher,
    by the runs in flight when the bound was reached and by retries (see the module's
    docstring), and the reason never claims a count it did not make.
    """
    return (
        f"skipped: at least {bound:,} occurrences of this job already wait for a running slot "
        "(the bound, SCHEDULING_MAX_WAITING_PER_JOB)"
    )


def sql_bound() -> dict[str, Any]:
    """The parameters of the bound in the claim's locking statement (``lock_due``)."""
    bound = conf.get("MAX_WAITING_PER_JOB")
    return {
        "skipped": ExecutionStatus.SKIPPED.value,
        "waiting": ExecutionStatus.WAITING.value,
        "max_waiting": bound,
        "waiting_overlap": Overlap.ALLOW.value,
        "waiting_note": note(bound),
    }


def full_jobs(job_ids: Iterable[int], *, bound: int) -> set[int]:
    """Of ``job_ids``, those with at least ``bound`` executions waiting for a running slot
    (one query, on ``execution_job_waiting_idx``)."""
    ids = set(job_ids)
    if not ids:
        return set()
    return set(
        Execution.objects.filter(job_id__in=ids, status=ExecutionStatus.WAITING)
        .values("job_id")
        .annotate(waiting=Count("id"))
        .filter(waiting__gte=bound)
        .values_list("job_id", flat=True)
    )


class _Planned(Protocol):
    row: dict[str, Any]
    executions: list[dict[str, Any]]


def skip_past_bound(due: Sequence[_Planned]) -> None:
    """Turn the PENDING executions planned for jobs at the bound into SKIPPED ones, in place,
    with the reason; logged one line per execution (``execution.skipped``)."""
    candidates = [
        item
        for item in due
        if item.row["overlap"] == Overlap.ALLOW
        and any(e["status"] == ExecutionStatus.PENDING for e in item.executions)
    ]
    if not candidates:
        return
    bound = conf.get("MAX_WAITING_PER_JOB")
    full = full_jobs((item.row["pk"] for item in candidates), bound=bound)
    for item in candidates:
        if item.row["pk"] not in full:
            continue
        for execution in item.executions:
            if execution["status"] == ExecutionStatus.PENDING:
                execution["status"] = ExecutionStatus.SKIPPED
                execution["last_error"] = note(bound)
                log_skipped(item.row["pk"], execution["scheduled_for"], bound)


def log_skipped(job_id: int, scheduled_for: datetime, bound: int) -> None:
    logger.warning(
        "execution.skipped job=%s scheduled_for=%s reason=waiting_bound max_waiting=%s",
        job_id,
        scheduled_for.isoformat(),
        bound,
    )
