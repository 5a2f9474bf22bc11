"""What refusing a message does: acknowledge it, log it as ``message.dropped``, count it
by worker and kind, and fail the ledger's execution it names, with the reason.

The checks that find a refusal are ``scheduling.worker.guard``'s and, below the message,
``scheduling.worker.transports``'; each hands what it found here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from scheduling.models import EXECUTION_STARTABLE, AttemptOutcome, DropKind, Execution
from scheduling.rules import arguments
from scheduling.rules.registry import EXECUTION_HEADER
from scheduling.stages import attempts, drops
from scheduling.worker import runtime

logger = logging.getLogger("scheduling")


@dataclass(frozen=True)
class Refusal:
    """Why a message may not go to a pool process: its kind (``DropKind``) and one line."""

    kind: str
    reason: str


def unreadable(part: str, exc: BaseException, what: str = "") -> Refusal:
    """Why ``part`` of a message, whose decoding raised ``exc``, cannot be read: too deep for
    Python's JSON reader (how deep that is depends on the Python: about 1,000 levels on 3.11,
    several thousand on 3.12 and later), or not decodable at all."""
    if RecursionError in {type(exc), type(exc.__cause__), type(exc.__context__)}:
        return Refusal(DropKind.UNDECODABLE, f"{part}: is {arguments.TOO_DEEP_TO_READ}")
    return Refusal(DropKind.UNDECODABLE, f"{part}: does not decode{what} ({type(exc).__name__})")


def text_of(value: Any, limit: int = 80) -> str:
    """A value a message brought, fit for a log line or a reason: quoted text, cut short (a
    value that is not text is named by its type, never printed: it may nest without end)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        return repr(value[:limit] + ("..." if len(value) > limit else ""))
    return f"<{type(value).__name__}>"


def named_execution(message: Any, body: Any) -> int | None:
    """The ledger's execution a message names: by the execution header, else by its task id."""
    headers = message.headers if isinstance(message.headers, dict) else {}
    proto1 = body if isinstance(body, dict) else {}
    inner = proto1.get("headers")
    raw = headers.get(EXECUTION_HEADER)
    if raw is None and isinstance(inner, dict):
        raw = inner.get(EXECUTION_HEADER)
    if isinstance(raw, int | str) and not isinstance(raw, bool):
        try:
            execution_id = int(raw)
        except ValueError:
            execution_id = 0
        if 0 < execution_id < 2**63:
            return execution_id
    task_id = headers.get("id", proto1.get("id"))
    if not isinstance(task_id, str):
        return None
    try:
        parsed = uuid.UUID(task_id)
    except ValueError:
        return None
    return runtime.on_live_connection(
        lambda: Execution.objects.filter(task_id=parsed).values_list("pk", flat=True).first()
    )


def refuse(
    message: Any,
    body: Any,
    found: Refusal,
    *,
    ack: Callable[..., Any],
    task: str,
    worker: str,
    connection_errors: tuple[type[BaseException], ...] = (),
) -> None:
    """Drop the message for good; fail the execution it names, if any; count and log the drop.

    ``ack`` is the acknowledgement Celery hands the strategy (``message.ack_log_error`` by way
    of the consumer, which restores the prefetch count after a reconnection), called as a
    request calls it."""
    headers = message.headers if isinstance(message.headers, dict) else {}
    message_id = headers.get("id", body.get("id") if isinstance(body, dict) else None)
    ack(logger, connection_errors)  # a redelivery would be refused again
    log_drop(found, task=task, message_id=message_id, worker=worker)
    record_drop(found, message=message, body=body, worker=worker)


def log_drop(found: Refusal, *, task: Any, message_id: Any, worker: str) -> None:
    """The log line of a dropped message: ``message.dropped``, its task, id, kind and reason."""
    logger.error(
        "message.dropped task=%s id=%s kind=%s worker=%s reason=%s",
        text_of(task),
        text_of(message_id),
        found.kind,
        worker,
        found.reason,
    )


def record_drop(found: Refusal, *, message: Any, body: Any, worker: str) -> None:
    """Count a dropped message, and fail the execution it names (the ledger may be away)."""
    now = timezone.now()
    try:
        execution_id = named_execution(message, body)
        if execution_id is not None:
            runtime.on_live_connection(
                lambda: attempts.fail_attempt(
                    execution_id=execution_id,
                    error=f"message refused by the worker: {found.reason}",
                    outcome=AttemptOutcome.FAILED,
                    now=now,
                    permanent=True,
                    from_statuses=EXECUTION_STARTABLE,
                )
            )
        runtime.on_live_connection(
            lambda: drops.record_drop(worker=worker, kind=found.kind, reason=found.reason, now=now)
        )
    except Exception:
        # The ledger is away: the drop stays in the log; a named row stays queued, and the
        # republish rule finds it (and the claim's checks fail a row over the limits).
        logger.exception("message.drop_not_recorded kind=%s worker=%s", found.kind, worker)


#: What stands in for a header entry of a RabbitMQ message that the AMQP client could not
#: read (``guard_header_tables``): ``refusal`` refuses the message that holds it.
UNREADABLE_HEADER = "\x00unreadable: nested deeper than the AMQP client reads\x00"
