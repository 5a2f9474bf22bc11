"""The enqueue's statement: one run of Django's Tasks framework written as an execution.

- ``insert_run``: the run's row, in the caller's transaction; its id.
- ``insert_runs``: many runs' rows in one statement (``scheduling.api.enqueue_many``); their
  ids, in order.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
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


# -- insert_runs: many runs of one task enqueued together (``scheduling.api.enqueue_many``), in
#    the caller's transaction: one statement whatever their number, the rows as one JSON
#    parameter (a document the driver passes as it is, where an array per column would be
#    quoted value by value on the client). Each row comes back with its task id, so ids are
#    matched by it, not by the order RETURNING happens to give.
INSERT_RUNS = ledger.Statement(
    postgresql=f"""
    INSERT INTO {EXECUTION}
           (task, scheduled_for, status, retry_count, task_id, worker, created_at, queued_at,
            retry_at, last_error, duplicates, call, updated_at)
    SELECT %(task)s, %(scheduled_for)s, %(status)s, 0, r.task_id, '', %(now)s,
           %(queued_at)s::timestamptz, %(retry_at)s::timestamptz, '', 0, r.call, %(now)s
      FROM jsonb_to_recordset(%(runs)s::jsonb) AS r(task_id uuid, call jsonb)
    RETURNING id, task_id
    """,
    columns=("id", "task_id"),
)


def insert_runs(
    *,
    task: str,
    scheduled_for: datetime,
    status: str,
    queued_at: datetime | None,
    retry_at: datetime | None,
    now: datetime,
    runs: Sequence[tuple[uuid.UUID, dict[str, Any]]],
) -> list[int]:
    """Write many runs of ``task`` (each its task id and call) in one INSERT; their ids, in order.

    On SQLite the ORM's multi-row INSERT (``bulk_create``) writes them; where a database
    returns no ids from one (MySQL), they are read back by the runs' task ids.
    """
    if not runs:
        return []
    if ledger.on_postgresql():
        found = ledger.rows(
            INSERT_RUNS,
            {
                "task": task,
                "scheduled_for": scheduled_for,
                "status": str(status),
                "queued_at": queued_at,
                "retry_at": retry_at,
                "now": now,
                "runs": json.dumps([{"task_id": str(key), "call": call} for key, call in runs]),
            },
        )
        ids = {row["task_id"]: row["id"] for row in found}
        return [int(ids[key]) for key, _ in runs]
    made = [
        Execution(
            task=task,
            scheduled_for=scheduled_for,
            status=status,
            task_id=key,
            queued_at=queued_at,
            retry_at=retry_at,
            call=call,
            created_at=now,
            updated_at=now,
        )
        for key, call in runs
    ]
    Execution.objects.bulk_create(made)
    if all(execution.pk is not None for execution in made):
        return [int(execution.pk) for execution in made]
    ids = dict(
        Execution.objects.filter(task_id__in=[key for key, _ in runs]).values_list("task_id", "pk")
    )
    return [int(ids[key]) for key, _ in runs]
