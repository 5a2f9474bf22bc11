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
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import datetime, timedelta
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any, TypeVar

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

from scheduling import conf, liveness, selectors, services
from scheduling.ids import uuid4_text
from scheduling.registry import EXECUTION_HEADER
from scheduling.services import Doorbell

logger = logging.getLogger("scheduling")
T = TypeVar("T")

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
        self._client: Any = None

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
        self._client = None

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
            client = self._redis_client(producer)
            if client is None:
                return None
            return str(client.info("server").get("run_id") or "") or None
        except Exception as exc:
            logger.debug("publisher.identity_failed error=%r", exc)
            self.close()
            return None

    def _redis_client(self, producer: Any) -> Any:
        """One Redis client for this connection's identity checks and pipelines.

        kombu's channel builds a new client object (with its table of response callbacks) on
        every access; kept, it costs nothing per tick. It shares the channel's connection pool.
        """
        if self._client is None:
            channel = self._redis_channel(producer)
            if channel is None:
                return None
            with channel.conn_or_acquire() as client:
                self._client = client
        return self._client

    @staticmethod
    def _redis_channel(producer: Any) -> Any:
        channel = producer.channel
        return channel if hasattr(channel, "_q_for_pri") and hasattr(channel, "client") else None

    def _write_redis_batch(self, producer: Any, bells: Sequence[Doorbell], grace: int) -> None:
        """The fast path: the same messages ``send_task`` builds, written in one pipeline.

        For each shape of message (task, queue, priority, time limits) Celery's ``as_task_v2``
        and kombu's channel build one envelope, as ``Producer.publish`` does for a direct queue
        (Celery sends those to the anonymous exchange, straight onto the queue's list); each
        message fills in what differs (``_Template``). A worker cannot tell these messages from
        ``send_task``'s (``tests/scheduling/test_publishing.py`` compares them); only the Python
        overhead per message and the round trip per message are gone. The pipeline is not
        transactional and not retried: on an error the whole batch counts as unpublished and
        its rows are published again later.
        """
        templates: dict[tuple[str, str, int | None, int], _Template] = {}
        by_key: dict[str, list[str]] = {}
        for bell in bells:
            shape = (bell.task, bell.queue, bell.priority, bell.timeout)
            template = templates.get(shape)
            if template is None:
                template = templates[shape] = _Template.build(self.app, producer, bell, grace)
            key, message = template.message(bell)
            by_key.setdefault(key, []).append(message)
        pipe = self._redis_client(producer).pipeline(transaction=False)
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


_heap_frozen = False


def _freeze_startup_heap() -> None:
    """Move what the process holds at its first dispatcher out of the collector's sight.

    A scheduler lives long and everything it imported at startup (Django, Celery, kombu)
    lives as long; frozen once, those objects stay out of the cyclic collector's full passes,
    which floods of short-lived rows trigger.
    """
    global _heap_frozen
    if not _heap_frozen:
        gc.freeze()
        _heap_frozen = True


