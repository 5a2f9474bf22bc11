"""The enqueue's statement: one run of Django's Tasks framework written as an execution.

- ``insert_run``: the run's row, in the caller's transaction; its id.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from scheduling import ledger
from scheduling.ledger.hot import run_hot
from scheduling.models import Execution

EXECUTION = Execution._meta.db_table

# -- insert_run: one run enqueued through Django's Tasks framework (in the caller's
#    transaction), prepared on the server: an enqueue is a request's cost, where the ORM's own
#    work would be a third of it.
INSERT_RUN = ledger.Statement(
    postgresql=f"""
    INSERT INTO {EXECUTION}
           (task, scheduled_for, status, retry_count, task_id, worker, created_at, queued_at,
            retry_at, last_error, duplicates, call, updated_at)
    VALUES (%(task)s, %(scheduled_for)s, %(status)s, 0, %(task_id)s, '', %(now)s,
            %(queued_at)s::timestamptz, %(retry_at)s::timestamptz, '', 0, %(call)s::jsonb,
            %(now)s)
    RETURNING id
    """,
    columns=("id",),
)


def insert_run(
    *,
    task: str,
    scheduled_for: datetime,
    status: str,
    task_id: uuid.UUID,
    queued_at: datetime | None,
    retry_at: datetime | None,
    call: dict[str, Any],
    now: datetime,
) -> int:
    """Write the run's row; its execution id."""
    if not ledger.on_postgresql():
        return int(
            Execution.objects.create(
                task=task,
                scheduled_for=scheduled_for,
                status=status,
                task_id=task_id,
                queued_at=queued_at,
                retry_at=retry_at,
                call=call,
                created_at=now,
                updated_at=now,
            ).pk
        )
    found = run_hot(
        INSERT_RUN,
        {
            "task": task,
            "scheduled_for": scheduled_for,
            "status": str(status),
            "task_id": task_id,
            "queued_at": queued_at,
            "retry_at": retry_at,
            "call": call,
            "now": now,
        },
    )
    assert found is not None  # an INSERT … RETURNING returns its row
    return int(found["id"])
