"""Every write to the ledger, as named verbs.

Each verb takes keyword arguments and an explicit ``now``; each state change is a
compare-and-set (``filter(pk=..., status__in=FROM).update(...)``), so zero rows updated means
someone else moved the row first, which is a normal outcome. No verb talks to the broker while
it holds row locks: claims commit first and ``scheduling.dispatch`` publishes afterwards.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from django.db import connection, transaction
from django.db.models import Case, Exists, F, Q, Value, When
from psycopg.types.numeric import Int8

from scheduling import conf, schedules
from scheduling.claims import Doorbell
from scheduling.claims import claim_batch as claim_batch  # the claim lives in claims.py
from scheduling.claims import claim_due_jobs as claim_due_jobs
from scheduling.models import (
    EXECUTION_STARTABLE,
    Attempt,
    AttemptOutcome,
    Execution,
    ExecutionStatus,
    Job,
)

logger = logging.getLogger("scheduling")

PUBLISHABLE = [ExecutionStatus.PENDING, ExecutionStatus.QUEUED, ExecutionStatus.RETRY]
MAX_ERROR = 4000


def _lock(queryset: Any) -> Any:
    """Lock rows for a claim: skip rows another scheduler holds; never block on a foreign key."""
    return queryset.select_for_update(skip_locked=True, no_key=True, of=("self",))


# --- claim ----------------------------------------------------------------------------------


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


# --- dispatch bookkeeping -------------------------------------------------------------------


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
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit = off")
        cursor.execute(
            f"UPDATE {Execution._meta.db_table} SET status = %s, queued_at = %s, updated_at = %s"
            " WHERE id = ANY(%s::bigint[]) AND status = %s",
            [ExecutionStatus.QUEUED.value, now, now, ids, ExecutionStatus.PENDING.value],
        )
        return cursor.rowcount


def requeue_queued(*, now: datetime) -> int:
    """Make every QUEUED execution due for re-publishing now (the broker lost its messages)."""
    stale = now - timedelta(seconds=conf.get("PENDING_GRACE") + 1)
    return Execution.objects.filter(status=ExecutionStatus.QUEUED).update(
        status=ExecutionStatus.PENDING, queued_at=stale, updated_at=now
    )


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
    with transaction.atomic():
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


# --- worker side ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    execution_id: int
    job_id: int | None
    attempt: int
    checkpoint: Any
    scheduled_for: datetime


def start_execution(*, execution_id: int, worker: str, pid: int, now: datetime) -> Started | None:
    """Claim an execution for one attempt; None means another message already did.

    Only PENDING, QUEUED and due RETRY executions may start, so a duplicate or early doorbell
    is acknowledged and does nothing (and is counted in ``duplicates``).
    """
    if connection.vendor == "postgresql":
        started = _start_in_one_statement(execution_id, worker=worker, pid=pid, now=now)
    else:
        started = _start_with_orm(execution_id, worker=worker, pid=pid, now=now)
    if started is None:
        if skip_expired(execution_id=execution_id, now=now):
            return None
        Execution.objects.filter(pk=execution_id).update(duplicates=F("duplicates") + 1)
        logger.warning(
            "execution.duplicate execution=%s worker=%s: already started or finished; "
            "message acknowledged and ignored",
            execution_id,
            worker,
        )
        return None
    logger.info(
        "execution.started execution=%s job=%s attempt=%s worker=%s",
        execution_id,
        started.job_id,
        started.attempt,
        worker,
    )
    return started


_STARTABLE_NOW = Q(status__in=[ExecutionStatus.PENDING, ExecutionStatus.QUEUED])


def _start_with_orm(execution_id: int, *, worker: str, pid: int, now: datetime) -> Started | None:
    startable = _STARTABLE_NOW | Q(status=ExecutionStatus.RETRY, retry_at__lte=now)
    with transaction.atomic():
        if _expired(execution_id, now):
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
        row = Execution.objects.values("job_id", "checkpoint", "scheduled_for").get(
            pk=execution_id
        )
        number = Attempt.objects.filter(execution_id=execution_id).count() + 1
        Attempt.objects.create(
            execution_id=execution_id, number=number, worker=worker, pid=pid, started_at=now
        )
        if row["job_id"] is not None:
            Job.objects.filter(pk=row["job_id"]).update(last_keepalive_at=now)
    return Started(execution_id, row["job_id"], number, row["checkpoint"], row["scheduled_for"])


def _expired(execution_id: int, now: datetime) -> bool:
    """Whether the execution is still startable but its job's ``expires`` has run out."""
    row = (
        Execution.objects.filter(
            pk=execution_id, status__in=EXECUTION_STARTABLE, job__expires__isnull=False
        )
        .values_list("scheduled_for", "job__expires")
        .first()
    )
    return row is not None and row[0] + timedelta(seconds=row[1]) < now


