"""Guards below the message, where the broker's client reads it before Celery or ``guard``
does: on Redis an envelope kombu cannot decode (``guard_envelopes``), on RabbitMQ a header
table nested past what py-amqp reads (``guard_header_tables``). Either would raise out of
the worker's event loop and stop the worker; here the message is dropped or refused and
counted, and the next one is served (``scheduling.worker.refusals``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from struct import error as StructError
from struct import pack, unpack_from
from typing import Any

from django.utils import timezone

from scheduling.stages import drops
from scheduling.worker import runtime
from scheduling.worker.guard import measure, structure_limit
from scheduling.worker.refusals import UNREADABLE_HEADER, log_drop, unreadable

logger = logging.getLogger("scheduling")


#: The AMQP content header frame, and the flag of its basic properties' header table.
CONTENT_HEADER_FRAME = 2
HEADERS_FLAG = 0x2000


def guard_header_tables(connection: Any, *, worker: str) -> bool:
    """On RabbitMQ, refuse a message whose header table nests past the client, where the
    table's reading would stop the worker.

    py-amqp reads a message's header table itself, recursively, in the worker's main process,
    as the content header frame arrives (``Connection.on_inbound_frame``, down to
    ``amqp.serialization._read_item``), before Celery or ``guard`` sees a message: a table
    nested more levels than Python's recursion limit (about 1,000), which RabbitMQ accepts and
    delivers, raised ``RecursionError`` out of the event loop; the worker died with the message
    unacknowledged, and RabbitMQ handed it to the next worker. Where that happens, the frame is
    read again with each entry of the table that is too deep (or deeper than
    ``structure_limit()``) replaced by ``UNREADABLE_HEADER``, its bytes skipped by their length;
    the message is then delivered as usual, and ``refusal`` refuses it: acknowledged, logged
    as ``message.dropped`` and counted as ``too_deep``. Frames that read are not touched.

    The hook is checked to be as py-amqp 5 makes it (the connection's ``_on_inbound_frame``
    and ``amqp.serialization._read_item``); where it is not (another transport: nothing to
    do; another py-amqp: logged as the worker starts) the connection is left as it is.
    Returns whether the connection's header tables are guarded.
    """
    amqp_connection = sys.modules.get("amqp.connection")
    if amqp_connection is None or not isinstance(connection, amqp_connection.Connection):
        return False
    read = getattr(connection, "_on_inbound_frame", None)
    if getattr(read, "guarded", False):
        return True
    read_item = getattr(sys.modules.get("amqp.serialization"), "_read_item", None)
    if not callable(read) or not callable(read_item):
        logger.warning(
            "worker.header_guard_absent worker=%s reason=py-amqp's connection has no "
            "_on_inbound_frame or amqp.serialization._read_item as expected: a message whose "
            "headers nest past the client stops the worker",
            worker,
        )
        return False

    def on_inbound_frame(frame: Any) -> Any:
        try:
            return read(frame)
        except RecursionError:
            frame_type, channel_id, buf = frame
            readable = (
                _readable_header_frame(buf, read_item)
                if frame_type == CONTENT_HEADER_FRAME
                else None
            )
            if readable is None:
                raise
            return read((frame_type, channel_id, readable))

    on_inbound_frame.guarded = True  # type: ignore[attr-defined]
    connection._on_inbound_frame = on_inbound_frame  # what ``blocking_read`` calls
    return True


def _readable_header_frame(buf: Any, read_item: Callable[..., Any]) -> bytes | None:
    """A basic content header frame (``buf``) with each entry of its header table that does
    not read, or nests deeper than ``structure_limit()``, replaced by ``UNREADABLE_HEADER``;
    None where it is not such a frame or no entry could be replaced."""
    try:
        class_id, flags = unpack_from(">H", buf, 0)[0], unpack_from(">H", buf, 12)[0]
        if class_id != 60 or not flags & HEADERS_FLAG:  # 60: the basic class
            return None
        offset = 14
        for flag in (0x8000, 0x4000):  # content type and encoding, short strings before it
            if flags & flag:
                offset += 1 + buf[offset]
        length = unpack_from(">I", buf, offset)[0]
        position, end = offset + 4, offset + 4 + length
        marker = UNREADABLE_HEADER.encode()
        entries: list[bytes] = []
        replaced = False
        while position < end:
            key_at = position
            value_at = position + 1 + buf[position]
            try:
                value, position = read_item(buf, value_at)
                readable = measure(value, max_depth=structure_limit()).depth <= structure_limit()
            except RecursionError:
                if bytes(buf[value_at : value_at + 1]) not in (b"F", b"A"):
                    return None
                position = value_at + 5 + unpack_from(">I", buf, value_at + 1)[0]
                readable = False
            if readable:
                entries.append(bytes(buf[key_at:position]))
            else:
                entries.append(
                    bytes(buf[key_at:value_at]) + b"S" + pack(">I", len(marker)) + marker
                )
                replaced = True
        table = b"".join(entries)
        if not replaced or position != end:
            return None
        return bytes(buf[:offset]) + pack(">I", len(table)) + table + bytes(buf[end:])
    except (IndexError, StructError):  # not a frame as the protocol writes it: as it was
        return None


Handler = Callable[..., Any]


def guard_envelopes(channel: Any, *, worker: str) -> bool:
    """On Redis, drop an envelope that does not decode, where it would stop the worker.

    Kombu's Redis transport keeps each message as a JSON envelope (headers, properties, the
    body as base64) and decodes it itself, in the worker's main process, as it pops it
    (``Channel._brpop_read``), before Celery or ``guard`` sees a message: an envelope that is
    no JSON, or whose headers nest deeper than Python's JSON reader follows (about 1,000
    levels on Python 3.11), raised out of the event loop and the worker died. The envelope is
    already gone from Redis then (popped, not yet delivered), so the drop loses nothing a
    redelivery could save: it is logged as ``message.dropped`` and counted, and the next
    message is read.

    Only an error raised by the envelope's decoding (kombu's ``bytes_to_str`` or ``loads``
    called from ``_brpop_read``) is caught; an error of the delivery that follows is not.
    The hook is checked to be as kombu 5.5 to 5.7 make it; where it is not (another
    transport: nothing to do; another kombu: logged as the worker starts) the channel is left
    as it is.
    Returns whether the channel's envelopes are guarded.
    """
    redis_transport = sys.modules.get("kombu.transport.redis")
    if redis_transport is None or not isinstance(channel, redis_transport.Channel):
        return False
    read = getattr(channel, "_brpop_read", None)
    if getattr(read, "guarded", False):
        return True
    handlers = getattr(channel, "handlers", None)
    caller = getattr(getattr(read, "__func__", None), "__code__", None)
    decoders = {
        getattr(getattr(redis_transport, name, None), "__code__", None)
        for name in ("bytes_to_str", "loads")
    }
    hooked = isinstance(handlers, dict) and handlers.get("BRPOP") == read
    if caller is None or None in decoders or not hooked:
        logger.warning(
            "worker.envelope_guard_absent worker=%s reason=kombu's Redis channel has no "
            "_brpop_read handler as expected: an envelope that does not decode stops the "
            "worker",
            worker,
        )
        return False

    def brpop_read(**options: Any) -> Any:
        try:
            return read(**options)
        except (RecursionError, ValueError) as exc:
            if not _raised_between(exc, caller, decoders):
                raise
            found = unreadable("envelope", exc)
            log_drop(found, task=None, message_id=None, worker=worker)
            try:
                runtime.on_live_connection(
                    lambda: drops.record_drop(
                        worker=worker, kind=found.kind, reason=found.reason, now=timezone.now()
                    )
                )
            except Exception:
                logger.exception("message.drop_not_recorded kind=%s worker=%s", found.kind, worker)
            return True  # a message was read (and dropped): the poller goes on as after one

    brpop_read.guarded = True  # type: ignore[attr-defined]
    channel._brpop_read = brpop_read  # kombu calls it so when it closes the channel
    handlers["BRPOP"] = brpop_read  # and so when the event loop finds a reply
    return True


def _raised_between(exc: BaseException, caller: Any, callees: set[Any]) -> bool:
    """Whether ``exc`` was raised in a call that the function of code ``caller`` made
    directly to one of code ``callees`` (or deeper in that call)."""
    frame = exc.__traceback__
    while frame is not None and frame.tb_frame.f_code is not caller:
        frame = frame.tb_next
    called = frame.tb_next if frame is not None else None
    return called is not None and called.tb_frame.f_code in callees
