"""The scheduler loop: claim, publish, recover, reap; then say how long to sleep.

``Dispatcher.tick`` is the whole loop body. ``scheduling.beat.DatabaseScheduler`` runs it under
``celery beat`` and ``manage.py runscheduler`` runs it on its own; several may run at once on
PostgreSQL because every claim is a ``SELECT ... FOR UPDATE SKIP LOCKED`` that commits before
anything is published.
"""

from __future__ import annotations

import gc
import logging
import re
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from celery.utils.nodenames import anon_nodename
from celery.utils.saferepr import saferepr
from django.db import (
    DatabaseError,
    InterfaceError,
    close_old_connections,
    connection,
    connections,
)
from django.utils import timezone
from kombu import serialization
from kombu.utils.json import dumps

from scheduling import conf, selectors, services
from scheduling.ids import uuid4_text
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
            key, message = template.message(bell)
            by_key.setdefault(key, []).append(message)
        with channel.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            for key, messages in by_key.items():
                # One LPUSH per queue: the same order as one LPUSH per message.
                for start in range(0, len(messages), LPUSH_CHUNK):
                    pipe.lpush(key, *messages[start : start + LPUSH_CHUNK])
            pipe.execute()


_SLOTS = (
    "body",
    "id",
    "root_id",
    "argsrepr",
    "kwargsrepr",
    EXECUTION_HEADER,
    "correlation_id",
    "delivery_tag",
)


def _slot(name: str) -> str:
    return f"\x00duecourse-slot:{name}\x00"


class _Template:
    """One Celery message shape, built by Celery and kombu themselves, to fill per message.

    The envelope is serialized once, with a marker in each value that differs per message;
    each message is then the fixed text between the markers joined with its own values, each
    encoded as the JSON encoder would have encoded it there. Message bodies without arguments
    are identical for a shape, so they are encoded once too.
    """

    def __init__(
        self,
        *,
        parts: list[str],
        order: list[str],
        key: str,
        embed: dict[str, Any],
        serializer: str,
        body_encoding: str | None,
        channel: Any,
        argsrepr_maxsize: int,
        kwargsrepr_maxsize: int,
    ) -> None:
        self.parts = parts
        self.order = order
        self.key = key
        self.embed = embed
        self.serializer = serializer
        self.body_encoding = body_encoding
        self.channel = channel
        self.argsrepr_maxsize = argsrepr_maxsize
        self.kwargsrepr_maxsize = kwargsrepr_maxsize
        self.empty_body = self._body((), {})

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
        for name in ("id", "root_id", "argsrepr", "kwargsrepr", EXECUTION_HEADER):
            headers[name] = _slot(name)
        properties["correlation_id"] = _slot("correlation_id")
        content_type, content_encoding, _ = serialization.dumps(
            ((), {}, body[2]), serializer=app.conf.task_serializer
        )
        channel = producer.channel
        message = channel.prepare_message(
            "", bell.priority, content_type, content_encoding, headers, properties
        )
        channel._inplace_augment_message(message, "", queue.name)
        message["body"] = _slot("body")
        message["properties"]["delivery_tag"] = _slot("delivery_tag")
        key = channel._q_for_pri(queue.name, channel._get_message_priority(message, reverse=False))
        text = dumps(message)
        markers = {encode_basestring_ascii(_slot(name)): name for name in _SLOTS}
        pieces = re.split("(" + "|".join(re.escape(marker) for marker in markers) + ")", text)
        return cls(
            parts=pieces[0::2],
            order=[markers[marker] for marker in pieces[1::2]],
            key=key,
            embed=body[2],
            serializer=app.conf.task_serializer,
            body_encoding=message["properties"]["body_encoding"],
            channel=channel,
            argsrepr_maxsize=amqp.argsrepr_maxsize,
            kwargsrepr_maxsize=amqp.kwargsrepr_maxsize,
        )

    def _body(self, args: Any, kwargs: Any) -> str:
        """The message body as kombu would put it on the wire (serialized, then encoded)."""
        _, _, payload = serialization.dumps((args, kwargs, self.embed), serializer=self.serializer)
        return encode_basestring_ascii(self.channel.encode_body(payload, self.body_encoding)[0])

    def message(self, bell: Doorbell) -> tuple[str, str]:
        """The Redis list key and the serialized envelope for one execution."""
        args = bell.args or ()
        kwargs = bell.kwargs or {}
        task_id = encode_basestring_ascii(bell.task_id)
        values = {
            "body": self._body(args, kwargs) if args or kwargs else self.empty_body,
            "id": task_id,
            "root_id": task_id,
            "correlation_id": task_id,
            "argsrepr": encode_basestring_ascii(
                saferepr(args, self.argsrepr_maxsize) if args else "()"
            ),
            "kwargsrepr": encode_basestring_ascii(
                saferepr(kwargs, self.kwargsrepr_maxsize) if kwargs else "{}"
            ),
            EXECUTION_HEADER: str(int(bell.execution_id)),
            "delivery_tag": encode_basestring_ascii(uuid4_text()),
        }
        out = [self.parts[0]]
        for name, part in zip(self.order, self.parts[1:], strict=True):
            out.append(values[name])
            out.append(part)
        return self.key, "".join(out)


