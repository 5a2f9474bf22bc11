"""The publisher: doorbells out as ordinary Celery task messages."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.utils import timezone

from scheduling import conf
from scheduling.messages.doorbell import Doorbell
from scheduling.rules.registry import EXECUTION_HEADER
from scheduling.scheduler.redis_fast import RedisFastPath
from scheduling.stages import publishing

logger = logging.getLogger("scheduling")


class Publisher:
    """Publishes doorbells as ordinary Celery task messages, in batches where the broker can.

    On Redis a whole batch goes through one pipeline (``redis_fast.RedisFastPath``); other brokers
    (RabbitMQ) take Celery's ``send_task``, one message at a time. A failed publish is
    reported as unpublished: its rows stay PENDING and are published again after the grace
    period, and a message that did arrive twice is absorbed by the worker-side claim.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._connection: Any = None
        self._producer: Any = None
        self._fast: RedisFastPath | None = None

    def _ensure(self) -> Any:
        if self._producer is None:
            self._connection = self.app.connection_for_write()
            self._connection.ensure_connection(max_retries=1)
            self._producer = self.app.amqp.Producer(self._connection)
        return self._producer

    def close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.release()
            except Exception:  # already broken; nothing left to release
                logger.debug("publisher.close_failed", exc_info=True)
        self._connection = None
        self._producer = None
        self._fast = None

    def publish(self, bells: Sequence[Doorbell]) -> list[int]:
        """Publish ``bells``; return the execution ids known to have reached the broker."""
        if not bells:
            return []
        grace = conf.get("HARD_TIMEOUT_GRACE")
        done: list[int] = []
        try:
            producer = self._ensure()
            fast = self._fast_path(producer)
            if fast is not None:
                fast.write_batch(bells, grace)
                done = [bell.execution_id for bell in bells]
            else:
                for bell in bells:
                    self._send(producer, bell, grace)
                    done.append(bell.execution_id)
        except Exception as exc:
            logger.error(
                "dispatch.publish_failed published=%s unpublished=%s error=%r",
                len(done),
                len(bells) - len(done),
                exc,
            )
            self.close()
        return done

    def _send(self, producer: Any, bell: Doorbell, grace: int) -> None:
        """The portable path: Celery's own ``send_task``, one message at a time."""
        options: dict[str, Any] = {}
        if bell.priority is not None:
            options["priority"] = bell.priority
        self.app.send_task(
            bell.task,
            args=bell.args,
            kwargs=bell.kwargs,
            task_id=bell.task_id,
            queue=bell.queue,
            headers={EXECUTION_HEADER: bell.execution_id},
            soft_time_limit=bell.timeout,
            time_limit=bell.timeout + grace,
            producer=producer,
            retry=False,
            **options,
        )

    def _fast_path(self, producer: Any) -> RedisFastPath | None:
        """The Redis pipeline path, when the broker is Redis and ``FAST_PUBLISH`` is on."""
        if not conf.get("FAST_PUBLISH") or not RedisFastPath.supports(producer):
            return None
        if self._fast is None:
            self._fast = RedisFastPath(self.app, producer)
        return self._fast

    def queue_depth(self, queue: str, priority: int | None) -> int | None:
        """How many messages wait in ``queue`` at ``priority``, where the broker tells (Redis).

        Evidence for the republish rule, never the only one: other producers may share a
        queue, and other brokers do not answer here (None).
        """
        try:
            producer = self._ensure()
            if not RedisFastPath.supports(producer):
                return None
            if self._fast is None:
                self._fast = RedisFastPath(self.app, producer)
            return self._fast.queue_depth(queue, priority)
        except Exception as exc:
            logger.debug("publisher.depth_failed error=%r", exc)
            self.close()
            return None

    def broker_identity(self) -> str | None:
        """The Redis server's ``run_id`` (new at every server start), or None elsewhere."""
        try:
            producer = self._ensure()
            if not RedisFastPath.supports(producer):
                return None
            if self._fast is None:
                self._fast = RedisFastPath(self.app, producer)
            return self._fast.server_run_id()
        except Exception as exc:
            logger.debug("publisher.identity_failed error=%r", exc)
            self.close()
            return None


def publish_now(app: Any, *, execution_ids: Sequence[int]) -> int:
    """Publish these PENDING executions at once, as a claim does; returns how many went out.

    For a run-now from the command line, the admin or code: the execution row was committed
    first, so a publish that fails here only leaves it PENDING, and the scheduler publishes it
    after the pending grace, exactly as after a scheduler that died between claim and publish.
    """
    bells = publishing.doorbells_for(execution_ids=execution_ids)
    if not bells:
        return 0
    publisher = Publisher(app)
    try:
        done = publisher.publish(bells)
    finally:
        publisher.close()
    publishing.mark_queued(execution_ids=done, now=timezone.now())
    return len(done)
