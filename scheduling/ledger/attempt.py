"""The attempt's statements: start one attempt at an execution, and complete it.

On PostgreSQL each is one statement of data-modifying CTEs, prepared on the server
(``ledger.hot``): a worker pays one round trip per start and one per end. Their SQLite forms
are the ORM's writes of the same rows under the same conditions, beside them; the attempt
specifications run both (``make test`` runs them on SQLite too). The ORM writes the other
verbs share (``finish_attempt``, ``release_job``, ``attempt_running``, ``died_attempts``) live
here as well.

- ``start``: the worker's compare-and-set of one attempt, and its attempt row;
- ``held_after_crash``: seconds until an execution may start after a crash recovery;
- ``complete``: the successful end of the running attempt, the run counted, the job released.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Case, Exists, F, Q, Value, When

from scheduling import ledger
from scheduling.errors import MAX_ERROR
from scheduling.ledger.hot import run_hot
from scheduling.models import (
    EXECUTION_STARTABLE,
    Attempt,
    AttemptOutcome,
    Execution,
    ExecutionStatus,
    Job,
)

EXECUTION = Execution._meta.db_table
JOB = Job._meta.db_table
ATTEMPT = Attempt._meta.db_table


@dataclass(frozen=True)
class Started:
    """One started attempt: what the worker needs to run the body and end it."""

    execution_id: int
    job_id: int | None
    attempt: int
    checkpoint: Any
    scheduled_for: datetime
    #: The worker's clock at the start: with ``attempt``, what ``restore_start`` writes again.
    started_at: datetime


#: When the server last recovered from a crash: crash recovery resets every kind of shared
#: statistics at one instant (a clean restart keeps them; a hand-made reset names one kind), so
#: the earliest of three kinds' reset times is the moment a start not yet flushed may have
#: been lost.
RECOVERED_AT = """(SELECT COALESCE(LEAST(w.stats_reset, b.stats_reset, a.stats_reset), '-infinity')
                     FROM pg_stat_wal w, pg_stat_bgwriter b, pg_stat_archiver a)"""
#: When the hold after that recovery ends: one lease (``%(lease)s`` seconds) later.
HOLD_ENDS = f"{RECOVERED_AT} + %(lease)s * interval '1 second'"
#: An execution made before the last crash recovery, while the hold lasts: only the worker
#: whose start the crash undid may start it (``attempts.restore_start``).
HELD = f"(created_at < {RECOVERED_AT} AND now() < {HOLD_ENDS})"


# -- start: the worker's claim of one attempt (compare-and-set) and its attempt row.
#    An expired occurrence does not start; the lease starts on the database's clock (a
#    worker's clock running behind must not start it old). The start commits without waiting
#    for its WAL flush (the end waits for both: docs/architecture.md, *One flush per task*),
#    so for one lease after a crash recovery (``RECOVERED_AT``) an execution made before it
#    starts only for the worker whose start the crash lost. A job with a running limit (or any
#    job, while owner limits are on) is started only after ``limits`` locked and counted.
START = ledger.Statement(
    postgresql=f"""
    WITH started AS (
        UPDATE {EXECUTION}
           SET status = %(running)s, started_at = %(now)s, finished_at = NULL,
               last_heartbeat_at = GREATEST(%(now)s, now()), retry_at = NULL,
               worker = %(worker)s,
               updated_at = %(now)s
         WHERE id = %(id)s
           AND (status IN (%(pending)s, %(queued)s)
                OR (status = %(retry)s AND retry_at <= %(now)s))
           AND NOT EXISTS (
                SELECT 1 FROM {JOB} x
                 WHERE x.id = {EXECUTION}.job_id
                   AND ((x.expires IS NOT NULL
                         AND {EXECUTION}.scheduled_for
                             + x.expires * interval '1 second' < %(now)s)
                        OR (NOT %(limits_checked)s
                            AND (x.max_running IS NOT NULL OR %(owner_limits)s))))
           AND NOT {HELD}
     RETURNING id, job_id, checkpoint, scheduled_for
    ), attempt AS (
        INSERT INTO {ATTEMPT}
               (execution_id, scheduled_for, number, worker, pid, started_at, outcome, error)
        SELECT s.id, s.scheduled_for,
               1 + (SELECT count(*) FROM {ATTEMPT} a
                     WHERE a.execution_id = s.id AND a.scheduled_for = s.scheduled_for),
               %(worker)s, %(pid)s, %(now)s, %(attempt_running)s, ''
          FROM started s
     RETURNING number
    )
    SELECT s.job_id AS job_id, s.checkpoint AS checkpoint,
           (SELECT number FROM attempt) AS attempt, s.scheduled_for AS scheduled_for,
           set_config('synchronous_commit', 'off', true) AS commit_mode
      FROM started s
    """,
    columns=("job_id", "checkpoint", "attempt", "scheduled_for", "commit_mode"),
)


def start(
    *,
    execution_id: int,
    worker: str,
    pid: int,
    now: datetime,
    lease: float,
    limits_checked: bool,
    owner_limits: bool,
) -> Started | None:
    """Start one attempt at ``execution_id``; None when it was not startable."""
    if not ledger.on_postgresql():
        return _start_with_orm(
            execution_id,
            worker=worker,
            pid=pid,
            now=now,
            limits_checked=limits_checked,
            owner_limits=owner_limits,
        )
    found = run_hot(
        START,
        {
            "running": ExecutionStatus.RUNNING.value,
            "pending": ExecutionStatus.PENDING.value,
            "queued": ExecutionStatus.QUEUED.value,
            "retry": ExecutionStatus.RETRY.value,
            "attempt_running": AttemptOutcome.RUNNING.value,
            "id": execution_id,
            "now": now,
            "worker": worker,
            "pid": pid,
            "lease": lease,
            "limits_checked": limits_checked,
            "owner_limits": owner_limits,
        },
    )
    if found is None:
        return None
    checkpoint = found["checkpoint"]
    if isinstance(checkpoint, str):
        checkpoint = json.loads(checkpoint)
    return Started(
        execution_id, found["job_id"], found["attempt"], checkpoint, found["scheduled_for"], now
    )


#: Startable now: waiting for a worker, or a retry whose time has come (``_start_with_orm``).
_STARTABLE_NOW = Q(status__in=EXECUTION_STARTABLE) & ~Q(status=ExecutionStatus.RETRY)


def _start_with_orm(
    execution_id: int,
    *,
    worker: str,
    pid: int,
    now: datetime,
    limits_checked: bool,
    owner_limits: bool,
) -> Started | None:
    """``START`` on SQLite: the same conditions and rows, written by the ORM."""
    startable = _STARTABLE_NOW | Q(status=ExecutionStatus.RETRY, retry_at__lte=now)
    if not limits_checked:
        limited = Q(job__max_running__isnull=False)
        if owner_limits:
            limited |= Q(job__isnull=False)
        startable &= ~limited
    with transaction.atomic():
        if expired(execution_id, now):
            return None
        changed = Execution.objects.filter(startable, pk=execution_id).update(
            status=ExecutionStatus.RUNNING,
            started_at=now,
            finished_at=None,
            last_heartbeat_at=now,
            retry_at=None,
            worker=worker,
            updated_at=now,
        )
        if not changed:
            return None
        found = Execution.objects.values("job_id", "checkpoint", "scheduled_for").get(
            pk=execution_id
        )
        number = Attempt.objects.filter(execution_id=execution_id).count() + 1
        Attempt.objects.create(
            execution_id=execution_id,
            scheduled_for=found["scheduled_for"],
            number=number,
            worker=worker,
            pid=pid,
            started_at=now,
        )
    return Started(
        execution_id, found["job_id"], number, found["checkpoint"], found["scheduled_for"], now
    )


def expired(execution_id: int, now: datetime) -> bool:
    """Whether the execution is still startable but its job's ``expires`` has run out."""
    found = (
        Execution.objects.filter(
            pk=execution_id, status__in=EXECUTION_STARTABLE, job__expires__isnull=False
        )
        .values_list("scheduled_for", "job__expires")
        .first()
    )
    return found is not None and found[0] + timedelta(seconds=found[1]) < now


