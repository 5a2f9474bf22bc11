"""Attempts: the worker's writes from start to end of each try at an execution.

``start_execution`` claims an execution for one attempt (a compare-and-set, so a duplicate
message is acknowledged and does nothing); ``complete_execution``, ``fail_attempt`` (which
decides retry or failure), ``cancel_execution`` and ``interrupt_execution`` end it; the job is
released for its next occurrence when the execution is finished. Every write is conditional on
the state it expects, and on the attempt number the worker started, so a late or repeated
signal changes nothing. The worker's verbs commit on their own (``atomic(durable=True)``):
joined to a caller's transaction, a start or an end would not be visible, or could be rolled
back, after the worker acknowledged its message. ``cancel_execution`` may join one: a person's
or a domain app's cancel belongs with the rest of its change.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models.expressions import Combinable
from django.utils import timezone

from scheduling import conf
from scheduling.ledger.engine import DIED_OUTCOMES as DIED_OUTCOMES
from scheduling.ledger.engines import engine
from scheduling.ledger.values import Started
from scheduling.messages.errors import MAX_ERROR, StartHeld, headline
from scheduling.models import (
    EXECUTION_STARTABLE,
    EXECUTION_UNFINISHED,
    AttemptOutcome,
    Execution,
    ExecutionStatus,
)
from scheduling.rules.validation import awaiting_task_error
from scheduling.stages import failures, limits
from scheduling.timing import readable, schedules

logger = logging.getLogger("scheduling")


def start_execution(*, execution_id: int, worker: str, pid: int, now: datetime) -> Started | None:
    """Claim an execution for one attempt; None means another message already did.

    Only PENDING, QUEUED and due RETRY executions may start, so a duplicate or early doorbell
    is acknowledged and does nothing (and is counted in ``duplicates``). On PostgreSQL the
    start is not flushed before it returns; an execution that a recent crash recovery may have
    taken a start from raises ``StartHeld`` instead (see ``held_after_crash``).
    """
    started = _start(execution_id, worker=worker, pid=pid, now=now, limits_checked=False)
    if started is None:
        held = held_after_crash(execution_id)
        if held is not None:
            raise StartHeld(execution_id, held)
        if skip_expired(execution_id=execution_id, now=now):
            return None
        slot = limits.limited_slot(execution_id)
        if slot is not None:
            return _start_within_limits(slot, worker=worker, pid=pid, now=now)
        engine().count_duplicate(execution_id)
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


def _start_within_limits(
    slot: limits.Slot, *, worker: str, pid: int, now: datetime
) -> Started | None:
    """The start of an execution whose job or owner has a running limit
    (``scheduling.stages.limits``): locked and counted in one transaction, then started, or
    moved to WAITING with the reason."""
    with transaction.atomic(durable=True):
        limits.lock(slot)
        # The lock may have waited for the run that held the slot to finish and commit: a
        # start recorded at the time taken before the wait would come before that run's end.
        now = max(now, timezone.now())
        reason = limits.over_limit(slot)
        if reason is not None:
            limits.hold(slot, reason=reason, now=now)
            return None
        started = _start(slot.execution_id, worker=worker, pid=pid, now=now, limits_checked=True)
    if started is not None:
        logger.info(
            "execution.started execution=%s job=%s attempt=%s worker=%s",
            slot.execution_id,
            started.job_id,
            started.attempt,
            worker,
        )
    return started


def _start(
    execution_id: int, *, worker: str, pid: int, now: datetime, limits_checked: bool
) -> Started | None:
    return engine().start_attempt(
        execution_id=execution_id,
        worker=worker,
        pid=pid,
        now=now,
        lease=conf.get("STALE_AFTER"),
        limits_checked=limits_checked,
        owner_limits=limits.owner_limits_on(),
    )


def skip_expired(*, execution_id: int, now: datetime) -> bool:
    """Skip an occurrence that would start later than its job's ``expires`` allows.

    Called when a start did not happen, so the common path pays nothing for it: a message for
    an expired occurrence is acknowledged, the execution is SKIPPED with the reason and a
    forbid-overlap job is released for its next occurrence.
    """
    with transaction.atomic(durable=True):
        execution = engine().lock_execution(
            execution_id, statuses=EXECUTION_STARTABLE, with_job=True
        )
        if execution is None or not engine().expired(execution_id, now):
            return False
        late = (now - execution.scheduled_for).total_seconds()
        reason = (
            f"expired: would have started {late:.0f}s after its due time; "
            f"the job's expires is {execution.job.expires}s"
        )
        engine().finish_execution(execution, status=ExecutionStatus.SKIPPED, error=reason, now=now)
    logger.warning("execution.expired execution=%s late=%.0fs", execution_id, late)
    return True


def held_after_crash(execution_id: int) -> float | None:
    """Seconds before this execution may start, if the last crash recovery holds it (PostgreSQL).

    A start commits without waiting for its flush, so a server that crashed within that moment
    comes back without it while the body may still run. Until a lease has passed since the
    recovery, an execution made before it starts only through ``restore_start`` by the worker
    that started it; by then that worker has restored its start (its heartbeat or its end does)
    or its own fence has stopped the body, as for any lease it could not renew.
    """
    return engine().held_after_crash(execution_id, lease=conf.get("STALE_AFTER"))


def restore_start(*, execution_id: int, started: Started, worker: str, pid: int) -> bool:
    """Write again a start that the database's crash recovery undid; False if the run is gone.

    Only the worker that made the start calls this, when its heartbeat or its end finds the
    execution not running. The start is restored, durably this time, only while the
    execution is startable and has no attempt numbered as this one: the crash took the attempt
    row with the start, and nothing else removes an attempt. Another worker's start, a cancel
    or the reaper leave the execution otherwise, and the run is then no longer this worker's.
    """
    if not engine().restore_attempt(execution_id, started=started, worker=worker, pid=pid):
        return False
    logger.warning(
        "execution.start_restored execution=%s attempt=%s: the database's crash recovery had "
        "undone the start of a run still going on; written again",
        execution_id,
        started.attempt,
    )
    return True


def record_adhoc_start(
    *, task: str, task_id: str, worker: str, pid: int, now: datetime
) -> Started | None:
    """Record a call of a schedulable task outside any job, then start it."""
    execution_id = engine().record_adhoc_call(task=task, task_id=task_id, now=now)
    return start_execution(execution_id=execution_id, worker=worker, pid=pid, now=now)


def save_checkpoint(*, execution_id: int, checkpoint: Any) -> None:
    engine().save_checkpoint(execution_id, checkpoint)


def record_item_failures(*, execution_id: int, count: int, detail: str) -> None:
    """Add ``count`` failed items to the execution's tally (``RunContext.report_failures``)."""
    engine().add_item_failures(execution_id, count=count, detail=detail)