def skip_expired(*, execution_id: int, now: datetime) -> bool:
    """Skip an occurrence that would start later than its job's ``expires`` allows.

    Called when a start did not happen, so the common path pays nothing for it: a message for
    an expired occurrence is acknowledged, the execution is SKIPPED with the reason and a
    forbid-overlap job is released for its next occurrence.
    """
    with transaction.atomic():
        execution = (
            Execution.objects.select_for_update(of=("self",))
            .select_related("job")
            .filter(pk=execution_id)
            .first()
        )
        if execution is None or not _expired(execution_id, now):
            return False
        late = (now - execution.scheduled_for).total_seconds()
        execution.status = ExecutionStatus.SKIPPED
        execution.finished_at = now
        execution.last_error = (
            f"expired: would have started {late:.0f}s after its due time; "
            f"the job's expires is {execution.job.expires}s"
        )
        execution.save(update_fields=["status", "finished_at", "last_error", "updated_at"])
        _release_job(execution, now=now)
    logger.warning("execution.expired execution=%s late=%.0fs", execution_id, late)
    return True


HOT_PREPARE_THRESHOLD = 5


def execute_hot(sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """Run one of the statements a worker sends for every task; return its first row.

    A worker process sends the same few statements thousands of times. Prepared on the server,
    each is planned once per connection instead of on every call, where planning was half of
    the statement's server time; Django's cursors bind parameters on the client and never
    prepare. So this runs a plain psycopg cursor on Django's own connection: the same
    transaction, with errors mapped to Django's as any query's are. ``PREPARE_STATEMENTS``
    off (for a pooler that cannot keep prepared statements) takes Django's cursor instead.
    """
    if not conf.get("PREPARE_STATEMENTS"):
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()
    connection.ensure_connection()
    raw = connection.connection
    if (
        raw.prepare_threshold is None
        and connection.settings_dict["OPTIONS"].get("server_side_binding") is not True
    ):
        # Django turns psycopg's statement cache off. Its own cursors bind on the client and
        # are never prepared, so turning the cache on touches only the statements sent here
        # (with server-side binding configured, the project's own threshold is left alone).
        raw.prepare_threshold = HOT_PREPARE_THRESHOLD
    # Integers go as int8 whatever their size, so each statement is prepared once, not once
    # per combination of int2/int4/int8 parameters.
    values = {k: Int8(v) if type(v) is int else v for k, v in params.items()}
    with connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        cursor.execute(sql, values, prepare=True)
        return cursor.fetchone()


# The worker's two statements per task, built once: the start claim and the completion.
_START_SQL = f"""
    WITH started AS (
        UPDATE {Execution._meta.db_table}
           SET status = %(running)s, started_at = %(now)s, finished_at = NULL,
               last_heartbeat_at = %(now)s, retry_at = NULL, worker = %(worker)s,
               updated_at = %(now)s
         WHERE id = %(id)s
           AND (status IN (%(pending)s, %(queued)s)
                OR (status = %(retry)s AND retry_at <= %(now)s))
           AND NOT EXISTS (
                SELECT 1 FROM {Job._meta.db_table} x
                 WHERE x.id = {Execution._meta.db_table}.job_id AND x.expires IS NOT NULL
                   AND {Execution._meta.db_table}.scheduled_for
                       + x.expires * interval '1 second' < %(now)s)
     RETURNING id, job_id, checkpoint, scheduled_for
    ), attempt AS (
        INSERT INTO {Attempt._meta.db_table}
               (execution_id, number, worker, pid, started_at, outcome, error)
        SELECT s.id,
               1 + (SELECT count(*) FROM {Attempt._meta.db_table} a
                     WHERE a.execution_id = s.id),
               %(worker)s, %(pid)s, %(now)s, %(attempt_running)s, ''
          FROM started s
     RETURNING number
    ), keepalive AS (
        UPDATE {Job._meta.db_table} j SET last_keepalive_at = %(now)s
          FROM started s WHERE j.id = s.job_id
    )
    SELECT s.job_id, s.checkpoint, (SELECT number FROM attempt), s.scheduled_for FROM started s
    """
_START_VALUES = {
    "running": ExecutionStatus.RUNNING.value,
    "pending": ExecutionStatus.PENDING.value,
    "queued": ExecutionStatus.QUEUED.value,
    "retry": ExecutionStatus.RETRY.value,
    "attempt_running": AttemptOutcome.RUNNING.value,
}


def _start_in_one_statement(
    execution_id: int, *, worker: str, pid: int, now: datetime
) -> Started | None:
    """``_start_with_orm`` as one PostgreSQL statement: a worker pays one round trip per start.

    The same compare-and-set, attempt row and keep-alive, written as data-modifying CTEs.
    """
    row = execute_hot(
        _START_SQL,
        {**_START_VALUES, "id": execution_id, "now": now, "worker": worker, "pid": pid},
    )
    if row is None:
        return None
    checkpoint = json.loads(row[1]) if isinstance(row[1], str) else row[1]
    return Started(execution_id, row[0], row[2], checkpoint, row[3])


def record_adhoc_start(
    *, task: str, task_id: str, worker: str, pid: int, now: datetime
) -> Started | None:
    """Record a call of a schedulable task outside any job, then start it."""
    execution, _ = Execution.objects.get_or_create(
        task_id=task_id,
        defaults={
            "task": task,
            "scheduled_for": now,
            "status": ExecutionStatus.QUEUED,
            "queued_at": now,
            "created_at": now,
        },
    )
    return start_execution(execution_id=execution.pk, worker=worker, pid=pid, now=now)


def save_checkpoint(*, execution_id: int, checkpoint: Any) -> None:
    Execution.objects.filter(pk=execution_id, status=ExecutionStatus.RUNNING).update(
        checkpoint=checkpoint
    )


def _release_job(execution: Execution, *, now: datetime) -> None:
    """Let a forbid-overlap job's next occurrence be claimed, and count the run."""
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
    Job.objects.filter(pk=execution.job_id).update(**updates)


def _attempt_running(execution_id: int, attempt: int | None) -> Q:
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


def complete_execution(*, execution_id: int, now: datetime, attempt: int | None = None) -> bool:
    """Finish a running execution successfully, count the run and release its job.

    ``attempt`` is the attempt number the worker started; the write happens only while that
    attempt is still the running one.
    """
    if connection.vendor == "postgresql":
        changed, job_id = _complete_in_one_statement(execution_id, now=now, attempt=attempt)
        if not changed:
            return False
    else:
        with transaction.atomic():
            changed = Execution.objects.filter(
                _attempt_running(execution_id, attempt),
                pk=execution_id,
                status=ExecutionStatus.RUNNING,
            ).update(
                status=ExecutionStatus.COMPLETED, finished_at=now, last_error="", updated_at=now
            )
            if not changed:
                return False
            execution = Execution.objects.get(pk=execution_id)
            _finish_attempt(execution_id, AttemptOutcome.COMPLETED, "", now)
            _release_job(execution, now=now)
            job_id = execution.job_id
    logger.info("execution.completed execution=%s job=%s", execution_id, job_id)
    return True


_COMPLETE_SQL = f"""
    WITH done AS (
        UPDATE {Execution._meta.db_table}
           SET status = %(completed)s, finished_at = %(now)s, last_error = '',
               updated_at = %(now)s
         WHERE id = %(id)s AND status = %(running)s
           AND (%(attempt)s::int IS NULL OR EXISTS (
                SELECT 1 FROM {Attempt._meta.db_table} a
                 WHERE a.execution_id = %(id)s AND a.number = %(attempt)s
                   AND a.outcome = %(attempt_running)s))
     RETURNING id, job_id
    ), attempt AS (
        UPDATE {Attempt._meta.db_table}
           SET outcome = %(attempt_completed)s, finished_at = %(now)s
         WHERE execution_id IN (SELECT id FROM done) AND outcome = %(attempt_running)s
    ), job AS (
        UPDATE {Job._meta.db_table} j
           SET execute_count = j.execute_count + 1,
               last_keepalive_at = %(now)s,
               current_execution_id = NULLIF(j.current_execution_id, d.id)
          FROM done d WHERE j.id = d.job_id
    )
    SELECT job_id FROM done
    """
_COMPLETE_VALUES = {
    "completed": ExecutionStatus.COMPLETED.value,
    "running": ExecutionStatus.RUNNING.value,
    "attempt_completed": AttemptOutcome.COMPLETED.value,
    "attempt_running": AttemptOutcome.RUNNING.value,
}


def _complete_in_one_statement(
    execution_id: int, *, now: datetime, attempt: int | None
) -> tuple[bool, int | None]:
    """The completion as one PostgreSQL statement: (whether it was running, its job)."""
    row = execute_hot(
        _COMPLETE_SQL, {**_COMPLETE_VALUES, "id": execution_id, "now": now, "attempt": attempt}
    )
    return (False, None) if row is None else (True, row[0])


def _finish_attempt(execution_id: int, outcome: str, error: str, now: datetime) -> None:
    Attempt.objects.filter(execution_id=execution_id, outcome=AttemptOutcome.RUNNING).update(
        outcome=outcome, finished_at=now, error=error[:MAX_ERROR]
    )


def format_error(exc: BaseException | None, tb: Any = None, *, limit: int = 6) -> str:
    """``Class: message`` and the innermost frames of the traceback, short enough to read."""
    if exc is None:
        return ""
    head = f"{type(exc).__name__}: {exc}".strip()
    if tb is None:
        tb = exc.__traceback__
    if tb is None:
        return head
    if isinstance(tb, str):
        # Celery's main process reports a lost pool process (WorkerLostError) with the
        # traceback already formatted by billiard: keep its last lines, as for frames.
        frames = "\n".join(tb.strip().splitlines()[-2 * limit :])
        return f"{head}\n{frames}"[:MAX_ERROR]
    frames = "".join(traceback.format_tb(tb)[-limit:])
    return f"{head}\n{frames}"[:MAX_ERROR]


def fail_attempt(
    *,
    execution_id: int,
    error: str,
    outcome: str,
    now: datetime,
    permanent: bool = False,
    retry_in: float | None = None,
    from_statuses: Sequence[str] = (ExecutionStatus.RUNNING,),
    attempt: int | None = None,
) -> str | None:
    """End the running attempt with ``outcome``; retry the execution or fail it.

    The execution goes to RETRY with ``retry_count + 1`` and a ``retry_at`` from capped
    exponential backoff (or ``retry_in`` seconds when the task asked for a delay), until the
    job's ``max_retries`` are spent or the error is permanent; then it is FAILED and the job is
    released. Returns the new status, or None if the execution was no longer running.
    """
    with transaction.atomic():
        execution = (
            Execution.objects.select_for_update(of=("self",))
            .select_related("job")
            .filter(
                _attempt_running(execution_id, attempt),
                pk=execution_id,
                status__in=list(from_statuses),
            )
            .first()
        )
        if execution is None:
            return None
        job = execution.job
        max_retries = job.max_retries if job else conf.get("DEFAULT_MAX_RETRIES")
        execution.last_error = error[:MAX_ERROR]
        execution.updated_at = now
        if permanent or execution.retry_count >= max_retries:
            execution.status = ExecutionStatus.FAILED
            execution.finished_at = now
            execution.retry_at = None
        else:
            execution.retry_count += 1
            if retry_in is None:
                base = job.retry_backoff if job and job.retry_backoff is not None else None
                cap = job.retry_backoff_max if job and job.retry_backoff_max is not None else None
                delay = schedules.retry_delay(
                    attempt=execution.retry_count,
                    base=conf.get("RETRY_BACKOFF_BASE") if base is None else base,
                    cap=conf.get("RETRY_BACKOFF_CAP") if cap is None else cap,
                    key=execution.pk,
                )
            else:
                delay = timedelta(seconds=max(0.0, retry_in))
            execution.status = ExecutionStatus.RETRY
            execution.retry_at = now + delay
            execution.finished_at = now
        execution.save(
            update_fields=[
                "status",
                "retry_count",
                "retry_at",
                "finished_at",
                "last_error",
                "updated_at",
            ]
        )
        _finish_attempt(execution_id, outcome, error, now)
        if execution.status == ExecutionStatus.FAILED:
            _release_job(execution, now=now)
    logger.log(
        logging.ERROR if execution.status == ExecutionStatus.FAILED else logging.WARNING,
        "execution.%s execution=%s outcome=%s retry_count=%s retry_at=%s error=%s",
        "failed" if execution.status == ExecutionStatus.FAILED else "retry",
        execution_id,
        outcome,
        execution.retry_count,
        execution.retry_at,
        error.splitlines()[0] if error else "",
    )
    return execution.status


def cancel_execution(*, execution_id: int, now: datetime, reason: str = "cancelled") -> bool:
    with transaction.atomic():
        execution = (
            Execution.objects.select_for_update(of=("self",))
            .filter(pk=execution_id, status__in=[*EXECUTION_STARTABLE, ExecutionStatus.RUNNING])
            .first()
        )
        if execution is None:
            return False
        execution.status = ExecutionStatus.CANCELLED
        execution.finished_at = now
        execution.last_error = reason
        execution.save(update_fields=["status", "finished_at", "last_error", "updated_at"])
        _finish_attempt(execution_id, AttemptOutcome.CANCELLED, reason, now)
        _release_job(execution, now=now)
    logger.info("execution.cancelled execution=%s reason=%s", execution_id, reason)
    return True


def interrupt_execution(*, execution_id: int, now: datetime) -> bool:
    """The pool process is exiting under a running attempt (``task_postrun`` with state None).

    The attempt is recorded as interrupted and the execution becomes due for a retry at once
    (RETRY, ``retry_at`` now; not counted against its retries, since the task did not fail).
    Its message may be gone: a cold shutdown requeues it, but a SIGTERM sent to the pool
    process itself (the whole process group signalled, as a service manager may do) makes
    Celery acknowledge it as WorkerLostError. The scheduler's next tick therefore publishes
    it again; if the requeued message also arrives, the claim absorbs the second one.
    """
    with transaction.atomic():
        changed = Execution.objects.filter(pk=execution_id, status=ExecutionStatus.RUNNING).update(
            status=ExecutionStatus.RETRY, retry_at=now, finished_at=now, updated_at=now
        )
        if changed:
            _finish_attempt(
                execution_id, AttemptOutcome.INTERRUPTED, "worker shut down during the run", now
            )
    if changed:
        logger.warning("execution.interrupted execution=%s", execution_id)
    return bool(changed)


def heartbeat(*, execution_ids: Sequence[int], now: datetime) -> int:
    """Prove that these running executions are alive: one statement per beat."""
    if not execution_ids:
        return 0
    ids = list(execution_ids)
    with transaction.atomic():
        changed = Execution.objects.filter(pk__in=ids, status=ExecutionStatus.RUNNING).update(
            last_heartbeat_at=now
        )
        Job.objects.filter(executions__pk__in=ids).update(last_keepalive_at=now)
    return changed


def reap_stale_executions(*, now: datetime, stale_after: float, limit: int = 500) -> list[int]:
    """Give back running executions whose worker stopped proving it is alive."""
    cutoff = now - timedelta(seconds=stale_after)
    with transaction.atomic():
        stale = list(
            _lock(
                Execution.objects.filter(
                    status=ExecutionStatus.RUNNING, last_heartbeat_at__lt=cutoff
                )
            ).values_list("pk", "worker", "last_heartbeat_at")[:limit]
        )
    reaped = []
    for execution_id, worker, last in stale:
        status = fail_attempt(
            execution_id=execution_id,
            error=(
                f"abandoned: worker {worker or '?'} sent no heartbeat since "
                f"{last.isoformat() if last else 'start'} (stale after {stale_after:g}s)"
            ),
            outcome=AttemptOutcome.ABANDONED,
            now=now,
            retry_in=0,
        )
        if status is not None:
            logger.warning("execution.reaped execution=%s status=%s", execution_id, status)
            reaped.append(execution_id)
    return reaped
