"""On RabbitMQ, a message whose header tables nest past what the client reads is dropped.

py-amqp reads a message's header table as the content header frame arrives, recursively, in
the worker's main process, before Celery or the guard sees a message: a table nested a few
thousand levels deep (RabbitMQ accepts and delivers it) raised ``RecursionError`` out of the
event loop, and the unacknowledged message went to the next worker, which died too. The
guard reads such a table entry by entry instead, puts a marker in place of an entry too deep
to read, and the message is refused like any other: acknowledged, logged as
``message.dropped``, counted. A real ``celery worker`` on RabbitMQ, with the messages
published before it starts, keeps serving a PT2S job.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone
from kombu import Connection, Exchange, Producer, Queue

from scheduling.models import EXECUTION_UNFINISHED, DropKind, Execution, MessageDrops
from scheduling.worker import transports
from tests.conftest import Processes, scheduler_command, wait_for
from tests.factories import create_job
from tests.polling import logged
from tests.scheduling.test_exactly_once import RABBITMQ_URL, require_rabbitmq, stop
from tests.scheduling.test_hostile_messages import NOOP, completed, list_body, protocol2_headers
from tests.scheduling.test_worker_lifecycle import SLOW, start_worker

#: Deeper than py-amqp's recursive table reader follows (about 1,000 levels: Python's
#: recursion limit), and as deep as the attack that killed the worker.
DEPTH = 3_000


def deep_table(levels: int) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for _ in range(levels - 1):
        table = {"a": table}
    return table


def deep_array(levels: int) -> list[Any]:
    array: list[Any] = []
    for _ in range(levels - 1):
        array = [array]
    return array


def queue_of(name: str) -> Queue:
    """The queue as the worker declares it for ``-Q name``."""
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


def publish_deep(queue: Queue, **headers: Any) -> None:
    """Publish a message with ``headers`` through py-amqp, whose table writer recurses as its
    reader does: it is given the stack to write them (a publisher in another language needs
    none)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(4 * DEPTH + 1_000)
    try:
        with Connection(RABBITMQ_URL, connect_timeout=5) as conn:
            Producer(conn.default_channel).publish(
                list_body(), exchange=queue.exchange, routing_key=queue.routing_key,
                headers=headers, content_type="application/json", content_encoding="utf-8",
                declare=[queue], delivery_mode=2,
            )  # fmt: skip
    finally:
        sys.setrecursionlimit(limit)


def ready_in(queue: Queue) -> int:
    with Connection(RABBITMQ_URL, connect_timeout=5) as conn:
        return conn.default_channel.queue_declare(queue.name, passive=True).message_count


@pytest.fixture
def rabbitmq_queue() -> Iterator[Queue]:
    """A queue of this test's own on the local RabbitMQ, deleted afterwards.

    Requested before ``processes``, so it is torn down after the processes have stopped."""
    require_rabbitmq()
    queue = queue_of(f"dc-hostile-{uuid.uuid4().hex[:10]}")
    yield queue
    with contextlib.suppress(Exception), Connection(RABBITMQ_URL, connect_timeout=5) as conn:
        conn.default_channel.queue_delete(queue.name)
        conn.default_channel.exchange_delete(queue.name)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_on_rabbitmq_headers_nested_past_the_client_are_dropped_and_the_worker_serves_on(
    rabbitmq_queue: Queue, owner: Any, processes: Processes, process_env: dict[str, str]
) -> None:
    env = {**process_env, "CELERY_BROKER_URL": RABBITMQ_URL}
    publish_deep(rabbitmq_queue, **protocol2_headers(NOOP, str(uuid.uuid4())),
                 **{"x-deep": deep_table(DEPTH)})  # fmt: skip
    publish_deep(rabbitmq_queue, **protocol2_headers(NOOP, str(uuid.uuid4())),
                 **{"x-deep": deep_array(DEPTH)})  # fmt: skip
    assert ready_in(rabbitmq_queue) == 2
    job = create_job(owner=owner, name="every-2s", task=NOOP, every="PT2S", now=timezone.now(),
                     queue=rabbitmq_queue.name)  # fmt: skip
    worker = start_worker(processes, env, "guarded-amqp", queues=rabbitmq_queue.name)
    scheduler = processes.start(scheduler_command(), env=env, name="scheduler")

    wait_for(completed(job, 2), timeout=SLOW, message="the PT2S job runs on")
    assert worker.poll() is None, processes.log_of(worker)
    log = logged(lambda: processes.log_of(worker), r"message\.dropped", count=2, timeout=SLOW,
                 message="both hostile messages are logged as dropped")  # fmt: skip
    assert "kind=too_deep" in log and "'x-deep' is nested deeper than" in log, log
    assert {(row.kind, row.dropped_total) for row in MessageDrops.objects.all()} == {
        (DropKind.TOO_DEEP, 2)
    }
    # The scheduler stops publishing the job, and the worker takes what it published already;
    # then a hostile message left unacknowledged would go back to the queue when it stops.
    assert stop(processes, scheduler) == [0]
    wait_for(
        lambda: ready_in(rabbitmq_queue) == 0
        and not Execution.objects.filter(job=job, status__in=EXECUTION_UNFINISHED).exists(),
        timeout=SLOW, message="the worker runs the job's last occurrences",
    )  # fmt: skip
    assert stop(processes, worker) == [0]
    assert ready_in(rabbitmq_queue) == 0, "acknowledged: not handed back to the next worker"


def test_on_rabbitmq_the_header_reading_is_guarded_where_py_amqp_keeps_it() -> None:
    """The hook is checked on the installed py-amqp: a py-amqp that moved it fails here, not
    silently in production (where the worker would log that the guard is absent)."""
    require_rabbitmq()
    with Connection(RABBITMQ_URL, connect_timeout=5) as conn:
        conn.connect()
        assert transports.guard_header_tables(conn.connection, worker="w@h")
        assert transports.guard_header_tables(conn.connection, worker="w@h"), "it stays guarded"
    with Connection("memory://") as memory:
        assert not transports.guard_header_tables(memory.connection, worker="w@h")
