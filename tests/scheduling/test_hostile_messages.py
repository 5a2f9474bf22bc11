"""A worker survives any message the broker hands it, and says what it dropped.

Anything that can write to the broker can write any message: Celery's protocol 1 (no ``task``
header, the body a map), protocol 2 headers over a map body, bodies nested 7,000 levels deep
(which Python's JSON reader follows from 3.12 on and its pickler does not: a worker's main
process that handed them to its pool died, and so did every worker after it), headers as deep
(which kombu's own reading of a Redis envelope cannot follow on 3.11), bytes that do not
decode, an envelope that is no JSON, a content type nobody accepts, a body larger than any the
engine writes. Each is checked before
it reaches a pool process: acknowledged, logged as ``message.dropped``, counted by worker and
kind for ``/metrics``, and, where it names one of the ledger's executions, that execution
fails with the reason, never having started. Real ``celery worker`` processes on Redis, with
the messages written into the queue as raw envelopes, keep serving a PT2S job meanwhile.
"""

from __future__ import annotations

import base64
import itertools
import json
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.test import Client
from django.utils import timezone
from kombu import Connection
from kombu.message import Message

from scheduling.models import DropKind, Execution, ExecutionStatus, Job, MessageDrops
from scheduling.rules.registry import EXECUTION_HEADER
from scheduling.stages import drops
from scheduling.worker import guard, transports
from tests.conftest import Processes, scheduler_command, wait_for
from tests.factories import create_job
from tests.polling import logged
from tests.scheduling.test_worker_lifecycle import SLOW, broker_messages, start_worker

NOOP = "scheduling.diagnostics.noop"
#: Deeper than Python's pickler follows (about 6,000 levels on Python 3.13), not deeper than
#: its JSON reader does (about 10,000): the depth that killed a worker's main process.
DEPTH = 7_000
#: The argument limit of these tests' workers (SCHEDULING_ARGS_MAX_BYTES), so that a body
#: over the size limit (``guard.body_limit()``: 77,824 bytes here) is cheap to write.
ARGS_MAX_BYTES = 1024
MARK = "hostile"


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def json_reads(levels: int) -> bool:
    try:
        json.loads(nested(levels))
    except RecursionError:
        return False
    return True


#: Whether this Python's JSON reader follows a message nested DEPTH levels (3.12 and later
#: do; 3.11 stops near its recursion limit, 1,000): where it does not, such a message is
#: refused as one that cannot be read, before its arguments can be measured.
READS_DEPTH = json_reads(DEPTH + 10)
DEEP_KIND = DropKind.ARGUMENTS if READS_DEPTH else DropKind.UNDECODABLE


