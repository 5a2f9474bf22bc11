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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from celery.worker.strategy import default as default_strategy
from kombu.serialization import prepare_accept_content

from scheduling.models import DropKind
from scheduling.rules import arguments
from scheduling.worker.refusals import UNREADABLE_HEADER, Refusal, refuse, text_of, unreadable

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


Handler = Callable[..., Any]


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
