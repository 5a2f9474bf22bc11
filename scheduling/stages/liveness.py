"""Liveness: running executions prove they are alive, and the dead ones are reaped.

A worker process records a heartbeat for the executions it runs (``record_heartbeat``). The
scheduler finds running executions whose heartbeat went stale (``find_stale_executions``, a
plain read) and then acts on each one alone (``reap_execution``, a compare-and-set that holds
only while the heartbeat is still stale), so a worker that beats in between keeps its run.

Each heartbeat renews the run's lease. In production both sides read the database's clock: the
heartbeat stamps the server's ``now()`` and the reaper compares against it (``database_clock``),
so skewed wall clocks on worker and scheduler hosts cannot shorten a lease (docs/architecture.md,
*Never two bodies at once*). Tests pass a fixed ``now`` instead, and staleness is then judged on it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now

from scheduling.ledger.engines import engine
from scheduling.models import AttemptOutcome, Execution, ExecutionStatus
from scheduling.stages.attempts import fail_attempt
from scheduling.timing import readable

logger = logging.getLogger("scheduling")


def record_heartbeat(
    *,
    execution_ids: Sequence[int],
    now: datetime | None = None,
    statement_timeout: float | None = None,
) -> int:
    """Prove that these running executions are alive (renew their leases): one UPDATE per beat.

    ``now`` None stamps the database's clock (what workers do); returns how many of them are
    still running, so a caller can tell that one of its runs was taken from it. A
    ``statement_timeout`` (seconds) bounds this transaction's statements on PostgreSQL: a beat
    must fail rather than hang on a server that does not answer.
    """
    if not execution_ids:
        return 0
    ids = list(execution_ids)
    stamp: Any = now
    if now is None:
        stamp = engine().database_now()
    with transaction.atomic(durable=True):
        if statement_timeout:
            engine().bound_statements(statement_timeout)
        return engine().renew_leases(ids, stamp=stamp)


def running_and_taken(*, execution_ids: Sequence[int]) -> tuple[set[int], set[int]]:
    """Of these executions, those still RUNNING and those that exist but are not.

    Asked only when a heartbeat renewed fewer runs than it named: a run taken from its worker
    (reaped, cancelled) must stop its body at once.
    """
    rows = list(Execution.objects.filter(pk__in=list(execution_ids)).values_list("pk", "status"))
    running = {pk for pk, status in rows if status == ExecutionStatus.RUNNING}
    return running, {pk for pk, _ in rows} - running


def _stale_cutoff(now: datetime, stale_after: float, database_clock: bool) -> Any:
    """Heartbeats older than this are stale: by ``now``, or by the database's own clock."""
    if database_clock:
        return ExpressionWrapper(
            Now() - Value(timedelta(seconds=stale_after)), output_field=DateTimeField()
        )
    return now - timedelta(seconds=stale_after)


def find_stale_executions(
    *, now: datetime, stale_after: float, limit: int = 500, database_clock: bool = False
) -> list[int]:
    """Running executions whose heartbeat is older than ``stale_after`` seconds (a read).

    ``database_clock`` judges age on the database server's clock instead of ``now`` (the
    scheduler's way: the heartbeats were stamped with that clock).
    """
    cutoff = _stale_cutoff(now, stale_after, database_clock)
    return list(
        Execution.objects.stale(cutoff)
        .order_by("last_heartbeat_at")
        .values_list("pk", flat=True)[:limit]
    )


def reap_execution(
    *, execution_id: int, now: datetime, stale_after: float, database_clock: bool = False
) -> str | None:
    """Give one abandoned execution back: RETRY at once, or FAILED when retries are spent.

    Acts only if the execution is still running with a heartbeat older than ``stale_after``
    at this moment (the row lock of ``fail_attempt`` makes the check and the write one step);
    returns the new status, or None when the run proved alive or ended meanwhile. ``now`` is
    what the history records; with ``database_clock`` the age is judged on the server's clock.
    """
    cutoff = _stale_cutoff(now, stale_after, database_clock)
    row = (
        Execution.objects.filter(pk=execution_id).values_list("worker", "last_heartbeat_at").first()
    )
    worker, last = row if row else ("", None)
    status = fail_attempt(
        execution_id=execution_id,
        error=(
            f"abandoned: worker {worker or '?'} sent no heartbeat since "
            f"{readable.instant(last) if last else 'start'} (stale after {stale_after:g}s)"
        ),
        outcome=AttemptOutcome.ABANDONED,
        now=now,
        retry_in=0,
        stale_before=cutoff,
    )
    if status is not None:
        logger.warning("execution.reaped execution=%s status=%s", execution_id, status)
    return status


def reap_stale_executions(
    *, now: datetime, stale_after: float, limit: int = 500, database_clock: bool = False
) -> list[int]:
    """Find the stale running executions, then reap each one alone; returns those reaped."""
    return [
        execution_id
        for execution_id in find_stale_executions(
            now=now, stale_after=stale_after, limit=limit, database_clock=database_clock
        )
        if reap_execution(
            execution_id=execution_id,
            now=now,
            stale_after=stale_after,
            database_clock=database_clock,
        )
    ]