def complete_execution(
    *,
    execution_id: int,
    now: datetime,
    attempt: int | None = None,
    result: dict[str, Any] | None = None,
) -> bool:
    """Finish a running execution successfully, count the run and release its job.

    ``attempt`` is the attempt number the worker started; the write happens only while that
    attempt is still the running one. ``result`` (a Django task's return value, as
    ``{"value": …}``) is written in the same statement, so a run is never completed without it.
    """
    completed = engine().complete_attempt(
        execution_id=execution_id, now=now, attempt=attempt, result=result
    )
    if completed is None:
        return False
    job_id = completed.job_id
    logger.info("execution.completed execution=%s job=%s", execution_id, job_id)
    return True


#: Attempts lost with their worker (killed, or shut down under them) that a Django task run
#: gets again even when it asked for no retries: the framework's run must not be lost.
LOST_OUTCOMES = (AttemptOutcome.ABANDONED, AttemptOutcome.INTERRUPTED, AttemptOutcome.FENCED)
#: Attempts whose process died under them (killed, ended by its body with ``os._exit``, taken
#: by the OOM killer): counted against ``SCHEDULING_MAX_INTERRUPTIONS``. A shutdown is not.


def interruptions_spent_error(count: int, last: str) -> str:
    """The error of an execution failed because its process died under it ``count`` times."""
    head, _, rest = last.partition("\n")
    return (
        f"the worker process died under it {count} times "
        f"(SCHEDULING_MAX_INTERRUPTIONS is {conf.get('MAX_INTERRUPTIONS')}); last: {head}"
        + (f"\n{rest}" if rest else "")
    )


