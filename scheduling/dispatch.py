"""The scheduler loop: claim, publish, recover, reap; then say how long to sleep.

``Dispatcher.tick`` is the whole loop body. ``scheduling.beat.DatabaseScheduler`` runs it under
``celery beat`` and ``manage.py runscheduler`` runs it on its own; several may run at once on
PostgreSQL because every claim is a ``SELECT ... FOR UPDATE SKIP LOCKED`` that commits before
anything is published.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, InterfaceError, close_old_connections, connection
from django.db.models import Min
from django.utils import timezone

from scheduling import conf, services
from scheduling.models import Job, JobStatus
from scheduling.registry import EXECUTION_HEADER
from scheduling.services import Doorbell

logger = logging.getLogger("scheduling")


class Publisher:
    """Publishes doorbells as ordinary Celery task messages, in batches where the broker can.

    On Redis, kombu 5.7's ``Producer.batch`` writes a whole batch through one pipeline; other
    brokers (RabbitMQ) publish one message at a time through the same code. A failed batch
    is reported as unpublished: its rows stay PENDING and are published again after the grace
    period, and a message that did arrive twice is absorbed by the worker-side claim.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._connection: Any = None
        self._producer: Any = None

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

    def publish(self, bells: Sequence[Doorbell]) -> list[int]:
        """Publish ``bells``; return the execution ids known to have reached the broker."""
        if not bells:
            return []
        grace = conf.get("HARD_TIMEOUT_GRACE")
        done: list[int] = []
        try:
            producer = self._ensure()
            batch = producer.batch(max_size=len(bells)) if conf.get("FAST_PUBLISH") else None
            if batch is not None:
                with batch:
                    for bell in bells:
                        self._send(producer, bell, grace)
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
            return [] if conf.get("FAST_PUBLISH") else done
        return done

    def _send(self, producer: Any, bell: Doorbell, grace: int) -> None:
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


class Dispatcher:
    """One scheduler's loop state: its publisher, its back-off, and when it last reaped."""

    def __init__(
        self, app: Any, *, batch_size: int | None = None, max_sleep: float | None = None
    ) -> None:
        self.app = app
        self.batch_size = batch_size or conf.get("BATCH_SIZE")
        self.max_sleep = conf.get("MAX_SLEEP") if max_sleep is None else max_sleep
        self.publisher = Publisher(app)
        self._failures = 0
        self.stats = {"claimed": 0, "published": 0, "republished": 0, "reaped": 0}

    def close(self) -> None:
        self.publisher.close()

    def tick(self, now: datetime | None = None) -> float:
        """Do one round of work; return how long to sleep before the next."""
        try:
            close_old_connections()
            busy = self._tick(now or timezone.now())
        except (DatabaseError, InterfaceError) as exc:
            self._failures += 1
            delay = min(self.max_sleep * 2**self._failures, 30.0)
            logger.error("dispatch.database_error error=%r retry_in=%.1fs", exc, delay)
            connection.close()
            return delay
        if busy is None:
            self._failures += 1
            return min(self.max_sleep * 2 ** min(self._failures, 5), 30.0)
        self._failures = 0
        return 0.0 if busy else self._sleep_until_next(timezone.now())

    def _tick(self, now: datetime) -> bool | None:
        """Returns True when more work is waiting, False when idle, None when the broker failed."""
        bells = services.claim_due_jobs(now=now, limit=self.batch_size)
        self.stats["claimed"] += len(bells)
        if not self._publish(bells):
            return None
        more = len(bells) >= self.batch_size
        again = services.reclaim_for_publish(now=now, limit=self.batch_size)
        self.stats["republished"] += len(again)
        if not self._publish(again):
            return None
        more = more or len(again) >= self.batch_size
        reaped = services.reap_stale_executions(now=now, stale_after=conf.get("STALE_AFTER"))
        self.stats["reaped"] += len(reaped)
        return more or bool(reaped)

    def _publish(self, bells: Sequence[Doorbell]) -> bool:
        if not bells:
            return True
        started = time.monotonic()
        done = self.publisher.publish(bells)
        services.mark_queued(execution_ids=done, now=timezone.now())
        self.stats["published"] += len(done)
        logger.debug(
            "dispatch.published count=%s seconds=%.4f", len(done), time.monotonic() - started
        )
        return len(done) == len(bells)

    def _sleep_until_next(self, now: datetime) -> float:
        nxt = Job.objects.filter(status=JobStatus.ACTIVE, current_execution__isnull=True).aggregate(
            at=Min("next_due_at")
        )["at"]
        if nxt is None:
            return self.max_sleep
        return max(0.0, min(self.max_sleep, (nxt - now) / timedelta(seconds=1)))
