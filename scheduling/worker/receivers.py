"""Celery signal receivers that keep the execution history true.

Where each signal fires matters (see docs/architecture.md): exceptions, soft time limits and
``self.retry()`` are reported in the pool process that ran the task, with our request at hand;
a lost pool process (WorkerLostError), a hard time limit, a revoke, an unknown task and a
rejected message are reported in the worker's main process, where only the task id is known.
Receivers therefore find the execution by the request when they can and by the task id when
they must, and every transition they make is a compare-and-set in ``scheduling.stages.attempts``, so
a signal that fires twice (Celery 5.7 sends two ``task_failure`` for a hard time limit) or late
changes nothing the second time.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import datetime
from typing import Any

from billiard.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded, WorkerLostError
from celery import signals
from celery.exceptions import Retry
from django.db import close_old_connections
from django.utils import timezone

from scheduling.messages.errors import Fenced, RunCancelled, format_error
from scheduling.models import (
    EXECUTION_STARTABLE,
    AttemptOutcome,
    DropKind,
    Execution,
    ExecutionStatus,
)
from scheduling.stages import attempts
from scheduling.worker import guardstep, reconnect, refusals, runtime
from scheduling.worker.heartbeat import heartbeat_thread
from scheduling.worker.taskbase import BodyExit

logger = logging.getLogger("scheduling")


def _execution_for(request: Any, task_id: str | None = None) -> int | None:
    execution_id = getattr(request, "duecourse_execution_id", None)
    if execution_id is not None:
        return int(execution_id)
    task_id = task_id or getattr(request, "id", None)
    if not task_id:
        return None
    close_old_connections()
    try:
        return runtime.on_live_connection(
            lambda: Execution.objects.filter(task_id=task_id).values_list("pk", flat=True).first()
        )
    except Exception:  # a malformed id in a foreign message
        return None


def _is_schedulable(task: Any) -> bool:
    """Whether ``task``'s runs are in the ledger (a ``ScheduledTask``)."""
    return bool(getattr(task, "ledger", False))


@signals.task_success.connect
def on_task_success(sender: Any = None, **_: Any) -> None:
    execution_id = getattr(sender.request, "duecourse_execution_id", None) if sender else None
    if execution_id is None:
        return
    runtime.body_ended(execution_id)
    close_old_connections()
    # The connection may have died while the task ran (a database restart), or the database
    # may be away right now: the outcome is kept until it is written (runtime.write_until_done).
    request = sender.request
    runtime.write_until_done(
        lambda: runtime.end_write(
            request,
            lambda: attempts.complete_execution(
                execution_id=execution_id,
                now=timezone.now(),
                attempt=getattr(request, "duecourse_attempt", None),
                result=getattr(request, "duecourse_result", None),
            ),
        ),
        execution_id=execution_id,
        what="completed",
    )
    runtime.end(execution_id)


@signals.task_failure.connect
def on_task_failure(
    sender: Any = None,
    task_id: str | None = None,
    exception: BaseException | None = None,
    traceback: Any = None,
    **_: Any,
) -> None:
    if sender is not None and not _is_schedulable(sender):
        return
    request = getattr(sender, "request", None)
    execution_id = _execution_for(request, task_id)
    if execution_id is None:
        return
    runtime.body_ended(execution_id)
    close_old_connections()
    exited = exception.exited if isinstance(exception, BodyExit) else None
    if exited is not None:
        # The body tried to end its process: recorded as what it raised, with its frames.
        exception, traceback = exited, exited.__traceback__
    outcome, permanent = _classify(sender, exception)
    error = format_error(exception, traceback)
    if exited is not None:
        kind = type(exited)
        error = (
            f"{kind.__module__}.{kind.__qualname__} raised by the task body (it may not end "
            f"its worker process; failed like any error): {error}"
        )
    if outcome == AttemptOutcome.FENCED:
        error = f"fenced: the worker could not renew the lease, so it stopped the body ({error})"
    elif outcome == AttemptOutcome.TIMEOUT:
        error = f"timeout: {error}"
    elif outcome == AttemptOutcome.ABANDONED:
        error = f"abandoned: the pool process running it died ({error})"
    started_here = getattr(request, "duecourse_execution_id", None) is not None
    if started_here or isinstance(exception, WorkerLostError | TimeLimitExceeded):
        statuses = [ExecutionStatus.RUNNING]
    else:
        # The task failed before its attempt began (an error in the worker before the claim):
        # count it as a failed attempt, so that a message that can never start ends FAILED
        # after the job's retries instead of being re-published forever. Never RUNNING here:
        # that would be another worker's live attempt.
        statuses = EXECUTION_STARTABLE
        error = f"failed before the attempt started: {error}"

    task_error = _task_error(sender, request, exception, traceback)

    def write() -> str | None:
        if outcome == AttemptOutcome.FENCED and started_here:
            return attempts.fence_attempt(
                execution_id=execution_id,
                attempt=getattr(request, "duecourse_attempt", None),
                error=error,
                now=timezone.now(),
            )
        return attempts.fail_attempt(
            execution_id=execution_id,
            error=error,
            outcome=outcome,
            now=timezone.now(),
            permanent=permanent,
            retry_in=0 if outcome == AttemptOutcome.ABANDONED else None,
            from_statuses=statuses,
            attempt=getattr(request, "duecourse_attempt", None),
            task_error=task_error,
            # The main process knows no attempt number: the attempt its pool process ran is
            # the running one on this worker (a thawed worker must not end another's).
            worker=None if started_here else _this_worker,
        )

    if started_here:
        # In the pool process, before the acknowledgement: keep the outcome until written.
        runtime.write_until_done(
            lambda: runtime.end_write(request, write), execution_id=execution_id, what=outcome
        )
    else:
        # The worker's main process (a lost pool process, a hard time limit) must not stop
        # serving its other tasks; the reaper covers an end it could not write.
        runtime.on_live_connection(write)
    runtime.end(execution_id)