def retries_allowed(execution: Execution, outcome: str) -> int:
    """How many retries ``execution`` may have after an attempt that ended with ``outcome``.

    A job's executions follow the job's ``max_retries``. A run enqueued through Django's Tasks
    framework follows its task's ``max_retries`` (0 unless the task opts in) for errors it
    raised; an attempt lost with its worker is retried up to ``SCHEDULING_DEFAULT_MAX_RETRIES``
    times whatever the task says, since the body may never have run. Ad-hoc runs take the
    default.
    """
    default = int(conf.get("DEFAULT_MAX_RETRIES"))
    if execution.job is not None:
        return int(execution.job.max_retries)
    if execution.call is not None:
        asked = int(execution.call.get("max_retries", 0))
        return max(asked, default) if outcome in LOST_OUTCOMES else asked
    return default


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
    stale_before: datetime | Combinable | None = None,
    task_error: dict[str, str] | None = None,
    worker: str | None = None,
) -> str | None:
    """End the running attempt with ``outcome``; retry the execution or fail it.

    ``attempt`` (its number) or ``worker`` (the worker it runs on) name the attempt the caller
    ends; where neither is given, the running one, whichever it is.

    The execution goes to RETRY with ``retry_count + 1`` and a ``retry_at`` from capped
    exponential backoff (or ``retry_in`` seconds when the task asked for a delay), until the
    job's ``max_retries`` are spent or the error is permanent; then it is FAILED and the job is
    released. An attempt whose process died under it (``DIED_OUTCOMES``) also counts against
    ``SCHEDULING_MAX_INTERRUPTIONS``: the one that reaches it fails the execution, naming the
    count and the last cause. An ``interrupted`` attempt (the worker shut down under it: a
    deploy, a scale-in) spends no retry and never counts there: it is not the task's failure,
    so however many shutdowns a run meets it is due again. Returns the new status, or None if
    the execution was no longer running (or, with ``stale_before``, its heartbeat is no longer
    older than that: the reaper's condition).

    No delay can overflow here (a backoff of 1e308 on a row written behind the model, a task
    asking ``retry(countdown=1e308)``): every delay is held to ``conf.RETRY_DELAY_LIMIT``, so
    the task's own error is always what gets recorded.
    """
    with transaction.atomic(durable=True):
        execution = engine().lock_execution(
            execution_id,
            statuses=from_statuses,
            attempt=attempt,
            stale_before=stale_before,
            with_job=True,
            worker=worker,
        )
        if execution is None:
            return None
        job = execution.job
        max_retries = retries_allowed(execution, outcome)
        attempt_error = error
        if outcome in DIED_OUTCOMES:
            died = engine().died_attempts(execution_id) + 1  # with this one
            if died >= int(conf.get("MAX_INTERRUPTIONS")):
                permanent = True
                error = interruptions_spent_error(died, error)
        shutdown = outcome == AttemptOutcome.INTERRUPTED
        spends_retry = not shutdown
        permanent = permanent and not shutdown
        execution.last_error = error[:MAX_ERROR]
        execution.task_unknown_since = None  # a process that knew its task tried it
        if task_error is not None:
            kept = execution.result or {}
            execution.result = {**kept, "errors": [*kept.get("errors", []), task_error]}
        execution.updated_at = now
        if permanent or (spends_retry and execution.retry_count >= max_retries):
            execution.status = ExecutionStatus.FAILED
            execution.finished_at = now
            execution.retry_at = None
        else:
            execution.retry_count += 1 if spends_retry else 0
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
                delay = schedules.bounded_delay(retry_in)
            execution.status = ExecutionStatus.RETRY
            execution.retry_at = now + delay
            execution.finished_at = now
        engine().end_attempt(
            execution,
            outcome=outcome,
            error=attempt_error,
            now=now,
            result_changed=task_error is not None,
        )
        if execution.status == ExecutionStatus.FAILED and execution.job_id is not None:
            # Counted with the failure itself: the job's row lock orders concurrent ends.
            failures.count_failure(job_id=execution.job_id, error=error, now=now)
    logger.log(
        logging.ERROR if execution.status == ExecutionStatus.FAILED else logging.WARNING,
        "execution.%s execution=%s outcome=%s retry_count=%s retry_at=%s error=%s",
        "failed" if execution.status == ExecutionStatus.FAILED else "retry",
        execution_id,
        outcome,
        execution.retry_count,
        execution.retry_at,
        headline(error),
    )
    return execution.status


#: How a handed-back execution's ``last_error`` begins, while it waits (``await_known_task``).
AWAITING_TASK = "waiting for a process that knows task"