class Dispatcher:
    """One scheduler's loop state: its publisher, its back-off, and when it last reaped."""

    def __init__(
        self, app: Any, *, batch_size: int | None = None, max_sleep: float | None = None
    ) -> None:
        self.app = app
        # A scheduler lives long and everything it imported at startup lives as long; frozen,
        # those objects stay out of the cyclic collector's full passes during floods.
        gc.freeze()
        self.batch_size = batch_size or conf.get("BATCH_SIZE")
        self.max_sleep = conf.get("MAX_SLEEP") if max_sleep is None else max_sleep
        self.publisher = Publisher(app)
        self._side: ThreadPoolExecutor | None = None
        self._failures = 0
        self._broker_identity: str | None = None
        self.stats = {"claimed": 0, "published": 0, "republished": 0, "reaped": 0}

    def close(self) -> None:
        if self._side is not None:
            self._side.submit(connections.close_all).result()  # its own connection
            self._side.shutdown()
            self._side = None
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
        if probe.due and not self._claim_and_publish(now):
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

    def _claim_and_publish(self, now: datetime) -> bool:
        """Claim due jobs batch after batch, each published while the next is being claimed.

        A claim waits mostly on the database and a publish mostly on building messages and on
        the broker, so the two overlap on a second thread with its own database connection.
        Every batch is committed before its messages exist, as in a plain tick, and the tick
        returns only when every batch it claimed has been published and marked. Claiming goes
        on while full batches come back, for at most MAX_SLEEP, so recovery still runs between
        rounds. Inside a caller's transaction a second connection could not see the new rows,
        so there (and on SQLite, which has one writer) batches are published in line.
        """
        side = self._side_thread()
        deadline = time.monotonic() + max(self.max_sleep, 0.1)
        previous: Future[bool] | None = None
        ok = True
        while True:
            bells = services.claim_due_jobs(now=now, limit=self.batch_size)
            self.stats["claimed"] += len(bells)
            if previous is not None:
                ok = previous.result() and ok
                previous = None
            if side is None:
                ok = self._publish(bells) and ok
            elif bells:
                previous = side.submit(self._publish_on_side, bells)
            if not ok or len(bells) < self.batch_size or time.monotonic() > deadline:
                break
        if previous is not None:
            ok = previous.result() and ok
        return ok

    def _side_thread(self) -> ThreadPoolExecutor | None:
        if connection.vendor != "postgresql" or connection.in_atomic_block:
            return None
        if self._side is None:
            self._side = ThreadPoolExecutor(max_workers=1, thread_name_prefix="duecourse-publish")
        return self._side

    def _publish_on_side(self, bells: Sequence[Doorbell]) -> bool:
        """``_publish`` on the side thread, which looks after its own database connection."""
        close_old_connections()
        try:
            return self._publish(bells)
        except (DatabaseError, InterfaceError):
            connection.close()
            raise

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