def _task_error(
    task: Any, request: Any, exception: BaseException | None, traceback: Any
) -> dict[str, str] | None:
    """The error a Django task run keeps in its result (class path and traceback), or None.

    The runner records what its body raised (``duecourse_task_error``); a hard time limit or a
    lost pool process is reported here, in the worker's main process, with the exception alone.
    """
    recorded = getattr(request, "duecourse_task_error", None)
    if recorded is not None:
        return dict(recorded)
    if not getattr(task, "keeps_errors", False) or exception is None:
        return None
    kind = type(exception)
    return {
        "exception_class_path": f"{kind.__module__}.{kind.__qualname__}",
        "traceback": format_error(exception, traceback),
    }


def _classify(task: Any, exception: BaseException | None) -> tuple[str, bool]:
    if isinstance(exception, Fenced):
        return AttemptOutcome.FENCED, False
    if isinstance(exception, RunCancelled):
        return AttemptOutcome.CANCELLED, False
    if isinstance(exception, SoftTimeLimitExceeded | TimeLimitExceeded):
        return AttemptOutcome.TIMEOUT, False
    if isinstance(exception, WorkerLostError):
        return AttemptOutcome.ABANDONED, False
    permanent_errors = getattr(task, "permanent_errors", ())
    permanent = bool(permanent_errors) and isinstance(exception, permanent_errors)
    return AttemptOutcome.FAILED, permanent


@signals.task_retry.connect
def on_task_retry(sender: Any = None, request: Any = None, reason: Any = None, **_: Any) -> None:
    execution_id = getattr(request, "duecourse_execution_id", None)
    if execution_id is None:
        return
    runtime.body_ended(execution_id)
    close_old_connections()
    now = timezone.now()
    retry_in: float | None = None
    cause: BaseException | None = None
    if isinstance(reason, Retry):
        cause = reason.exc
        retry_in = _seconds_until(reason.when, now)
    error = format_error(cause) if cause else f"retry requested: {reason or ''}".strip()
    permanent_errors = getattr(sender, "permanent_errors", ())
    permanent = cause is not None and bool(permanent_errors) and isinstance(cause, permanent_errors)
    runtime.write_until_done(
        lambda: runtime.end_write(
            request,
            lambda: attempts.fail_attempt(
                execution_id=execution_id,
                error=error,
                outcome=AttemptOutcome.FAILED,
                now=now,
                permanent=permanent,
                retry_in=retry_in,
                attempt=getattr(request, "duecourse_attempt", None),
            ),
        ),
        execution_id=execution_id,
        what="retry",
    )
    runtime.end(execution_id)


def _seconds_until(when: Any, now: datetime) -> float | None:
    if when is None:
        return None
    if isinstance(when, datetime):
        return max(0.0, (when - now).total_seconds())
    try:
        return max(0.0, float(when))
    except (TypeError, ValueError):
        return None