def await_known_task(*, execution_id: int, target: str, now: datetime, who: str) -> str | None:
    """Hand back an execution that ``who`` (a worker, a publisher) cannot run: its task (or
    task table) ``target`` is one this process does not know. Returns the new status, or None
    if the execution was not startable any more.

    A rolling deploy: a message of a task only the new release declares reached a worker of
    the previous one (Celery drops such a message, ``task_unknown``), or a scheduler of the
    previous release was about to publish it again. The execution goes to RETRY without
    spending a retry, marked since when it waits (the first time only), with ``retry_at`` a
    little later (``schedules.awaiting_delay``): the republish loop sends it again then, and
    a process that knows the task runs it. Past ``SCHEDULING_UNKNOWN_TASK_GRACE`` it fails,
    naming the task. A compare-and-set from the startable states, so a second report is a
    no-op.
    """
    grace = timedelta(seconds=conf.get("UNKNOWN_TASK_GRACE"))
    with transaction.atomic(durable=True):
        execution = engine().lock_execution(execution_id, statuses=EXECUTION_STARTABLE)
        if execution is None:
            return None
        since = execution.task_unknown_since or now
        if now - since >= grace:
            waited_out = True
        else:
            waited_out = False
            delay = schedules.awaiting_delay(waited=now - since, grace=grace)
            engine().await_task(
                execution_id,
                retry_at=now + delay,
                since=since,
                error=(
                    f"{AWAITING_TASK} {target!r} since {readable.instant(since)}: "
                    f"{who} does not know it"
                ),
                now=now,
            )
    if waited_out:
        return fail_attempt(
            execution_id=execution_id,
            error=awaiting_task_error(target, grace=grace.total_seconds()),
            outcome=AttemptOutcome.FAILED,
            now=now,
            permanent=True,
            from_statuses=EXECUTION_STARTABLE,
        )
    logger.warning(
        "execution.awaiting_task execution=%s task=%s since=%s who=%s retry_at=%s",
        execution_id,
        target,
        since.isoformat(),
        who,
        (now + delay).isoformat(),
    )
    return ExecutionStatus.RETRY


def fence_attempt(
    *, execution_id: int, attempt: int | None, error: str, now: datetime
) -> str | None:
    """Record that the worker stopped attempt ``attempt``'s body: its lease could not be renewed.

    While the attempt is still the running one the execution is retried at once under its
    job's rules (``fail_attempt``, outcome ``fenced``). A worker cut off for longer than the
    lease reaches the database after the reaper gave the attempt up as ``abandoned``; the
    attempt is then relabelled ``fenced`` (its body did stop, on purpose) and the execution,
    already retried, is left alone. Returns the execution's new status, or None.
    """
    status = fail_attempt(
        execution_id=execution_id,
        error=error,
        outcome=AttemptOutcome.FENCED,
        now=now,
        retry_in=0,
        attempt=attempt,
    )
    if status is None and attempt is not None:
        relabelled = engine().relabel_fenced(execution_id, attempt=attempt, error=error)
        if relabelled:
            logger.warning(
                "execution.fenced_late execution=%s attempt=%s: reaped meanwhile",
                execution_id,
                attempt,
            )
    return status


def cancel_execution(*, execution_id: int, now: datetime, reason: str = "cancelled") -> bool:
    with transaction.atomic():
        execution = engine().lock_execution(execution_id, statuses=EXECUTION_UNFINISHED)
        if execution is None:
            return False
        engine().finish_execution(
            execution,
            status=ExecutionStatus.CANCELLED,
            error=reason,
            now=now,
            attempt_outcome=AttemptOutcome.CANCELLED,
        )
    logger.info("execution.cancelled execution=%s reason=%s", execution_id, reason)
    return True


def cancel_running(*, execution_id: int, now: datetime, reason: str) -> str | None:
    """``cancel_execution``, returning the message id whose body to stop (None: nothing was
    cancelled). For a run a ``cancel_other`` claim replaced while its row was busy."""
    task_id = Execution.objects.filter(pk=execution_id).values_list("task_id", flat=True).first()
    if task_id is None or not cancel_execution(execution_id=execution_id, now=now, reason=reason):
        return None
    return str(task_id)


def interrupt_execution(*, execution_id: int, now: datetime) -> bool:
    """The pool process is exiting under a running attempt (``task_postrun`` with state None).

    The attempt is recorded as interrupted and the execution becomes due for a retry at once
    (RETRY, ``retry_at`` now; no retry spent, since the task did not fail). A shutdown never
    fails the run nor counts against ``SCHEDULING_MAX_INTERRUPTIONS`` (which bounds processes
    that died under it, ``abandoned``) or the job's failures. Its message may be gone: a cold
    shutdown requeues it, but a SIGTERM sent to the pool process itself (the whole process
    group signalled, as a service manager may do) makes Celery acknowledge it as
    WorkerLostError. The scheduler's next tick therefore publishes it again; if the requeued
    message also arrives, the claim absorbs the second one.
    """
    status = fail_attempt(
        execution_id=execution_id,
        error="interrupted: the worker shut down during the run",
        outcome=AttemptOutcome.INTERRUPTED,
        now=now,
        retry_in=0,
    )
    if status is not None:
        logger.warning("execution.interrupted execution=%s status=%s", execution_id, status)
    return status is not None