def envelope(
    *,
    body: bytes,
    content_type: str = "application/json",
    headers: dict[str, Any],
    mark: str,
    deep_header: bool = False,
) -> str:
    """A message as kombu keeps it in a Redis list, written as text: nothing in this process
    encodes the deep parts (Python's encoder would refuse them), as anything else may."""
    envelope = {
        "body": base64.b64encode(body).decode(),
        "content-encoding": "utf-8",
        "content-type": content_type,
        "headers": {**headers, **({"x-deep": "@DEEP@"} if deep_header else {})},
        "properties": {
            "correlation_id": mark,
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": "celery"},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        },
    }
    return json.dumps(envelope).replace('"@DEEP@"', nested(DEPTH))


def protocol2_headers(task: str, task_id: str, **extra: Any) -> dict[str, Any]:
    return {"lang": "py", "task": task, "id": task_id, "root_id": task_id, "retries": 0,
            "timelimit": [None, None], "argsrepr": "()", "kwargsrepr": "{}", **extra}  # fmt: skip


def list_body(args: str = "[]", kwargs: str = "{}") -> bytes:
    embed = '{"callbacks": null, "errbacks": null, "chain": null, "chord": null}'
    return f"[{args}, {kwargs}, {embed}]".encode()


def dict_body(task: str, task_id: str, args: str = "[]", kwargs: str = "{}") -> bytes:
    return f'{{"task": "{task}", "id": "{task_id}", "args": {args}, "kwargs": {kwargs}}}'.encode()


def push(env: dict[str, str], *texts: str) -> None:
    """Put envelopes into the test's ``celery`` queue, oldest first (kombu pops the right)."""
    client = redis.Redis.from_url(env["CELERY_BROKER_URL"])
    client.lpush(f"{env['CELERY_REDIS_KEY_PREFIX']}celery", *texts)


def queued(job: Job) -> Execution:
    return Execution.objects.create(
        job=job, task=job.task, scheduled_for=timezone.now(), status=ExecutionStatus.QUEUED,
        task_id=uuid.uuid4(), queued_at=timezone.now(),
    )  # fmt: skip


def hostile_messages(target: Job) -> tuple[list[str], dict[str, Execution], dict[str, int]]:
    """Every hostile shape: envelopes, the executions some of them name, the drops by kind."""
    named = {name: queued(target) for name in ("list_kwargs", "proto1", "hybrid", "bytes")}
    deep = nested(DEPTH)
    anonymous = str(uuid.uuid4())
    ex = named["list_kwargs"]
    texts = [
        # Protocol 2, kwargs and then args nested 7,000 deep; the first names its execution.
        envelope(body=list_body(kwargs=f'{{"x": {deep}}}'), mark=f"{MARK}-1",
                 headers=protocol2_headers(NOOP, str(ex.task_id), **{EXECUTION_HEADER: ex.pk})),
        envelope(body=list_body(args=f"[{deep}]"), mark=f"{MARK}-2",
                 headers=protocol2_headers(NOOP, anonymous)),
        # Protocol 1 (no task header, a map body): by the execution header, and by none.
        envelope(body=dict_body(NOOP, str(named["proto1"].task_id), kwargs=f'{{"x": {deep}}}'),
                 mark=f"{MARK}-3", headers={EXECUTION_HEADER: named["proto1"].pk}),
        envelope(body=dict_body(NOOP, anonymous, args=f"[{deep}]"), mark=f"{MARK}-4",
                 headers={}),
        # Protocol 2 headers over a map body, naming its execution by task id only.
        envelope(body=f'{{"args": [], "kwargs": {{"x": {deep}}}}}'.encode(), mark=f"{MARK}-5",
                 headers=protocol2_headers(NOOP, str(named["hybrid"].task_id))),
        # ... and a map body that is neither protocol's.
        envelope(body=b'{"nothing": "here"}', mark=f"{MARK}-6",
                 headers=protocol2_headers(NOOP, anonymous)),
        # Bytes that are no JSON, naming an execution; a content type nobody accepts.
        envelope(body=b"\xff\xfe\x00[not json", mark=f"{MARK}-7",
                 headers=protocol2_headers(NOOP, str(named["bytes"].task_id))),
        envelope(body=b"whatever", content_type="application/x-hostile", mark=f"{MARK}-8",
                 headers=protocol2_headers(NOOP, anonymous)),
        # Larger than any body the argument limits allow.
        envelope(body=list_body(args=json.dumps(["x" * (100 * ARGS_MAX_BYTES)])),
                 mark=f"{MARK}-9", headers=protocol2_headers(NOOP, anonymous)),
        # Headers nested 7,000 deep, and a task that keeps no ledger (Celery's own) sent a
        # map body nested as deep: every task's messages are checked.
        envelope(body=list_body(), mark=f"{MARK}-10", deep_header=True,
                 headers=protocol2_headers(NOOP, anonymous)),
        envelope(body=f'{{"args": [{deep}], "kwargs": {{}}}}'.encode(), mark=f"{MARK}-11",
                 headers=protocol2_headers("celery.backend_cleanup", anonymous)),
        # An envelope that is no JSON: kombu decodes envelopes itself, before any check.
        '{"body": "no closing quote, no closing brace',
    ]  # fmt: skip
    kinds = {
        DropKind.MALFORMED: 1,  # 6
        DropKind.UNDECODABLE: 2,  # 7, 12
        DropKind.CONTENT_TYPE: 1,  # 8
        DropKind.TOO_LARGE: 1,  # 9
    }
    if READS_DEPTH:
        kinds[DropKind.ARGUMENTS] = 5  # 1 to 5: the ledger's argument limits, in any protocol
        kinds[DropKind.TOO_DEEP] = 2  # 10, 11
    else:
        kinds[DropKind.UNDECODABLE] += 7  # 1 to 5, 10, 11: too deep to read at all
    return texts, named, kinds


def pt2s_job(owner: Any) -> Job:
    return create_job(owner=owner, name="every-2s", task=NOOP, every="PT2S", now=timezone.now())


def completed(job: Job, count: int) -> Callable[[], list[Execution]]:
    def check() -> list[Execution]:
        done = list(
            Execution.objects.filter(job=job, status=ExecutionStatus.COMPLETED).order_by(
                "scheduled_for"
            )
        )
        return done if len(done) >= count else []

    return check


def assert_served_once_each(job: Job, done: list[Execution]) -> None:
    """The job's occurrences up to the last one completed: none missing, each run once."""
    finished = list(
        Execution.objects.filter(job=job, scheduled_for__lte=done[-1].scheduled_for).order_by(
            "scheduled_for"
        )
    )
    assert [e.status for e in finished] == [ExecutionStatus.COMPLETED] * len(finished)
    steps = {b.scheduled_for - a.scheduled_for for a, b in itertools.pairwise(finished)}
    assert steps == {timedelta(seconds=2)}, "no occurrence was lost"
    for execution in finished:
        assert execution.attempts.count() == 1 and execution.duplicates == 0


def run_hostile_messages(
    owner: Any, processes: Processes, process_env: dict[str, str], *, pool: str
) -> None:
    env = {**process_env, "SCHEDULING_ARGS_MAX_BYTES": str(ARGS_MAX_BYTES)}
    target = create_job(owner=owner, name="target", task=NOOP, every="PT1H",
                        now=timezone.now() + timedelta(days=1))  # fmt: skip
    texts, named, kinds = hostile_messages(target)
    push(env, *texts)
    job = pt2s_job(owner)
    worker = start_worker(processes, env, f"guarded-{pool}", pool=pool)
    processes.start(scheduler_command(), env=env, name="scheduler")

    done = wait_for(completed(job, 4), timeout=SLOW, message="the PT2S job runs on")
    assert worker.poll() is None, processes.log_of(worker)
    assert_served_once_each(job, done)

    log = logged(lambda: processes.log_of(worker), r"message\.dropped", count=len(texts),
                 timeout=SLOW, message="every hostile message is logged as dropped")  # fmt: skip
    left = [m for m in broker_messages(env)
            if str(m["properties"].get("correlation_id", "")).startswith(MARK)]  # fmt: skip
    assert not left, "every hostile message is gone from Redis"
    for name, execution in named.items():
        execution.refresh_from_db()
        assert execution.status == ExecutionStatus.FAILED, (name, execution.last_error[:300])
        assert execution.last_error.startswith("message refused by the worker: "), name
        assert not execution.attempts.exists(), f"{name}: no body ran"
    assert named["list_kwargs"].last_error == (
        f"message refused by the worker: kwargs: is nested {DEPTH + 1:,} levels deep; the "
        "limit is 32 (SCHEDULING_ARGS_MAX_DEPTH)"
        if READS_DEPTH
        else "message refused by the worker: body: is nested deeper than Python's JSON reader "
        "can follow"
    )
    assert "does not decode as 'application/json'" in named["bytes"].last_error
    counted = {row.kind: row.dropped_total for row in MessageDrops.objects.all()}
    assert counted == kinds, log
    assert {row.worker for row in MessageDrops.objects.all()} == {f"guarded-{pool}@" +
            execution_host(done[0])}  # fmt: skip


def execution_host(execution: Execution) -> str:
    return execution.worker.split("@", 1)[1]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_prefork_worker_drops_every_hostile_message_alone_and_keeps_serving(
    owner: Any, processes: Processes, process_env: dict[str, str]
) -> None:
    run_hostile_messages(owner, processes, process_env, pool="prefork")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_solo_worker_drops_every_hostile_message_alone_and_keeps_serving(
    owner: Any, processes: Processes, process_env: dict[str, str]
) -> None:
    run_hostile_messages(owner, processes, process_env, pool="solo")


# --- the checks themselves, on messages made in this process --------------------------------


ACCEPTED = {"application/json"}


def message(body: bytes, *, headers: dict[str, Any], content_type: str = "application/json") -> Any:
    return Message(body=body, content_type=content_type, content_encoding="utf-8",
                   headers=headers, accept=ACCEPTED)  # fmt: skip


@pytest.mark.parametrize(
    ("body", "protocol1", "kind"),
    [
        (list_body(), False, None),
        (b'{"args": [1], "kwargs": {"a": 2}}', False, None),
        (b'{"task": "t", "id": "i", "args": [1], "kwargs": {}}', True, None),
        (b"[[], {}]", False, DropKind.MALFORMED),
        (b"[{}, {}, null]", False, DropKind.MALFORMED),
        (b"[[], [], null]", False, DropKind.MALFORMED),
        (b'[[], {}, "args"]', False, DropKind.MALFORMED),
        (b'"args"', False, DropKind.MALFORMED),
        (b'{"kwargs": {}}', False, DropKind.MALFORMED),
        (b'{"task": "t", "args": "abc", "kwargs": {}}', True, DropKind.MALFORMED),
        (list_body(args=f"[{nested(40)}]"), False, DropKind.ARGUMENTS),
        (list_body(kwargs=f'{{"x": {nested(DEPTH)}}}'), False, DEEP_KIND),
        (b"[" * 20_000 + b"]" * 20_000, False, DropKind.UNDECODABLE),
    ],
)
@pytest.mark.django_db
def test_every_shape_is_checked_before_the_pool(body: bytes, protocol1: bool, kind: str) -> None:
    """Protocol 1 bodies come decoded by Celery; protocol 2 bodies are decoded by the check."""
    headers = {} if protocol1 else protocol2_headers(NOOP, str(uuid.uuid4()))
    found = guard.refusal(message(body, headers=headers),
                          json.loads(body) if protocol1 else None,
                          ledger=True, accepted=ACCEPTED)  # fmt: skip
    assert (found.kind if found else None) == kind, found


def test_a_body_past_what_python_reads_is_named_as_such() -> None:
    deep = b"[" * 20_000 + b"]" * 20_000
    found = guard.refusal(message(deep, headers=protocol2_headers(NOOP, str(uuid.uuid4()))),
                          None, ledger=True, accepted=ACCEPTED)  # fmt: skip
    assert found == guard.Refusal(
        DropKind.UNDECODABLE, "body: is nested deeper than Python's JSON reader can follow"
    )


@pytest.mark.django_db
def test_a_task_without_a_ledger_keeps_its_own_argument_sizes_but_not_any_depth() -> None:
    """The argument limits are the ledger's; any task's message is held to a depth a worker
    can hand to its pool."""
    headers = protocol2_headers("celery.backend_cleanup", str(uuid.uuid4()))
    big = list_body(args=json.dumps(["x" * 200_000]))
    assert guard.refusal(message(big, headers=headers), None, ledger=False,
                         accepted=ACCEPTED) is None  # fmt: skip
    deep = list_body(args=f"[{nested(guard.host_structure_limit())}]")
    found = guard.refusal(message(deep, headers=headers), None, ledger=False, accepted=ACCEPTED)
    assert found is not None and found.kind == DropKind.TOO_DEEP


@pytest.mark.django_db
def test_a_host_tasks_deep_or_huge_body_runs_while_the_engines_tasks_keep_their_limits() -> None:
    """Only the ledger's tasks are held to the argument limits' bounds; another task's body is
    refused only where the worker could not hand it to its pool, however many parts it has."""
    headers = protocol2_headers("celery.backend_cleanup", str(uuid.uuid4()))
    deep = list_body(args=f"[{nested(150)}]")
    huge = list_body(args="[[" + ", ".join(["{}"] * 1_000_001) + "]]")
    assert guard.refusal(message(deep, headers=headers), None, ledger=False,
                         accepted=ACCEPTED) is None  # fmt: skip
    assert guard.refusal(message(huge, headers=headers), None, ledger=False,
                         accepted=ACCEPTED) is None  # fmt: skip
    ledger_headers = protocol2_headers(NOOP, str(uuid.uuid4()))
    for body, kind in ((deep, DropKind.ARGUMENTS), (huge, DropKind.TOO_LARGE)):
        found = guard.refusal(message(body, headers=ledger_headers), None, ledger=True,
                              accepted=ACCEPTED)  # fmt: skip
        assert found is not None and found.kind == kind, found


def test_the_walk_is_bounded_even_on_a_value_that_contains_itself() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert guard.measure(loop, max_depth=50).stopped
    wide: list[Any] = [[] for _ in range(10)]
    assert guard.measure(wide, max_depth=50, max_nodes=5).stopped
    assert guard.measure([[1], {"a": [2]}], max_depth=50) == guard.Measure(3, stopped=False)
    assert guard.measure(loop, max_depth=50, max_nodes=None).stopped


def test_a_web_of_shared_parts_is_walked_once_not_once_per_path() -> None:
    """A serializer that keeps shared references (pickle, YAML) can make 2**200 paths from 200
    lists; the walk without a count bound still visits each part once (one per path would
    never end)."""
    web: list[Any] = []
    for _ in range(199):
        web = [web, web]
    assert guard.measure([web], max_depth=300, max_nodes=None) == guard.Measure(201, False)
    assert guard.measure(web, max_depth=150, max_nodes=None).stopped


@pytest.mark.django_db
def test_drops_are_counted_per_worker_and_kind_and_exposed_in_metrics(client: Client) -> None:
    now = timezone.now()
    for _ in range(3):
        drops.record_drop(worker="w@h", kind=DropKind.UNDECODABLE, reason="body: no", now=now)
    drops.record_drop(worker="w@h", kind=DropKind.TOO_DEEP, reason="headers: deep", now=now)
    assert [(r.worker, r.kind, r.dropped_total) for r in drops.totals()] == [
        ("w@h", DropKind.TOO_DEEP, 1),
        ("w@h", DropKind.UNDECODABLE, 3),
    ]

    text = client.get("/metrics").content.decode()
    assert 'duecourse_worker_messages_dropped_total{kind="undecodable",worker="w@h"} 3.0' in text
    assert 'duecourse_worker_messages_dropped_total{kind="too_deep",worker="w@h"} 1.0' in text


def test_on_redis_the_envelopes_reading_is_guarded_where_kombu_keeps_it(
    process_env: dict[str, str],
) -> None:
    """The hook is checked on the installed kombu: a kombu that moved it fails here, not
    silently in production (where the worker would log that the guard is absent)."""
    with Connection(process_env["CELERY_BROKER_URL"]) as redis_connection:
        channel = redis_connection.default_channel
        assert transports.guard_envelopes(channel, worker="w@h")
        assert channel.handlers["BRPOP"] is channel._brpop_read
        assert getattr(channel._brpop_read, "guarded", False)
        assert transports.guard_envelopes(channel, worker="w@h"), "once guarded, it stays so"
    with Connection("memory://") as memory:
        assert not transports.guard_envelopes(memory.default_channel, worker="w@h")