@signals.task_postrun.connect
def on_task_postrun(sender: Any = None, state: str | None = None, **_: Any) -> None:
    """Handle the ends that no other signal reports.

    ``state`` None means the pool process is exiting under the task (a cold shutdown, or a
    SIGTERM sent to the pool process itself): the execution is retried at once, whether or not
    Celery requeued the message (see ``attempts.interrupt_execution``). A body that raised
    ``Ignore`` or ``Reject`` after it started leaves nothing to retry: the execution is
    cancelled with that reason.
    """
    execution_id = getattr(getattr(sender, "request", None), "duecourse_execution_id", None)
    if execution_id is None:
        return
    runtime.body_ended(execution_id)
    if state is not None and state not in ("IGNORED", "REJECTED"):
        # Every other end was written by its own signal; nothing to write here.
        runtime.end(execution_id)
        return
    close_old_connections()
    now = timezone.now()
    if state is None:
        runtime.on_live_connection(
            lambda: attempts.interrupt_execution(execution_id=execution_id, now=now)
        )
    elif state in ("IGNORED", "REJECTED"):
        runtime.on_live_connection(
            lambda: attempts.cancel_execution(
                execution_id=execution_id, now=now, reason=f"the task body raised {state.lower()}"
            )
        )
    runtime.end(execution_id)


@signals.task_revoked.connect
def on_task_revoked(
    request: Any = None, terminated: bool = False, expired: bool = False, **_: Any
) -> None:
    execution_id = _execution_for(None, getattr(request, "id", None))
    if execution_id is None:
        return
    reason = "expired" if expired else "revoked (terminated)" if terminated else "revoked"
    attempts.cancel_execution(execution_id=execution_id, now=timezone.now(), reason=reason)


@signals.task_unknown.connect
def on_task_unknown(name: str | None = None, id: str | None = None, **_: Any) -> None:
    """A message for a task this worker does not know: Celery has already dropped it (it
    rejects the message without requeueing and fails the id in the result backend). The
    execution is not lost: it is handed back to wait for a worker that knows the task (a
    rolling deploy, ``attempts.await_known_task``), and fails only after the grace."""
    execution_id = _execution_for(None, id)
    if execution_id is None:
        return
    attempts.await_known_task(
        execution_id=execution_id,
        target=str(name),
        now=timezone.now(),
        who=f"worker {socket.gethostname()} (pid {os.getpid()})",
    )


@signals.task_rejected.connect
def on_task_rejected(
    sender: Any = None, message: Any = None, exc: BaseException | None = None, **_: Any
) -> None:
    """A message Celery itself refused (no task named, an invalid request): it is gone from
    the broker; it is counted and logged as a drop, and the execution it names is failed."""
    headers = getattr(message, "headers", None)
    headers = headers if isinstance(headers, dict) else {}
    worker = str(getattr(sender, "hostname", "") or "")
    reason = (
        f"Celery cannot read it as a task request ({type(exc).__name__})"
        if exc is not None
        else "Celery cannot read it as a task message: it names no task"
    )
    logger.error(
        "message.dropped task=%s id=%s kind=%s worker=%s reason=%s",
        refusals.text_of(headers.get("task")),
        refusals.text_of(headers.get("id")),
        DropKind.REJECTED,
        worker,
        reason,
    )
    refusals.record_drop(
        refusals.Refusal(DropKind.REJECTED, reason), message=message, body=None, worker=worker
    )


@signals.worker_process_shutdown.connect
def on_worker_process_shutdown(**_: Any) -> None:
    """Hand back executions a cleanly exiting process still runs, for their requeued messages."""
    now = timezone.now()
    for execution_id in heartbeat_thread.running():
        try:
            attempts.interrupt_execution(execution_id=execution_id, now=now)
        except Exception:
            logger.exception("execution.interrupt_failed execution=%s", execution_id)


#: This worker's name (``name@host``), as its attempts record it: set in the worker's main
#: process, which ends the attempt of a pool process it lost, and names the worker it ran on.
_this_worker: str | None = None


@signals.worker_init.connect
def on_worker_init(sender: Any = None, **_: Any) -> None:
    """Guard every task's messages in this worker, not only the ledger tasks' (``GuardStep``),
    and let it survive closing a connection to a broker that went away (``ReconnectStep``)."""
    global _this_worker
    _this_worker = getattr(sender, "hostname", None) or None
    app = getattr(sender, "app", None)
    if app is not None:
        app.steps["consumer"].add(guardstep.GuardStep)
        app.steps["consumer"].add(reconnect.ReconnectStep)


@signals.worker_ready.connect
def on_worker_ready(sender: Any = None, **_: Any) -> None:
    logger.info("worker.ready hostname=%s", getattr(sender, "hostname", "?"))


@signals.worker_shutdown.connect
def on_worker_shutdown(sender: Any = None, **_: Any) -> None:
    logger.info("worker.stopped hostname=%s", getattr(sender, "hostname", "?"))
