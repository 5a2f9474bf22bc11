"""The publisher's statement: record that executions' messages reached the broker.

- ``mark_queued``: PENDING executions become QUEUED, with the time their message went out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from scheduling import ledger
from scheduling.models import Execution, ExecutionStatus

EXECUTION = Execution._meta.db_table

# -- mark_queued: these PENDING executions' messages reached the broker. On PostgreSQL the
#    commit does not wait for the disk: if the server crashed and lost it, the rows would only
#    be PENDING again and published once more, which workers absorb.
ASYNC_COMMIT = ledger.Statement(postgresql="SET LOCAL synchronous_commit = off")
MARK_QUEUED = ledger.Statement(
    postgresql=f"""
    UPDATE {EXECUTION} SET status = %(queued)s, queued_at = %(now)s, updated_at = %(now)s
     WHERE id = ANY(%(ids)s::bigint[]) AND status = %(pending)s
    """
)


def mark_queued(*, execution_ids: Sequence[int], now: datetime) -> int:
    """Mark these executions QUEUED if they are still PENDING; how many were."""
    if not ledger.on_postgresql():
        return Execution.objects.filter(
            pk__in=execution_ids, status=ExecutionStatus.PENDING
        ).update(status=ExecutionStatus.QUEUED, queued_at=now, updated_at=now)
    with transaction.atomic(durable=True):
        ledger.execute(ASYNC_COMMIT)
        return ledger.execute(
            MARK_QUEUED,
            {
                "queued": ExecutionStatus.QUEUED.value,
                "pending": ExecutionStatus.PENDING.value,
                "now": now,
                "ids": list(execution_ids),
            },
        )
