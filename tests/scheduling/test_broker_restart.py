"""A Redis that restarts empty loses its messages; the scheduler notices and publishes again.

Redis gives every server start a new ``run_id``. The scheduler remembers it; when it changes,
every queued execution is published again at once instead of after REQUEUE_AFTER (600 s).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.utils import timezone

from config.celery import app
from scheduling.models import Execution, ExecutionStatus
from scheduling.scheduler.loop import Dispatcher
from scheduling.stages import publishing
from tests.conftest import Processes, celery_settings, free_port, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _start_redis(processes: Processes, port: int) -> Any:
    child = processes.start(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"],
        env={},
        name="redis",
    )  # fmt: skip
    client = redis.Redis(port=port)
    wait_for(lambda: _pings(client), timeout=20, message="private redis answers")
    return child


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


@pytest.fixture
def private_redis_url(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The Celery app points at a Redis of this test's own, on a spare port."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    # Celery reads CELERY_BROKER_URL from the environment before its own configuration.
    monkeypatch.setenv("CELERY_BROKER_URL", url)
    settings.CELERY_BROKER_URL = url
    with celery_settings(app, broker_url=url, broker_transport_options={}):
        yield url


def test_queued_executions_are_published_again_when_redis_restarted_empty(
    processes: Processes, make_job: Any, private_redis_url: str
) -> None:
    port = int(private_redis_url.rsplit(":", 1)[1].split("/")[0])
    client = redis.Redis(port=port)
    server = _start_redis(processes, port)
    make_job(every="PT1H", now=timezone.now())
    dispatcher = Dispatcher(app)
    try:
        dispatcher.tick()
        execution = Execution.objects.get()
        assert execution.status == ExecutionStatus.QUEUED
        assert client.llen("celery") == 1

        processes.kill(server, signal.SIGKILL)
        server.wait(timeout=10)
        _start_redis(processes, port)
        assert client.llen("celery") == 0

        dispatcher.tick()
        dispatcher.tick()
        assert client.llen("celery") == 1
        execution.refresh_from_db()
        assert execution.status == ExecutionStatus.QUEUED
        assert publishing.reclaim_for_publish(now=timezone.now(), limit=10) == []
    finally:
        dispatcher.close()
