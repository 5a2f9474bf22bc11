"""The worker side of an attempt: begin it from the task, end it from the signals.

``begin`` runs in ``ScheduledTask.before_start`` (inside Celery's trace, where raising
``Ignore`` acknowledges a duplicate message without running the body); the receivers in
``scheduling.worker.receivers`` record how the attempt ended.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from billiard.exceptions import SoftTimeLimitExceeded
from celery.exceptions import Reject
from django.db import InterfaceError, OperationalError, close_old_connections, connection
from django.utils import timezone

from scheduling import conf
from scheduling.messages.errors import Fenced, StartHeld
from scheduling.rules.registry import EXECUTION_HEADER
from scheduling.stages import attempts, liveness
from scheduling.worker import fence
from scheduling.worker.heartbeat import heartbeat_thread
from scheduling.worker.run_context import RunContext

logger = logging.getLogger("scheduling")
T = TypeVar("T")

DATABASE_DOWN_PAUSE = 2.0
#: The longest a pool process waits on a start held after a crash before handing it back.
HELD_PAUSE = 5.0


def on_live_connection(write: Callable[[], T]) -> T:
    """Run a ledger write; if the kept connection turns out dead, run it once more on a new one.

    Workers keep their database connection between tasks (CONN_MAX_AGE), and Django replaces
    only a connection that already raised. One the server closed while it sat idle (a database
    restart, a failover, an idle timeout) fails on its first use, and that use must not be the
    write that records a start or an end: the run would be lost, or done twice after the
    reaper. Every write passed here is a compare-and-set, so a second try after an ambiguous
    first one changes nothing.
    """
    try:
        return write()
    except (OperationalError, InterfaceError) as exc:
        logger.warning("worker.reconnecting pid=%s error=%r", os.getpid(), exc)
        connection.close()
        return write()


END_RETRY_FIRST = 0.5
END_RETRY_MAX = 5.0


def write_until_done(write: Callable[[], T], *, execution_id: int, what: str) -> T:
    """Write the end of an attempt whose body has finished, however long the database is away.

    The outcome exists only in this process until it is written. The receivers that call this
    run in the pool process before Celery acknowledges an ``acks_late`` message, so waiting
    here holds the acknowledgement: the message stays unacknowledged, the heartbeat thread
    keeps the execution tracked (it beats again as soon as the server answers), and the write
    is tried again with a doubling pause (at most END_RETRY_MAX seconds) until it succeeds.
    The scheduler does not reap the run meanwhile (it waits a full STALE_AFTER after it
    regains the database itself). The task's hard time limit still bounds the wait: billiard
    counts the receivers in, and a process killed for it leaves the run to the reaper.
    """
    delay = END_RETRY_FIRST
    while True:
        try:
            return on_live_connection(write)
        except (OperationalError, InterfaceError) as exc:
            logger.error(
                "execution.end_deferred execution=%s write=%s retry_in=%.1fs error=%r",
                execution_id,
                what,
                delay,
                exc,
            )
            connection.close()
        except SoftTimeLimitExceeded:
            # The soft limit cut into the write (its transaction rolled back); the body is
            # done, so the limit has nothing left to stop: write again.
            logger.warning("execution.end_soft_limit execution=%s write=%s", execution_id, what)
            continue
        try:
            time.sleep(delay)
        except SoftTimeLimitExceeded:
            logger.warning("execution.end_soft_limit execution=%s write=%s", execution_id, what)
        delay = min(delay * 2, END_RETRY_MAX)


def execution_id_of(request: Any) -> int | None:
    """The execution id a message carries in its headers, if any."""
    value = getattr(request, EXECUTION_HEADER, None)
    if value is None:
        headers = getattr(request, "headers", None) or {}
        value = headers.get(EXECUTION_HEADER)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def begin(task: Any) -> bool:
    """Start the attempt this message asks for; False means: acknowledge and skip the body."""
    request = task.request
    close_old_connections()
    # The lease starts when the start is sent, on this process's monotonic clock: the database
    # stamps the start's heartbeat no earlier than that.
    sent = time.monotonic()
    now = timezone.now()
    worker = request.hostname or ""
    execution_id = execution_id_of(request)
    if execution_id is None and (
        request.is_eager or not conf.get("RECORD_ADHOC") or not request.id
    ):
        return True
    try:
        if execution_id is None:
            started = on_live_connection(
                lambda: attempts.record_adhoc_start(
                    task=task.name, task_id=request.id, worker=worker, pid=os.getpid(), now=now
                )
            )
        else:
            started = on_live_connection(
                lambda: attempts.start_execution(
                    execution_id=execution_id, worker=worker, pid=os.getpid(), now=now
                )
            )
    except (OperationalError, InterfaceError) as exc:
        # The database is away. Acknowledging would leave the row waiting for REQUEUE_AFTER;
        # hand the message back instead, after a pause so a dead database is not hammered.
        logger.error("execution.start_deferred execution=%s error=%r", execution_id, exc)
        connection.close()
        time.sleep(DATABASE_DOWN_PAUSE)
        raise Reject(exc, requeue=True) from exc
    except StartHeld as exc:
        # Right after a crash recovery: hand the message back, to be tried once the hold ends.
        logger.warning("execution.start_held execution=%s: %s", execution_id, exc)
        time.sleep(min(exc.seconds, HELD_PAUSE))
        raise Reject(str(exc), requeue=True) from exc
    if started is None:
        return False
    request.duecourse_execution_id = started.execution_id
    request.duecourse_attempt = started.attempt
    request.duecourse_started = started
    heartbeat_thread.track(started.execution_id, lease_from=sent, started=started, worker=worker)
    waited = time.monotonic() - sent
    if waited >= fence.fence_limits()[0]:
        # The start's answer came so late (a link that stalled mid-statement) that the lease it
        # began may be spent: the body must not start at all.
        raise Fenced(
            f"execution {started.execution_id}: the start took {waited:.1f}s; "
            "its lease cannot be trusted"
        )
    request.duecourse_checkpoint = started.checkpoint
    request.duecourse_run = RunContext(
        execution_id=started.execution_id,
        job_id=started.job_id,
        scheduled_for=started.scheduled_for,
        attempt=started.attempt,
        checkpoint=started.checkpoint,
        _save=_save_checkpoint,
        _keep_alive=_keep_alive,
        _report=_report_failures,
    )
    return True


def _save_checkpoint(execution_id: int, value: Any) -> None:
    on_live_connection(
        lambda: attempts.save_checkpoint(execution_id=execution_id, checkpoint=value)
    )


def _report_failures(execution_id: int, count: int, detail: str) -> None:
    on_live_connection(
        lambda: attempts.record_item_failures(execution_id=execution_id, count=count, detail=detail)
    )


def _keep_alive(execution_id: int) -> None:
    on_live_connection(lambda: liveness.record_heartbeat(execution_ids=[execution_id]))


def end_write(request: Any, write: Callable[[], T]) -> T:
    """Write the end of this process's attempt; restore its start first if a crash undid it.

    ``write`` is a compare-and-set on the running attempt. Finding nothing to change, it is
    tried once more if ``attempts.restore_start`` writes the start again: the start's commit
    did not wait for its flush, and a database that crashed meanwhile came back without it.
    """
    result = write()
    started = getattr(request, "duecourse_started", None)
    if result or started is None:
        return result
    worker = getattr(request, "hostname", None) or ""
    if attempts.restore_start(
        execution_id=started.execution_id, started=started, worker=worker, pid=os.getpid()
    ):
        return write()
    return result


def body_ended(execution_id: int) -> None:
    """The body returned or raised: its end is written next, and it is no longer fenced."""
    heartbeat_thread.body_ended(execution_id)


def end(execution_id: int) -> None:
    heartbeat_thread.untrack(execution_id)
