"""A backfill's statements: past occurrences written once each, as waiting executions.

- ``held_instants``: which of some occurrences of a job the ledger already holds (a read).
- ``insert_waiting``: one WAITING execution per occurrence the ledger does not hold yet, in
  one statement, ``ON CONFLICT DO NOTHING`` on the one-per-occurrence constraint, so two
  backfills of the same range at once (or a backfill and the claim) make each occurrence
  once; the instants actually written come back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from scheduling import ledger
from scheduling.ids import uuid7, uuid7_text
from scheduling.models import Execution, ExecutionStatus

EXECUTION = Execution._meta.db_table


def held_instants(*, job_id: int, instants: Sequence[datetime]) -> set[datetime]:
    """The occurrences among ``instants`` that already have an execution of the job (by the
    unique ``(job, scheduled_for)`` index)."""
    if not instants:
        return set()
    return set(
        Execution.objects.filter(job_id=job_id, scheduled_for__in=list(instants)).values_list(
            "scheduled_for", flat=True
        )
    )


# -- insert_waiting: the missing occurrences of one job, WAITING, oldest first.
INSERT_WAITING = ledger.Statement(
    postgresql=f"""
    INSERT INTO {EXECUTION}
           (job_id, task, scheduled_for, status, task_id, last_error, created_at,
            retry_count, worker, duplicates, updated_at)
    SELECT %(job_id)s, %(task)s, v.at, %(waiting)s, v.task_id, %(reason)s, %(now)s,
           0, '', 0, %(now)s
      FROM unnest(%(instants)s::timestamptz[], %(task_ids)s::uuid[]) AS v(at, task_id)
     ORDER BY v.at
        ON CONFLICT (job_id, scheduled_for) DO NOTHING
    RETURNING scheduled_for
    """,
    columns=("scheduled_for",),
)


def insert_waiting(
    *, job_id: int, task: str, instants: Sequence[datetime], reason: str, now: datetime
) -> list[datetime]:
    """Write a WAITING execution for each of ``instants`` the job has none for; the instants
    written, oldest first. ``reason`` is each row's ``last_error`` until it is released.

    PostgreSQL: one statement; a concurrent insert of the same occurrence waits for the other
    transaction and then does nothing. SQLite: the ORM inside one transaction, which takes the
    database's one write lock before it reads (``BEGIN IMMEDIATE``), so the read of what is
    held and the insert cannot interleave with another writer's.
    """
    if not instants:
        return []
    if not ledger.on_postgresql():
        return _insert_waiting_with_orm(
            job_id=job_id, task=task, instants=instants, reason=reason, now=now
        )
    written = ledger.rows(
        INSERT_WAITING,
        {
            "job_id": job_id,
            "task": task,
            "waiting": ExecutionStatus.WAITING.value,
            "reason": reason,
            "now": now,
            # Oldest first, as the rows go in, so their time-ordered task ids rise with them.
            "instants": sorted(instants),
            "task_ids": [uuid7_text() for _ in instants],
        },
    )
    return sorted(row["scheduled_for"] for row in written)


def _insert_waiting_with_orm(
    *, job_id: int, task: str, instants: Sequence[datetime], reason: str, now: datetime
) -> list[datetime]:
    """``INSERT_WAITING`` on SQLite."""
    with transaction.atomic():
        held = held_instants(job_id=job_id, instants=instants)
        fresh = sorted(at for at in set(instants) if at not in held)
        Execution.objects.bulk_create(
            [
                Execution(
                    job_id=job_id,
                    task=task,
                    scheduled_for=at,
                    status=ExecutionStatus.WAITING,
                    task_id=uuid7(),
                    last_error=reason,
                    created_at=now,
                    updated_at=now,
                )
                for at in fresh
            ]
        )
    return fresh
