"""The Redis fast path: a batch of Celery task messages written in one pipeline.

This is the one module that knows kombu's Redis transport from the inside: it builds each
message shape with Celery's ``as_task_v2`` and the channel's own ``prepare_message``,
``_inplace_augment_message``, ``_q_for_pri`` and ``_get_message_priority`` (private methods of
``kombu.transport.redis.Channel``), then fills in what differs per message. A kombu upgrade
means reading this file, and ``tests/scheduling/test_publishing.py`` compares its messages with
``send_task``'s byte for byte, so a change in kombu fails a test instead of a worker.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

import celery
from celery.utils.nodenames import anon_nodename
from celery.utils.saferepr import saferepr
from kombu import serialization
from kombu.utils.json import dumps

from scheduling.ids import uuid4_text
from scheduling.messages.doorbell import Doorbell
from scheduling.rules.registry import EXECUTION_HEADER

LPUSH_CHUNK = 1000
#: What ``send_task`` writes in ``ignore_result`` when not asked: the task's own setting
#: (None) since Celery 5.7, False before it.
SEND_TASK_IGNORE_RESULT = None if tuple(celery.VERSION[:2]) >= (5, 7) else False


class RedisFastPath:
    """Batch publishing and server identity on a kombu Redis channel."""

    def __init__(self, app: Any, producer: Any) -> None:
        self.app = app
        self.producer = producer
        self._client: Any = None
        # One envelope per shape of message, kept for this channel's life: building one costs
        # more than a whole message, which matters where batches are small (one enqueue).
        self._templates: dict[tuple[str, str, int | None, int, int], _Template] = {}

    @staticmethod
    def supports(producer: Any) -> bool:
        """Whether ``producer`` publishes through kombu's Redis transport."""
        channel = producer.channel
        return hasattr(channel, "_q_for_pri") and hasattr(channel, "client")

    def client(self) -> Any:
        """One Redis client for this connection's identity checks and pipelines.

        kombu's channel builds a new client object (with its table of response callbacks) on
        every access; kept, it costs nothing per tick. It shares the channel's connection pool.
        """
        if self._client is None:
            with self.producer.channel.conn_or_acquire() as client:
                self._client = client
        return self._client

    def server_run_id(self) -> str | None:
        """The Redis server's ``run_id``: new at every server start."""
        return str(self.client().info("server").get("run_id") or "") or None

    def queue_depth(self, queue: str, priority: int | None) -> int:
        """Messages waiting in ``queue`` at ``priority`` (the Redis list kombu keeps for it)."""
        channel = self.producer.channel
        return int(self.client().llen(channel._q_for_pri(queue, priority or 0)))

    def write_batch(self, bells: Sequence[Doorbell], grace: int) -> None:
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
        templates = self._templates
        by_key: dict[str, list[str]] = {}
        for bell in bells:
            shape = (bell.task, bell.queue, bell.priority, bell.timeout)
            template = templates.get((*shape, grace))
            if template is None:
                template = _Template.build(self.app, self.producer, bell, grace)
                templates[(*shape, grace)] = template
            key, message = template.message(bell)
            by_key.setdefault(key, []).append(message)
        pipe = self.client().pipeline(transaction=False)
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
            ignore_result=SEND_TASK_IGNORE_RESULT,
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
