"""Runs enqueued through Django's Tasks framework: their rows in the ledger.

An enqueued run is an execution without a job. Everything its message needs (arguments, queue,
priority, time limit, retries) is on the row itself, in ``call``, so the scheduler can publish it
again exactly as it publishes a job's execution: a run is never only in the broker. The row is
written on Django's connection, inside whatever transaction the caller has open; it is
published only after that transaction commits (``scheduling.djangotasks.outbox``), and a
rollback takes the row with it, so the run never happens and has no result.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from scheduling.ids import uuid7
from scheduling.ledger.engines import engine
from scheduling.messages.doorbell import Doorbell
from scheduling.models import Attempt, Execution, ExecutionStatus
from scheduling.stages.publishing import doorbell_of_call


@dataclass(frozen=True)
class Written:
    """A run's row as written: what its message and its first result need."""

    execution_id: int
    task_id: str
    created_at: datetime
    due_now: bool

    def doorbell(self, *, task: str, call: dict[str, Any]) -> Doorbell:
        return doorbell_of_call(
            execution_id=self.execution_id, task_id=self.task_id, task=task, call=call
        )


def write_run(*, task: str, call: dict[str, Any], run_after: datetime | None) -> Written:
    """Insert the run's row in the caller's transaction; it waits for ``run_after`` if given.

    A run due now is written QUEUED: its message goes out right after the commit
    (``scheduling.djangotasks.outbox``), and no second write marks it sent. A publish that
    fails puts the row back to PENDING for the scheduler; a message lost with its process (a
    crash between the commit and the publish) is found by the republish rule's evidence, as
    any lost message is (docs/architecture.md, *The republish rule*). A deferred run waits as
    a retry that is due at ``run_after`` (retry count 0), the state in which the scheduler
    publishes a row at a given time. On PostgreSQL the row goes in through one prepared
    statement: an enqueue is a request's cost, where the ORM's own work would be a third of it.
    """
    now = timezone.now()
    values = _row(task=task, call=call, run_after=run_after, now=now)
    execution_id = engine().insert_run(**values)
    return _written(execution_id, values, now)


def write_runs(
    *, task: str, calls: Sequence[dict[str, Any]], run_after: datetime | None
) -> list[Written]:
    """``write_run`` for many calls of one task: their rows in one statement, in order."""
    now = timezone.now()
    shared = _row(task=task, call={}, run_after=run_after, now=now)
    keys = [uuid7() for _ in calls]
    ids = engine().insert_runs(
        task=task,
        scheduled_for=shared["scheduled_for"],
        status=shared["status"],
        queued_at=shared["queued_at"],
        retry_at=shared["retry_at"],
        now=now,
        runs=list(zip(keys, calls, strict=True)),
    )
    return [
        _written(pk, {**shared, "task_id": key}, now) for pk, key in zip(ids, keys, strict=True)
    ]


def _row(
    *, task: str, call: dict[str, Any], run_after: datetime | None, now: datetime
) -> dict[str, Any]:
    deferred = run_after is not None and run_after > now
    return {
        "task": task,
        "scheduled_for": run_after if deferred else now,
        "status": ExecutionStatus.RETRY if deferred else ExecutionStatus.QUEUED,
        "task_id": uuid7(),
        "queued_at": None if deferred else now,
        "retry_at": run_after if deferred else None,
        "call": call,
        "now": now,
    }


def _written(execution_id: int, values: dict[str, Any], now: datetime) -> Written:
    return Written(
        execution_id=execution_id,
        task_id=str(values["task_id"]),
        created_at=now,
        due_now=values["queued_at"] is not None,
    )


@dataclass(frozen=True)
class RunView:
    """What the framework's ``TaskResult`` is built from."""

    execution: Execution
    args: list[Any]
    kwargs: dict[str, Any]
    backend: str | None
    workers: list[str]
    #: The first attempt's start (the framework's ``started_at``) and the latest's.
    first_attempted_at: datetime | None
    last_attempted_at: datetime | None


def find_run(result_id: str) -> RunView | None:
    """The run whose result id (its execution's ``task_id``) is ``result_id``, or None."""
    try:
        task_id = uuid.UUID(str(result_id))
    except ValueError:
        return None
    execution = Execution.objects.select_related("job").filter(task_id=task_id).first()
    if execution is None:
        return None
    attempts = list(
        Attempt.objects.filter(execution=execution)
        .order_by("number")
        .values_list("worker", "started_at")
    )
    call = execution.call or {}
    job = execution.job
    return RunView(
        execution=execution,
        args=list(call.get("args", job.args if job else [])),
        kwargs=dict(call.get("kwargs", job.kwargs if job else {})),
        backend=call.get("backend"),
        workers=[worker for worker, _ in attempts],
        first_attempted_at=attempts[0][1] if attempts else None,
        last_attempted_at=attempts[-1][1] if attempts else None,
    )
