"""The worker's guard: every message is checked before it reaches a pool process.

A worker's main process hands each message to a pool process, and what it cannot hand over
kills it: arguments nested a few thousand levels deep decode fine but make the pickling for
the pool raise ``RecursionError`` in the main process itself, which dies; Redis restores the
message, and the next worker to take it dies too, so one message stops every worker. The
engine never publishes such a message (``scheduling.rules.arguments``' limits are checked at
every door and at the claim), but a message can come from anywhere that reaches the broker, in
any shape Celery reads: protocol 2 (a ``task`` header, the body ``[args, kwargs, embed]``),
protocol 1 (no ``task`` header, the body ``{"task", "id", "args", "kwargs", ...}``), or
protocol 2 headers over a protocol 1 body, in any content type.

So every task's messages go through ``guard``, Celery's own strategy with ``refusal`` in front:
the ledger tasks name ``guarded_strategy`` as their ``Strategy``, and ``GuardStep``, a bootstep
of the worker's consumer, puts the same check in front of every other task's. A message is
refused when:

- its content type is not one the worker accepts, or its body does not decode;
- its body is none of the shapes above, its args are not a list or its kwargs not a map;
- any part of it (headers, properties, body) nests deeper than the worker can hand to its pool
  (``host_structure_limit()``); for a ledger task, deeper than ``structure_limit()`` or holding
  more than ``WALK_MAX_NODES`` lists and maps;
- for a ledger task: its body is larger than any the argument limits allow (``body_limit``),
  or its args or kwargs break those limits.

A refused message is acknowledged (a redelivery would meet the same end, or kill the next
worker), logged as ``message.dropped`` with its reason, counted by worker and kind
(``scheduling.stages.drops``, reported by ``/metrics``) and, where it names one of the
ledger's executions (by the execution header, or by its task id), that execution is failed
with the reason. On Redis, an envelope kombu itself cannot read is dropped and counted too
(``guard_envelopes``); on RabbitMQ, a header table nested past what the AMQP client reads is
read entry by entry and the message refused (``guard_header_tables``). The next message is
served as usual. Nothing here recurses (py-amqp's reader aside, whose ``RecursionError`` is
caught): nesting is measured by an iterative walk that stops at its bounds. Usage, on a task
class::

    Strategy = "scheduling.worker.guard:guarded_strategy"
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from struct import error as StructError
from struct import pack, unpack_from
from typing import Any

from celery import bootsteps
from celery.worker.strategy import default as default_strategy
from django.utils import timezone
from kombu.serialization import prepare_accept_content

from scheduling.models import EXECUTION_STARTABLE, AttemptOutcome, DropKind, Execution
from scheduling.rules import arguments
from scheduling.rules.registry import EXECUTION_HEADER
from scheduling.stages import attempts, drops
from scheduling.worker import runtime

logger = logging.getLogger("scheduling")

#: How deeply any part of a ledger task's message may nest: deeper than any message Celery
#: writes (a canvas included), and far from where pickling for the pool fails (about 500
#: levels on Python 3.11). Raised to fit the argument limit where that is set higher.
STRUCTURE_MAX_DEPTH = 100
#: The most lists and maps one part of a ledger task's message may hold: a walk's bound on its
#: work (the argument limits keep the engine's own messages far below it).
WALK_MAX_NODES = 1_000_000
#: How deeply any part of another task's message may nest: what the worker's main process can
#: still pickle for its pool (a protocol 1 body and the headers go as values). Python 3.11's
#: pickler takes two of its 1,000 recursion levels per level of a value, less the main
#: process's own stack (about 400 levels from 200 frames down); 3.13's follows thousands.
HOST_STRUCTURE_MAX_DEPTH = 300
#: What a ledger task's body may hold besides its arguments (the embed, the envelope's
#: punctuation); with the arguments at most 6 bytes per character of their own JSON (a control
#: character escaped as ``\u0001``), ``body_limit`` is larger than any body the limits allow.
BODY_SLACK = 65_536
#: How deep the walk of a ledger task's arguments goes to say how deeply they nest: past what
#: Python's JSON reader follows, so a decoded value is measured in full.
ARGUMENTS_WALK_DEPTH = 20_000


@dataclass(frozen=True)
class Refusal:
    """Why a message may not go to a pool process: its kind (``DropKind``) and one line."""

    kind: str
    reason: str


def structure_limit() -> int:
    """How deeply any part of a message may nest (``STRUCTURE_MAX_DEPTH``, or deeper when the
    argument limit is: the arguments sit two levels down in the body)."""
    return max(STRUCTURE_MAX_DEPTH, int(arguments.limits()[0]) + 3)


def host_structure_limit() -> int:
    """How deeply any part of a message of a task outside the ledger may nest
    (``HOST_STRUCTURE_MAX_DEPTH``, never less than a ledger task's ``structure_limit()``)."""
    return max(HOST_STRUCTURE_MAX_DEPTH, structure_limit())


def body_limit() -> int:
    """The largest body a ledger task's message may have, in bytes."""
    return 2 * 6 * int(arguments.limits()[1]) + BODY_SLACK


@dataclass(frozen=True)
class Measure:
    """How deeply a value nests (a scalar is 0, ``[]`` 1), and whether the walk stopped at
    its bounds before it saw everything (then ``depth`` is only as deep as it went)."""

    depth: int
    stopped: bool


def measure(value: Any, *, max_depth: int, max_nodes: int | None = WALK_MAX_NODES) -> Measure:
    """Measure ``value``'s nesting without recursion, going no deeper than ``max_depth`` + 1
    and visiting at most ``max_nodes`` lists and maps (None: no such bound).

    A part shared by several parents, which some serializers (pickle, YAML) can make, is
    walked again only when it is reached deeper than before, and a cycle stops at
    ``max_depth``: without ``max_nodes`` the walk is bounded by the value's size (its lists'
    and maps' items) times ``max_depth`` at worst, and is once over each item of a value with
    no shared parts (a decoded JSON body: time in proportion to what was decoded already).
    """
    deepest, visited = 0, 0
    reached: dict[int, int] = {}
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = (*item.keys(), *item.values())
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        visited += 1
        deepest = max(deepest, level)
        if level > max_depth or (max_nodes is not None and visited > max_nodes):
            return Measure(deepest, stopped=True)
        if not item or reached.get(id(item), 0) >= level:
            continue
        reached[id(item)] = level
        stack.extend(
            (child, level + 1) for child in children if isinstance(child, dict | list | tuple)
        )
    return Measure(deepest, stopped=False)


def _structure_problem(part: str, value: Any, *, ledger: bool) -> Refusal | None:
    """How ``part`` nests against a ledger task's limits, or only against what the worker can
    hand to its pool (``host_structure_limit()``, any number of lists and maps) for any other
    task: the host project's own messages are held to no stricter bound than that."""
    if not ledger:
        limit = host_structure_limit()
        if measure(value, max_depth=limit, max_nodes=None).depth > limit:
            return Refusal(DropKind.TOO_DEEP, f"{part}: nested more than {limit} levels deep")
        return None
    limit = structure_limit()
    found = measure(value, max_depth=limit)
    if found.depth > limit:
        return Refusal(DropKind.TOO_DEEP, f"{part}: nested more than {limit} levels deep")
    if found.stopped:
        return Refusal(
            DropKind.TOO_DEEP, f"{part}: holds more than {WALK_MAX_NODES:,} lists and maps"
        )
    return None


def _arguments_problem(name: str, value: Any, *, measure_size: bool) -> Refusal | None:
    """A ledger task's ``args`` or ``kwargs`` against the argument limits, in their words."""
    max_depth, _ = arguments.limits()
    found = measure(value, max_depth=ARGUMENTS_WALK_DEPTH)
    if found.stopped:
        return Refusal(
            DropKind.ARGUMENTS,
            f"{name}: is nested more than {ARGUMENTS_WALK_DEPTH:,} levels deep or holds more "
            f"than {WALK_MAX_NODES:,} lists and maps; the limit is {max_depth} "
            "(SCHEDULING_ARGS_MAX_DEPTH)",
        )
    if found.depth > max_depth:
        return Refusal(
            DropKind.ARGUMENTS,
            f"{name}: is nested {found.depth:,} levels deep; the limit is {max_depth} "
            "(SCHEDULING_ARGS_MAX_DEPTH)",
        )
    if measure_size:
        too_much = arguments.problem(value)
        if too_much is not None:
            return Refusal(DropKind.ARGUMENTS, f"{name}: {too_much}")
    return None


def _task_arguments(payload: Any, *, protocol1: bool) -> tuple[Any, Any] | Refusal:
    """The args and kwargs of a decoded body of any shape Celery reads, or why there are none."""
    if isinstance(payload, dict):
        if not protocol1 and "args" not in payload:
            return Refusal(
                DropKind.MALFORMED,
                "body: a map must hold the task's args and kwargs (Celery's protocol 1)",
            )
        args, kwargs = payload.get("args", ()), payload.get("kwargs", {})
    elif isinstance(payload, list | tuple) and not protocol1:
        if len(payload) != 3:
            return Refusal(
                DropKind.MALFORMED,
                f"body: a list must hold [args, kwargs, embed]; this one holds {len(payload)} "
                "items",
            )
        args, kwargs, embed = payload
        if embed is not None and not isinstance(embed, dict):
            return Refusal(DropKind.MALFORMED, "body: its embed (the third item) must be a map")
    else:
        return Refusal(
            DropKind.MALFORMED, f"body: a {type(payload).__name__} is not a task message's body"
        )
    if not isinstance(args, list | tuple):
        return Refusal(DropKind.MALFORMED, f"args: must be a list, not a {type(args).__name__}")
    if not isinstance(kwargs, dict):
        return Refusal(DropKind.MALFORMED, f"kwargs: must be a map, not a {type(kwargs).__name__}")
    if not all(isinstance(key, str) for key in kwargs):
        return Refusal(DropKind.MALFORMED, "kwargs: every key must be text")
    return args, kwargs


def _accepted(message: Any, fallback: set[str]) -> set[str]:
    accept = getattr(message, "accept", None)
    return set(accept) if accept else fallback


def refusal(message: Any, body: Any, *, ledger: bool, accepted: set[str]) -> Refusal | None:
    """Why ``message`` may not go to a pool process, or None.

    ``body`` is what Celery decoded already (a protocol 1 body) or None (protocol 2: Celery
    leaves the body to the pool process, and it is decoded here to be checked). ``ledger``: the
    task keeps its runs in the ledger, and the argument limits apply. ``accepted``: the content
    types the worker accepts.
    """
    headers = message.headers
    if not isinstance(headers, dict):
        return Refusal(DropKind.MALFORMED, "headers: not a map")
    for key, value in headers.items():
        if isinstance(value, str) and value == UNREADABLE_HEADER:
            return Refusal(
                DropKind.TOO_DEEP,
                f"headers: {text_of(key)} is nested deeper than the AMQP client can read",
            )
    for part, value in (
        ("headers", headers),
        ("properties", getattr(message, "properties", None)),
        ("delivery info", getattr(message, "delivery_info", None)),
    ):
        found = _structure_problem(part, value, ledger=ledger)
        if found is not None:
            return found
    raw = message.body
    size = len(raw) if isinstance(raw, bytes | str) else 0
    limit = body_limit()
    if ledger and size > limit:
        return Refusal(
            DropKind.TOO_LARGE,
            f"body: {size:,} bytes; the limit is {limit:,} (from SCHEDULING_ARGS_MAX_BYTES)",
        )
    if body is None:
        content_type = message.content_type
        if not content_type:
            return Refusal(DropKind.CONTENT_TYPE, "body: has no content type")
        allowed = _accepted(message, accepted)
        if content_type not in allowed:
            return Refusal(
                DropKind.CONTENT_TYPE,
                f"body: content type {text_of(content_type)} is not one this worker accepts "
                f"({', '.join(sorted(allowed))})",
            )
        try:
            payload = message.payload
        except Exception as exc:  # any decoder's error (kombu wraps them): it cannot be read
            return unreadable("body", exc, f" as {text_of(content_type)}")
    else:
        payload = body
    found_arguments = _task_arguments(payload, protocol1=body is not None)
    if isinstance(found_arguments, Refusal):
        return found_arguments
    if ledger:
        small = size <= int(arguments.limits()[1])
        for name, value in zip(("args", "kwargs"), found_arguments, strict=True):
            found = _arguments_problem(name, value, measure_size=not small)
            if found is not None:
                return found
    return _structure_problem("body", payload, ledger=ledger)


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


def guard(handle: Handler, *, task: Any, app: Any, consumer: Any) -> Handler:
    """``handle`` (a task's strategy) with ``refusal`` checked before each message."""
    ledger = bool(getattr(task, "ledger", False))
    accepted = set(prepare_accept_content(app.conf.accept_content) or ())
    worker = str(getattr(consumer, "hostname", "") or "")
    errors = tuple(getattr(consumer, "connection_errors", ()) or ())

    def task_message_handler(
        message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **kwargs: Any
    ) -> Any:
        found = refusal(message, body, ledger=ledger, accepted=accepted)
        if found is not None:
            refuse(message, body, found, ack=ack, task=task.name, worker=worker,
                   connection_errors=errors)  # fmt: skip
            return None
        return handle(message, body, ack, reject, callbacks, **kwargs)

    task_message_handler.guarded = True  # type: ignore[attr-defined]
    return task_message_handler


def guarded_strategy(task: Any, app: Any, consumer: Any, **options: Any) -> Handler:
    """Celery's default strategy for ``task``, guarded (a ledger task's ``Strategy``)."""
    return guard(default_strategy(task, app, consumer, **options), task=task, app=app,
                 consumer=consumer)  # fmt: skip


class GuardStep(bootsteps.StartStopStep):
    """A bootstep of the worker's consumer: every task's strategy guarded, not only the ledger
    tasks', a body Celery itself cannot decode (protocol 1) counted as a drop, and on Redis an
    envelope kombu cannot decode dropped rather than stopping the worker (``guard_envelopes``),
    and on RabbitMQ a header table py-amqp cannot read refused (``guard_header_tables``).

    It starts after the consumer has made its strategies (``Tasks``), each time it does
    (a reconnection makes them anew), and before the event loop reads the first message.
    Added by ``scheduling.worker.receivers`` when a worker starts.
    """

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, c: Any) -> None:
        worker = str(c.hostname or "")
        for name, strategy in list(c.strategies.items()):
            task = c.app.tasks.get(name)
            if task is not None and not getattr(strategy, "guarded", False):
                c.strategies[name] = guard(strategy, task=task, app=c.app, consumer=c)
        task_consumer = getattr(c, "task_consumer", None)
        guard_envelopes(getattr(task_consumer, "channel", None), worker=worker)
        broker = getattr(c, "connection", None)
        if broker is not None and getattr(broker, "connected", False):
            guard_header_tables(broker.connection, worker=worker)
        celery_on_decode_error = c.on_decode_error
        if getattr(celery_on_decode_error, "guarded", False):
            return

        def on_decode_error(message: Any, exc: BaseException) -> None:
            celery_on_decode_error(message, exc)  # Celery logs it and acknowledges it
            found = unreadable("body", exc)
            headers = message.headers if isinstance(message.headers, dict) else {}
            log_drop(found, task=headers.get("task"), message_id=headers.get("id"), worker=worker)
            record_drop(found, message=message, body=None, worker=worker)

        on_decode_error.guarded = True  # type: ignore[attr-defined]
        c.on_decode_error = on_decode_error
