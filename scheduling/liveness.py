"""Liveness: running executions prove they are alive, and the dead ones are reaped.

A worker process records a heartbeat for the executions it runs (``record_heartbeat``). The
scheduler finds running executions whose heartbeat went stale (``find_stale_executions``, a
plain read) and then acts on each one alone (``reap_execution``, a compare-and-set that holds
only while the heartbeat is still stale), so a worker that beats in between keeps its run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import transaction

from scheduling.attempts import fail_attempt
from scheduling.models import AttemptOutcome, Execution, ExecutionStatus, Job

logger = logging.getLogger("scheduling")


def record_heartbeat(*, execution_ids: Sequence[int], now: datetime) -> int:
    """Prove that these running executions are alive: one statement per beat."""
    if not execution_ids:
        return 0
    ids = list(execution_ids)
    with transaction.atomic(durable=True):
        changed = Execution.objects.filter(pk__in=ids, status=ExecutionStatus.RUNNING).update(
            last_heartbeat_at=now
        )
        Job.objects.filter(executions__pk__in=ids).update(last_keepalive_at=now)
    return changed


def find_stale_executions(*, now: datetime, stale_after: float, limit: int = 500) -> list[int]:
    """Running executions whose heartbeat is older than ``stale_after`` seconds (a read)."""
    cutoff = now - timedelta(seconds=stale_after)
    return list(
        Execution.objects.filter(status=ExecutionStatus.RUNNING, last_heartbeat_at__lt=cutoff)
        .order_by("last_heartbeat_at")
        .values_list("pk", flat=True)[:limit]
    )


def reap_execution(*, execution_id: int, now: datetime, stale_after: float) -> str | None:
    """Give one abandoned execution back: RETRY at once, or FAILED when retries are spent.

    Acts only if the execution is still running with a heartbeat older than ``stale_after``
    at this moment (the row lock of ``fail_attempt`` makes the check and the write one step);
    returns the new status, or None when the run proved alive or ended meanwhile.
    """
    cutoff = now - timedelta(seconds=stale_after)
    row = (
        Execution.objects.filter(pk=execution_id).values_list("worker", "last_heartbeat_at").first()
    )
    worker, last = row if row else ("", None)
    status = fail_attempt(
        execution_id=execution_id,
        error=(
            f"abandoned: worker {worker or '?'} sent no heartbeat since "
            f"{last.isoformat() if last else 'start'} (stale after {stale_after:g}s)"
        ),
        outcome=AttemptOutcome.ABANDONED,
        now=now,
        retry_in=0,
        stale_before=cutoff,
    )
    if status is not None:
        logger.warning("execution.reaped execution=%s status=%s", execution_id, status)
    return status


def reap_stale_executions(*, now: datetime, stale_after: float, limit: int = 500) -> list[int]:
    """Find the stale running executions, then reap each one alone; returns those reaped."""
    return [
        execution_id
        for execution_id in find_stale_executions(now=now, stale_after=stale_after, limit=limit)
        if reap_execution(execution_id=execution_id, now=now, stale_after=stale_after)
    ]