class Dispatcher:
    """One scheduler's loop state: its publisher, its back-off, and when it last reaped."""

    def __init__(
        self, app: Any, *, batch_size: int | None = None, max_sleep: float | None = None
    ) -> None:
        self.app = app
        _freeze_startup_heap()
        self.batch_size = batch_size or conf.get("BATCH_SIZE")
        self.max_sleep = conf.get("MAX_SLEEP") if max_sleep is None else max_sleep
        self.publisher = Publisher(app)
        self._lanes: _Lanes | None = None
        self._stats_lock = threading.Lock()
        self._failures = 0
        self._broker_identity: str | None = None
        self.stats = {"claimed": 0, "published": 0, "republished": 0, "reaped": 0}

    def close(self) -> None:
        if self._lanes is not None:
            self._lanes.close()
            self._lanes = None
        self.publisher.close()

    def tick(self, now: datetime | None = None) -> float:
        """Do one round of work; return how long to sleep before the next."""
        started = time.monotonic()
        try:
            close_old_connections()
            sleep = self._tick(now or timezone.now())
            liveness.record_tick(stats=self.stats, seconds=time.monotonic() - started)
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
            published = self._publish(again, self.publisher)
            self.stats["published"] += published
            if published < len(again):
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
        """Claim and publish due jobs, batch after batch while full batches come back.

        The first batch is claimed and published here. If it was full, a flood is due: the
        rest is claimed by the lanes (``_Lanes``) side by side, or in line where lanes cannot
        work: inside a caller's transaction a second connection could not see the new rows,
        and SQLite has a single writer. Claiming stops after MAX_SLEEP so recovery still runs
        between rounds; the tick returns only when every batch it claimed has been published
        and marked.
        """
        deadline = time.monotonic() + max(self.max_sleep, 0.1)
        ok, full = self._claim_round(now, self.publisher, deadline, once=True)
        if ok and full:
            lanes = self._flood_lanes()
            if lanes is None:
                ok, _ = self._claim_round(now, self.publisher, deadline)
            else:
                ok = all(lanes.run(lambda: self._lane_round(now, lanes, deadline)))
        return ok

    def _claim_round(
        self, now: datetime, publisher: Publisher, deadline: float, *, once: bool = False
    ) -> tuple[bool, bool]:
        """Claim a batch, publish it, mark it; again until a short batch, a failure or the
        deadline. Returns whether everything went out, and whether the last batch was full."""
        while True:
            claim = services.claim_batch(now=now, limit=self.batch_size)
            done = self._publish(claim.bells, publisher)
            with self._stats_lock:
                self.stats["claimed"] += len(claim.bells)
                self.stats["published"] += done
            full = claim.jobs >= self.batch_size
            if done < len(claim.bells):
                return False, full
            if once or not full or time.monotonic() > deadline:
                return True, full

    def _lane_round(self, now: datetime, lanes: _Lanes, deadline: float) -> bool:
        """``_claim_round`` on a lane, which looks after its own database connection."""
        close_old_connections()
        try:
            return self._claim_round(now, lanes.publisher(), deadline)[0]
        except (DatabaseError, InterfaceError):
            connection.close()
            raise

    def _flood_lanes(self) -> _Lanes | None:
        count = conf.get("FLOOD_LANES")
        if count < 2 or connection.vendor != "postgresql" or connection.in_atomic_block:
            return None
        if self._lanes is None or self._lanes.count != count:
            if self._lanes is not None:
                self._lanes.close()
            self._lanes = _Lanes(self.app, count)
        return self._lanes

    def _publish(self, bells: Sequence[Doorbell], publisher: Publisher) -> int:
        """Publish ``bells`` and mark the ones that reached the broker QUEUED; return those."""
        if not bells:
            return 0
        started = time.monotonic()
        done = publisher.publish(bells)
        services.mark_queued(execution_ids=done, now=timezone.now())
        logger.debug(
            "dispatch.published count=%s seconds=%.4f", len(done), time.monotonic() - started
        )
        return len(done)


class _Lanes:
    """Threads that claim and publish a flood side by side, each on connections of its own.

    A claim spends most of its time waiting for the database, a publish building messages and
    waiting for the broker. Lanes that each claim, publish and mark their own batches keep the
    database, the broker and the interpreter busy at once; ``SKIP LOCKED`` keeps their batches
    apart exactly as it keeps scheduler processes apart, and each batch is committed before its
    messages exist, so a scheduler killed mid-flood leaves only due jobs and PENDING rows.
    """

    def __init__(self, app: Any, count: int) -> None:
        self.app = app
        self.count = count
        self._pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix="duecourse-lane")
        self._local = threading.local()

    def publisher(self) -> Publisher:
        """This lane's own broker connection (kombu connections are not shared by threads)."""
        publisher: Publisher | None = getattr(self._local, "publisher", None)
        if publisher is None:
            publisher = self._local.publisher = Publisher(self.app)
        return publisher

    def run(self, work: Callable[[], T]) -> list[T]:
        """Run ``work`` once per lane, all at once; wait for every one, then re-raise the first
        error, so no lane is still working when the tick moves on."""
        futures = [self._pool.submit(work) for _ in range(self.count)]
        wait(futures)
        return [future.result() for future in futures]

    def close(self) -> None:
        """Close every lane's broker and database connections, then stop the threads."""
        barrier = threading.Barrier(self.count)

        def release() -> None:
            try:
                barrier.wait(timeout=10)  # holds each lane until every lane has one release
            except threading.BrokenBarrierError:
                logger.debug("dispatch.lanes_release_unsynchronised")
            publisher: Publisher | None = getattr(self._local, "publisher", None)
            if publisher is not None:
                publisher.close()
            connections.close_all()

        wait([self._pool.submit(release) for _ in range(self.count)])
        self._pool.shutdown()
