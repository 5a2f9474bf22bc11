"""Publishing bookkeeping: which executions' messages reached the broker, and which to send again.

The scheduler publishes after every claim commits; these verbs record the outcome
(``mark_queued``) and find what must be published again (``reclaim_for_publish``): a claim whose
scheduler died before publishing, a message the broker may have lost, a retry that fell due.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Q

from scheduling import conf, sql
from scheduling.claims import Doorbell
from scheduling.models import Execution, ExecutionStatus, Job

logger = logging.getLogger("scheduling")


def _lock(queryset: Any) -> Any:
    """Lock rows for a claim: skip rows another scheduler holds; never block on a foreign key."""
    return queryset.select_for_update(skip_locked=True, no_key=True, of=("self",))


def _doorbell(execution: Execution, job: Job | None) -> Doorbell:
    return Doorbell(
        execution_id=execution.pk,
        task_id=str(execution.task_id),
        task=execution.task,
        args=list(job.args) if job else [],
        kwargs=dict(job.kwargs) if job else {},
        queue=job.queue if job else "celery",
        priority=job.priority if job else None,
        timeout=job.timeout if job else conf.get("DEFAULT_TIMEOUT"),
    )


def mark_queued(*, execution_ids: Iterable[int], now: datetime) -> int:
    """Record that the messages of these executions reached the broker.

    On PostgreSQL this commit does not wait for the disk: if the server crashed and lost it,
    the rows would only be PENDING again and published once more, which workers absorb.
    """
    ids = list(execution_ids)
    if not ids:
        return 0
    if connection.vendor != "postgresql":
        return Execution.objects.filter(pk__in=ids, status=ExecutionStatus.PENDING).update(
            status=ExecutionStatus.QUEUED, queued_at=now, updated_at=now
        )
    with transaction.atomic(durable=True), connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit = off")
        cursor.execute(
            sql.MARK_QUEUED,
            [ExecutionStatus.QUEUED.value, now, now, ids, ExecutionStatus.PENDING.value],
        )
        return cursor.rowcount


def requeue_queued(*, now: datetime) -> int:
    """Make every QUEUED execution due for re-publishing now (the broker lost its messages)."""
    stale = now - timedelta(seconds=conf.get("PENDING_GRACE") + 1)
    return Execution.objects.filter(status=ExecutionStatus.QUEUED).update(
        status=ExecutionStatus.PENDING, queued_at=stale, updated_at=now
    )


def doorbells_for(*, execution_ids: Iterable[int]) -> list[Doorbell]:
    """The doorbells of these executions, if they are still waiting to be published."""
    rows = Execution.objects.select_related("job").filter(
        pk__in=list(execution_ids), status=ExecutionStatus.PENDING
    )
    return [_doorbell(row, row.job) for row in rows]


def reclaim_for_publish(*, now: datetime, limit: int) -> list[Doorbell]:
    """Take back executions whose message must be published (again).

    - PENDING past the grace: a scheduler died between its commit and its publish.
    - QUEUED for longer than REQUEUE_AFTER: the broker may have lost the message.
    - RETRY whose retry_at has passed: the next attempt is due.

    Each row is moved to PENDING with a fresh ``queued_at`` under SKIP LOCKED, so concurrent
    schedulers do not publish the same row in the same tick.
    """
    pending_before = now - timedelta(seconds=conf.get("PENDING_GRACE"))
    queued_before = now - timedelta(seconds=conf.get("REQUEUE_AFTER"))
    due = (
        Q(status=ExecutionStatus.PENDING, queued_at__lt=pending_before)
        | Q(status=ExecutionStatus.QUEUED, queued_at__lt=queued_before)
        | Q(status=ExecutionStatus.RETRY, retry_at__lte=now)
    )
    with transaction.atomic(durable=True):
        rows = list(_lock(Execution.objects.filter(due)).select_related("job")[:limit])
        if not rows:
            return []
        for row in rows:
            logger.info(
                "execution.republished execution=%s status=%s retry_count=%s",
                row.pk,
                row.status,
                row.retry_count,
            )
        Execution.objects.filter(pk__in=[r.pk for r in rows]).update(
            status=ExecutionStatus.PENDING, queued_at=now, updated_at=now
        )
    return [_doorbell(row, row.job) for row in rows]
