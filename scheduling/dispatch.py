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

from celery.utils.nodenames import anon_nodename
from celery.utils.saferepr import saferepr
from django.db import DatabaseError, InterfaceError, close_old_connections, connection
from django.utils import timezone
from kombu import serialization
from kombu.utils.json import dumps

from scheduling import conf, selectors, services
from scheduling.registry import EXECUTION_HEADER
from scheduling.services import Doorbell

logger = logging.getLogger("scheduling")

BACKOFF_MAX = 5.0
LPUSH_CHUNK = 1000


class Publisher:
    """Publishes doorbells as ordinary Celery task messages, in batches where the broker can.

    On Redis a whole batch goes through one pipeline (``_write_redis_batch``); other brokers
    (RabbitMQ) take Celery's ``send_task``, one message at a time. A failed publish is
    reported as unpublished: its rows stay PENDING and are published again after the grace
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
            if conf.get("FAST_PUBLISH") and self._redis_channel(producer) is not None:
                self._write_redis_batch(producer, bells, grace)
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

    def broker_identity(self) -> str | None:
        """The Redis server's ``run_id`` (new at every server start), or None elsewhere."""
        try:
            producer = self._ensure()
            channel = self._redis_channel(producer)
            if channel is None:
                return None
            with channel.conn_or_acquire() as client:
                return str(client.info("server").get("run_id") or "") or None
        except Exception as exc:
            logger.debug("publisher.identity_failed error=%r", exc)
            self.close()
            return None

    @staticmethod
    def _redis_channel(producer: Any) -> Any:
        channel = producer.channel
        return channel if hasattr(channel, "_q_for_pri") and hasattr(channel, "client") else None

    def _write_redis_batch(self, producer: Any, bells: Sequence[Doorbell], grace: int) -> None:
        """The fast path: the same messages ``send_task`` builds, written in one pipeline.

        For each shape of message (task, queue, priority, time limits) Celery's ``as_task_v2``
        builds one template; each message copies it and fills in what differs per message (ids,
        arguments and their reprs, the execution header, the delivery tag), then kombu's own
        channel methods wrap it as ``Producer.publish`` does for a direct queue, which Celery
        sends to the anonymous exchange, straight onto the queue's list. A worker cannot tell
        these messages from ``send_task``'s (``tests/scheduling/test_publishing.py`` compares
        them); only the Python overhead per message and the round trip per message are gone.
        The pipeline is not transactional and not retried: on an error the whole batch counts
        as unpublished and its rows are published again later.
        """
        channel = producer.channel
        templates: dict[tuple[str, str, int | None, int], _Template] = {}
        by_key: dict[str, list[str]] = {}
        for bell in bells:
            shape = (bell.task, bell.queue, bell.priority, bell.timeout)
            template = templates.get(shape)
            if template is None:
                template = templates[shape] = _Template.build(self.app, producer, bell, grace)
            key, message = template.message(bell, channel)
            by_key.setdefault(key, []).append(message)
        with channel.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            for key, messages in by_key.items():
                # One LPUSH per queue: the same order as one LPUSH per message.
                for start in range(0, len(messages), LPUSH_CHUNK):
                    pipe.lpush(key, *messages[start : start + LPUSH_CHUNK])
            pipe.execute()


