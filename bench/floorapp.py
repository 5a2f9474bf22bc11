"""The benchmark worker app with each ledger write replaced by the cheapest durable one.

A worker that keeps its ledger in the database commits twice per task: the claim before the
body runs (so a second message for the same execution does nothing) and the end before the
message is acknowledged (so the run of a worker that died is retried and a finished one is
not). ``celery -A floorapp worker`` keeps everything else of the history side (the same
messages, ``ScheduledTask``, the signal receivers, the heartbeat thread) and makes each of
those two commits a one-row update of an unindexed counter on the execution row, the least
PostgreSQL can be asked to write durably. Its throughput is the floor under any design that
commits twice per task, on this machine; it is not a ledger (nothing else is recorded), and
the run checks that every execution's counter reads exactly 2.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from celery import signals
from workerapp import app, bare_noop

__all__ = ["app", "bare_noop"]

TOUCH = "UPDATE scheduling_execution SET duplicates = duplicates + 1 WHERE id = %s"


@signals.worker_process_init.connect
def _replace_ledger_writes(**_: Any) -> None:
    """In each pool process, swap the start and end writes for one durable counter update."""
    from django.db import connection

    from scheduling.stages import attempts

    def touch(execution_id: int) -> None:
        with connection.cursor() as cursor:
            cursor.execute(TOUCH, [execution_id])

    def start(*, execution_id: int, worker: str, pid: int, now: datetime) -> attempts.Started:
        touch(execution_id)
        return attempts.Started(
            execution_id=execution_id,
            job_id=None,
            attempt=1,
            checkpoint=None,
            scheduled_for=now,
            started_at=now,
        )

    def complete(*, execution_id: int, now: datetime, **_: Any) -> bool:
        touch(execution_id)
        return True

    for name in ("start_execution", "complete_execution"):
        if not callable(getattr(attempts, name, None)):  # a floor of nothing would measure nothing
            raise RuntimeError(f"scheduling.stages.attempts.{name} is gone; update the floor side")
    attempts.start_execution = start  # type: ignore[assignment]
    attempts.complete_execution = complete  # type: ignore[assignment]
