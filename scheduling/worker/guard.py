"""The worker's guard: a message whose arguments break the limits is refused alone.

A worker's main process decodes each message and pickles its arguments to hand them to a
pool process. Arguments nested a few hundred levels deep decode fine but make that pickling
raise ``RecursionError`` in the main process itself: it dies, Redis restores the message, and
the next worker to take it dies too, so one message stops every worker. (Text nested past
what Python's JSON reader follows already fails to decode, which Celery drops as
undecodable.) The engine never publishes such a message (``scheduling.rules.arguments``' limits are
checked at every door and at the claim), but a message can come from anywhere that reaches
the broker.

So every ledger task (``ScheduledTask`` and the Django tasks' runners) takes its messages
through this strategy, Celery's own with a check in front: a message whose ``args`` or
``kwargs`` break the limits is acknowledged, logged, and its execution (if it names one) is
failed with the reason; the next message is served as usual. Usage, on a task class::

    Strategy = "scheduling.worker.guard:guarded_strategy"
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery.worker.strategy import default as default_strategy
from django.utils import timezone
from kombu.exceptions import DecodeError

from scheduling.models import EXECUTION_STARTABLE, AttemptOutcome
from scheduling.rules import arguments
from scheduling.rules.registry import EXECUTION_HEADER
from scheduling.stages import attempts

logger = logging.getLogger("scheduling")


def refusal(message: Any) -> str | None:
    """Why the message's arguments may not go to a pool process, or None.

    A body within the size limit cannot hold arguments over it, so only the depth is measured
    then (without recursion); a larger body is measured in full.
    """
    try:
        args, kwargs, _ = message.payload
    except (DecodeError, TypeError, ValueError):
        return None  # Celery's own handling of an undecodable or malformed body applies
    max_depth, max_bytes = arguments.limits()
    small = len(message.body or b"") <= max_bytes
    for name, value in (("args", args), ("kwargs", kwargs)):
        if small:
            depth = arguments.nesting_depth(value)
            if depth > max_depth:
                return f"{name}: {arguments.problem(value)}"
        else:
            too_much = arguments.problem(value)
            if too_much is not None:
                return f"{name}: {too_much}"
    return None


def refuse(message: Any, reason: str) -> None:
    """Drop the message for good and fail the execution it names, if any."""
    headers = message.headers or {}
    logger.error(
        "message.refused task=%s id=%s reason=%s", headers.get("task"), headers.get("id"), reason
    )
    message.ack()  # a redelivery would be refused again
    try:
        execution_id = int(headers[EXECUTION_HEADER])
    except (KeyError, TypeError, ValueError):
        return
    try:
        attempts.fail_attempt(
            execution_id=execution_id,
            error=f"message refused by the worker: {reason}",
            outcome=AttemptOutcome.FAILED,
            now=timezone.now(),
            permanent=True,
            from_statuses=EXECUTION_STARTABLE,
        )
    except Exception:
        # The ledger is away: the row stays queued, and the republish rule finds it (and the
        # claim's checks fail a row that is itself over the limits).
        logger.exception("message.refusal_not_recorded execution=%s", execution_id)


def guarded_strategy(task: Any, app: Any, consumer: Any, **options: Any) -> Callable[..., Any]:
    """Celery's default strategy for ``task``, with ``refusal`` checked before each message."""
    handle = default_strategy(task, app, consumer, **options)

    def task_message_handler(
        message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **kwargs: Any
    ) -> Any:
        reason = refusal(message) if body is None else None
        if reason is not None:
            refuse(message, reason)
            return None
        return handle(message, body, ack, reject, callbacks, **kwargs)

    return task_message_handler