class _Template:
    """One Celery message shape, built by Celery itself, to copy per message."""

    def __init__(
        self,
        headers: dict[str, Any],
        properties: dict[str, Any],
        embed: dict[str, Any],
        key: str,
        queue: str,
        serializer: str,
        argsrepr_maxsize: int,
        kwargsrepr_maxsize: int,
    ) -> None:
        self.headers = headers
        self.properties = properties
        self.embed = embed
        self.key = key
        self.queue = queue
        self.serializer = serializer
        self.argsrepr_maxsize = argsrepr_maxsize
        self.kwargsrepr_maxsize = kwargsrepr_maxsize

    @classmethod
    def build(cls, app: Any, producer: Any, bell: Doorbell, grace: int) -> _Template:
        amqp = app.amqp
        queue = amqp.queues[bell.queue]
        producer.maybe_declare(queue)
        headers, properties, body, _ = amqp.as_task_v2(
            "0",
            bell.task,
            None,
            None,
            time_limit=bell.timeout + grace,
            soft_time_limit=bell.timeout,
            origin=anon_nodename(),
            reply_to=app.thread_oid,
            ignore_result=None,
        )
        if bell.priority is not None:
            properties["priority"] = bell.priority
        properties["delivery_mode"] = producer.exchange.delivery_mode or 2
        channel = producer.channel
        probe = channel.prepare_message("", bell.priority, None, None, {}, dict(properties))
        channel._inplace_augment_message(probe, "", queue.name)
        key = channel._q_for_pri(queue.name, channel._get_message_priority(probe, reverse=False))
        return cls(
            headers=headers,
            properties=properties,
            embed=body[2],
            key=key,
            queue=queue.name,
            serializer=app.conf.task_serializer,
            argsrepr_maxsize=amqp.argsrepr_maxsize,
            kwargsrepr_maxsize=amqp.kwargsrepr_maxsize,
        )

    def message(self, bell: Doorbell, channel: Any) -> tuple[str, str]:
        """The Redis list key and the serialized envelope for one execution."""
        args = bell.args or ()
        kwargs = bell.kwargs or {}
        headers = dict(self.headers)
        headers["id"] = headers["root_id"] = bell.task_id
        headers["argsrepr"] = saferepr(args, self.argsrepr_maxsize) if args else "()"
        headers["kwargsrepr"] = saferepr(kwargs, self.kwargsrepr_maxsize) if kwargs else "{}"
        headers[EXECUTION_HEADER] = bell.execution_id
        properties = dict(self.properties)
        properties["correlation_id"] = bell.task_id
        content_type, content_encoding, payload = serialization.dumps(
            (args, kwargs, self.embed), serializer=self.serializer
        )
        message = channel.prepare_message(
            payload, bell.priority, content_type, content_encoding, headers, properties
        )
        channel._inplace_augment_message(message, "", self.queue)
        return self.key, dumps(message)


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
        self._broker_identity: str | None = None
        self.stats = {"claimed": 0, "published": 0, "republished": 0, "reaped": 0}

    def close(self) -> None:
        self.publisher.close()

    def tick(self, now: datetime | None = None) -> float:
        """Do one round of work; return how long to sleep before the next."""
        try:
            close_old_connections()
            sleep = self._tick(now or timezone.now())
        except (DatabaseError, InterfaceError) as exc:
            self._failures += 1
            delay = self._backoff()
            logger.error("dispatch.database_error error=%r retry_in=%.1fs", exc, delay)
            connection.close()
            return delay
        if sleep is None:
            self._failures += 1
            return self._backoff()
        self._failures = 0
        return sleep

    def _backoff(self) -> float:
        """Sleep after a failed tick: doubling from MAX_SLEEP, at most BACKOFF_MAX seconds.

        Short enough that work due during a broker or database outage goes out soon after it
        ends, long enough that a scheduler facing a dead server does not spin.
        """
        return min(self.max_sleep * 2 ** min(self._failures, 10), BACKOFF_MAX)

    def _tick(self, now: datetime) -> float | None:
        """One round; returns the sleep it asks for, or None when the broker failed.

        One probe statement says which of claim, republish and reap have work, so an idle
        tick costs a single indexed query however many jobs exist.
        """
        self._notice_broker_restart(now)
        probe = selectors.scheduler_probe(
            now=now,
            pending_before=now - timedelta(seconds=conf.get("PENDING_GRACE")),
            queued_before=now - timedelta(seconds=conf.get("REQUEUE_AFTER")),
            stale_before=now - timedelta(seconds=conf.get("STALE_AFTER")),
        )
        if probe.due:
            bells = services.claim_due_jobs(now=now, limit=self.batch_size)
            self.stats["claimed"] += len(bells)
            if not self._publish(bells):
                return None
        if probe.republish:
            again = services.reclaim_for_publish(now=now, limit=self.batch_size)
            self.stats["republished"] += len(again)
            if not self._publish(again):
                return None
        if probe.stale:
            reaped = services.reap_stale_executions(now=now, stale_after=conf.get("STALE_AFTER"))
            self.stats["reaped"] += len(reaped)
        if probe.due or probe.republish or probe.stale:
            return 0.0
        if probe.next_due_at is None:
            return self.max_sleep
        wait = (probe.next_due_at - timezone.now()) / timedelta(seconds=1)
        return max(0.0, min(self.max_sleep, wait))

    def _notice_broker_restart(self, now: datetime) -> None:
        """Re-publish every queued execution at once when the Redis server was restarted.

        A Redis without persistence comes back empty; without this its lost messages would
        wait for REQUEUE_AFTER. Redis names each server start with a new ``run_id``; a changed
        one means its queues may have been emptied. Re-publishing all queued rows is harmless
        when they were not (workers acknowledge duplicates and do nothing).
        """
        identity = self.publisher.broker_identity()
        if identity is None:
            return
        if self._broker_identity is not None and identity != self._broker_identity:
            count = services.requeue_queued(now=now)
            logger.warning("dispatch.broker_restarted requeued=%s", count)
        self._broker_identity = identity

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
