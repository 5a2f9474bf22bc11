"""A worker's consumer closes the connection to a broker that went away, and lives on.

Celery's consumer, when the broker goes away, ``collect``s the connection and then closes it
(``Consumer.on_connection_error_after_connected``), ignoring connection errors only. With
kombu's Redis transport that close can raise ``AttributeError`` and stop the worker
(``scheduling.worker.reconnect``). These tests drive a real kombu connection to a private
Redis into that state, as a worker's consumer holds it (a message delivered and not yet
acknowledged, a BRPOP in flight, a control channel with a fanout queue), and make the same
two calls Celery makes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Queue
from kombu.common import ignore_errors

from scheduling.worker.reconnect import ReconnectStep
from tests.conftest import free_port, wait_for
from tests.scheduling.test_exactly_once import redis_answers

#: What Celery's consumer passes to ``collect`` (``COLLECT_SOCKET_TIMEOUT``).
COLLECT_SOCKET_TIMEOUT = 1.0


def start_redis(processes: Any, port: int, data: Path) -> subprocess.Popen[bytes]:
    """A private Redis keeping its data in ``data`` only when told to (``SAVE``): restarted
    after a ``SAVE``, it holds what it held, as a broker back from an outage does."""
    server = processes.start(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(data)],
        env=dict(os.environ),
        name="redis",
    )  # fmt: skip
    wait_for(lambda: server.poll() is None and redis_answers(port), timeout=30,
             message=f"redis-server on port {port} answers")  # fmt: skip
    return server


@pytest.fixture
def broker(processes: Any, tmp_path: Path) -> Any:
    """A private Redis and a connection to it in the state a worker's consumer holds after
    the broker went away and its connection was collected, the Redis back up."""
    port = free_port()
    server = start_redis(processes, port, tmp_path)
    connection = Connection(
        f"redis://127.0.0.1:{port}/0",
        transport_options={"socket_timeout": 2, "socket_connect_timeout": 1},
    )
    queue = Queue("work", Exchange("work"), "work")
    with connection.Producer() as producer:
        producer.publish({"n": 1}, exchange=queue.exchange, routing_key="work", declare=[queue])
    delivered: list[Any] = []
    channel = connection.default_channel
    consumer = Consumer(channel, [queue], callbacks=[lambda _b, m: delivered.append(m)])
    consumer.qos(prefetch_count=1)
    consumer.consume()
    control = Consumer(
        connection.channel(),
        [Queue("control", Exchange("control", type="fanout"), auto_delete=True)],
        callbacks=[lambda _b, _m: None],
    )
    control.consume()

    def deliver() -> bool:
        with contextlib.suppress(TimeoutError):
            connection.drain_events(timeout=0.5)
        return bool(delivered)

    wait_for(deliver, timeout=10, message="the message is delivered")
    subprocess.run(["redis-cli", "-p", str(port), "SAVE"], check=True, capture_output=True)
    processes.kill(server, signal.SIGKILL)
    server.wait(timeout=10)
    # The consumer asks for the next message: a BRPOP in flight (sending it may fail).
    with contextlib.suppress(redis.ConnectionError):
        channel._brpop_start()
    connection.collect(socket_timeout=COLLECT_SOCKET_TIMEOUT)
    start_redis(processes, port, tmp_path)
    return SimpleNamespace(connection=connection, channel=channel, port=port)


def waiting(port: int) -> int:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
    try:
        return int(client.llen("work"))
    finally:
        client.close()


def test_closing_a_collected_connection_restores_its_messages_and_raises_nothing(
    broker: Any,
) -> None:
    """With ``ReconnectStep`` on the consumer's connection, Celery's close neither raises nor
    drops the message the worker held: it is back in its queue for the next worker."""
    assert waiting(broker.port) == 0
    ReconnectStep(SimpleNamespace()).start(SimpleNamespace(connection=broker.connection))
    ignore_errors(broker.connection, broker.connection.close)
    assert broker.channel.closed
    assert broker.channel.connection is None or broker.channel.connection.client is None
    assert waiting(broker.port) == 1


def test_kombu_alone_still_raises_there(broker: Any) -> None:
    """kombu's own close still fails this way: when it no longer does, ``ReconnectStep`` can
    go (this test failing says so)."""
    with pytest.raises(AttributeError, match="hostname"):
        ignore_errors(broker.connection, broker.connection.close)