# -- held_after_crash: seconds until this execution may start, when the crash hold applies to
#    it (the condition START refuses), else no row. SQLite commits every start durably, so
#    nothing is ever held there.
HELD_AFTER_CRASH = ledger.Statement(
    postgresql=f"""
    SELECT EXTRACT(EPOCH FROM {HOLD_ENDS} - now()) AS seconds
      FROM {EXECUTION} WHERE id = %(id)s AND {HELD}
    """
)


def held_after_crash(execution_id: int, *, lease: float) -> float | None:
    """Seconds before ``execution_id`` may start, if the last crash recovery holds it."""
    if not ledger.on_postgresql():
        return None
    seconds = ledger.value(HELD_AFTER_CRASH, {"id": execution_id, "lease": lease})
    return None if seconds is None else max(0.0, float(seconds))


# -- complete: the successful end of the running attempt (of attempt ``attempt`` when given),
#    its result merged into what earlier attempts left, the run counted, the job's run of
#    failures ended (``stages.failures``) and the job released.
COMPLETE = ledger.Statement(
    postgresql=f"""
    WITH done AS (
        UPDATE {EXECUTION}
           SET status = %(completed)s, finished_at = %(now)s, last_error = '',
               updated_at = %(now)s,
               result = CASE WHEN %(result)s::jsonb IS NULL THEN result
                             ELSE COALESCE(result, '{{}}'::jsonb) || %(result)s::jsonb END
         WHERE id = %(id)s AND status = %(running)s
           AND (%(attempt)s::int IS NULL OR EXISTS (
                SELECT 1 FROM {ATTEMPT} a
                 WHERE a.execution_id = %(id)s AND a.number = %(attempt)s
                   AND a.outcome = %(attempt_running)s))
     RETURNING id, job_id
    ), attempt AS (
        UPDATE {ATTEMPT}
           SET outcome = %(attempt_completed)s, finished_at = %(now)s
         WHERE execution_id IN (SELECT id FROM done) AND outcome = %(attempt_running)s
    ), job AS (
        UPDATE {JOB} j
           SET execute_count = j.execute_count + 1,
               consecutive_failures = 0,
               last_keepalive_at = %(now)s,
               current_execution_id = NULLIF(j.current_execution_id, d.id)
          FROM done d WHERE j.id = d.job_id
    )
    SELECT job_id FROM done
    """,
    columns=("job_id",),
)


@dataclass(frozen=True)
class Completed:
    """A completion that was written, and the job of its execution."""

    job_id: int | None


def complete(
    *, execution_id: int, now: datetime, attempt: int | None, result: dict[str, Any] | None
) -> Completed | None:
    """Complete the running attempt; None when the execution was not running it."""
    if ledger.on_postgresql():
        found = run_hot(
            COMPLETE,
            {
                "completed": ExecutionStatus.COMPLETED.value,
                "running": ExecutionStatus.RUNNING.value,
                "attempt_completed": AttemptOutcome.COMPLETED.value,
                "attempt_running": AttemptOutcome.RUNNING.value,
                "id": execution_id,
                "now": now,
                "attempt": attempt,
                "result": result,
            },
        )
        return None if found is None else Completed(found["job_id"])
    with transaction.atomic(durable=True):
        kept: dict[str, Any] = {}
        if result is not None:
            before = Execution.objects.filter(pk=execution_id).values_list("result", flat=True)
            kept["result"] = {**(before.first() or {}), **result}
        changed = Execution.objects.filter(
            attempt_running(execution_id, attempt),
            pk=execution_id,
            status=ExecutionStatus.RUNNING,
        ).update(
            status=ExecutionStatus.COMPLETED, finished_at=now, last_error="", updated_at=now, **kept
        )
        if not changed:
            return None
        execution = Execution.objects.get(pk=execution_id)
        finish_attempt(execution_id, AttemptOutcome.COMPLETED, "", now)
        release_job(execution, now=now)
    return Completed(execution.job_id)


def release_job(execution: Execution, *, now: datetime) -> None:
    """Let a forbid-overlap job's next occurrence be claimed, and count a completed run."""
    if execution.job_id is None:
        return
    updates: dict[str, Any] = {
        "last_keepalive_at": now,
        "current_execution": Case(
            When(current_execution_id=execution.pk, then=Value(None)),
            default=F("current_execution"),
        ),
    }
    if execution.status == ExecutionStatus.COMPLETED:
        updates["execute_count"] = F("execute_count") + 1
        updates["consecutive_failures"] = 0  # a success ends a run of failures
    Job.objects.filter(pk=execution.job_id).update(**updates)


def attempt_running(execution_id: int, attempt: int | None) -> Q:
    """Rows whose attempt ``attempt`` is still running (any attempt when None).

    An attempt that the reaper already gave up on may still finish on a worker that was only
    cut off; its late end must not be written over the next attempt's row.
    """
    if attempt is None:
        return Q()
    return Q(
        Exists(
            Attempt.objects.filter(
                execution_id=execution_id, number=attempt, outcome=AttemptOutcome.RUNNING
            )
        )
    )


#: Attempts whose process died under them unexpectedly: killed, ended by their body, taken by
#: the OOM killer. An ``interrupted`` attempt (the worker shut down under it) is not one.
DIED_OUTCOMES = (AttemptOutcome.ABANDONED,)


def died_attempts(execution_id: int) -> int:
    """How many finished attempts of ``execution_id`` ended with their process dying."""
    return Attempt.objects.filter(execution_id=execution_id, outcome__in=DIED_OUTCOMES).count()


def finish_attempt(execution_id: int, outcome: str, error: str, now: datetime) -> None:
    """End the running attempt row with ``outcome`` (the error cut to what the column holds)."""
    Attempt.objects.filter(execution_id=execution_id, outcome=AttemptOutcome.RUNNING).update(
        outcome=outcome, finished_at=now, error=error[:MAX_ERROR]
    )
