"""The fast Redis path publishes the very messages Celery's send_task would, batch after batch."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db import connection
from django.utils import timezone

from config.celery import app
from scheduling.messages.doorbell import Doorbell
from scheduling.models import Execution, ExecutionStatus, Job, Schedule
from scheduling.scheduler.loop import Dispatcher
from scheduling.scheduler.publisher import Publisher
from tests.conftest import celery_settings

PER_MESSAGE = {"id", "root_id", "correlation_id", "delivery_tag"}


def _bell(execution_id: int, **overrides: Any) -> Doorbell:
    values: dict[str, Any] = {
        "execution_id": execution_id,
        "task_id": str(uuid.uuid4()),
        "task": "scheduling.diagnostics.sleep",
        "args": [],
        "kwargs": {"seconds": 1.5},
        "queue": "celery",
        "priority": None,
        "timeout": 42,
    }
    values.update(overrides)
    return Doorbell(**values)


def _drain(client: redis.Redis, prefix: str) -> list[dict[str, Any]]:
    """Every message in this test's queues (priorities live in their own lists)."""
    messages = []
    for key in client.scan_iter(f"{prefix}celery*"):
        if client.type(key) == b"list":
            messages += [json.loads(raw) for raw in client.lrange(key, 0, -1)]
            client.delete(key)
    return messages


def _strip(message: dict[str, Any]) -> dict[str, Any]:
    """The message without the values that differ per message by design."""
    message = json.loads(json.dumps(message))
    for part in (message["headers"], message["properties"]):
        for key in PER_MESSAGE & part.keys():
            part[key] = "*"
    message["body"] = json.loads(base64.b64decode(message["body"]))
    return message


@pytest.fixture
def redis_prefix(settings: Any) -> Any:
    prefix = f"pub{uuid.uuid4().hex[:8]}:"
    settings.CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
    with celery_settings(
        app,
        broker_url=settings.CELERY_BROKER_URL,
        broker_transport_options={"global_keyprefix": prefix},
    ):
        yield prefix


ARGUMENTS = [
    pytest.param([], {"seconds": 1.5}, id="kwargs"),
    pytest.param([], {}, id="none"),
    pytest.param([1, "two", None, [3.5]], {}, id="args"),
    pytest.param(["quote \" backslash \\ tab \t"], {"ünïcødé": "日本 ✓"}, id="escapes"),
    pytest.param(["x" * 5000], {"nested": {"a": [1, {"b": True}]}}, id="long"),
]


@pytest.mark.parametrize("priority", [None, 5])
@pytest.mark.parametrize(("args", "kwargs"), ARGUMENTS)
def test_fast_path_messages_equal_send_task_messages(
    redis_prefix: str, settings: Any, priority: int | None, args: list[Any], kwargs: dict[str, Any]
) -> None:
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    publisher = Publisher(app)
    bell = _bell(7, priority=priority, args=args, kwargs=kwargs)
    try:
        settings.SCHEDULING_FAST_PUBLISH = False
        assert publisher.publish([bell]) == [7]
        portable = _drain(client, redis_prefix)
        settings.SCHEDULING_FAST_PUBLISH = True
        assert publisher.publish([bell]) == [7]
        fast = _drain(client, redis_prefix)
    finally:
        publisher.close()
    assert len(portable) == len(fast) == 1
    assert _strip(fast[0]) == _strip(portable[0])
    assert fast[0]["headers"]["id"] == fast[0]["properties"]["correlation_id"] == bell.task_id
    assert fast[0]["headers"]["duecourse_execution"] == 7
    assert fast[0]["headers"]["timelimit"] == [52, 42]
    assert fast[0]["headers"]["eta"] is None


def test_fast_path_writes_a_whole_batch(redis_prefix: str, settings: Any) -> None:
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    publisher = Publisher(app)
    try:
        done = publisher.publish([_bell(i) for i in range(1, 1001)])
    finally:
        publisher.close()
    assert done == list(range(1, 1001))
    messages = _drain(client, redis_prefix)
    assert sorted(m["headers"]["duecourse_execution"] for m in messages) == done
    assert len({m["headers"]["id"] for m in messages}) == 1000


FLOOD = 3000


def assert_flood_went_out_once(dispatcher: Dispatcher, client: redis.Redis, prefix: str) -> None:
    """No lane left running; every job claimed once, QUEUED, with exactly one message."""
    assert not [t for t in threading.enumerate() if "duecourse-lane" in t.name]
    assert dispatcher.stats["claimed"] == dispatcher.stats["published"] == FLOOD
    executions = list(Execution.objects.values_list("id", "job_id", "status"))
    assert len(executions) == FLOOD
    assert len({job_id for _, job_id, _ in executions}) == FLOOD
    assert {status for _, _, status in executions} == {ExecutionStatus.QUEUED}
    messages = _drain(client, prefix)
    assert sorted(m["headers"]["duecourse_execution"] for m in messages) == sorted(
        pk for pk, _, _ in executions
    )
    assert len({m["headers"]["id"] for m in messages}) == FLOOD


@pytest.mark.django_db(transaction=True)
def test_a_flood_is_claimed_by_lanes_each_occurrence_once(
    redis_prefix: str, settings: Any, owner: Any
) -> None:
    """Lanes claim and publish a flood side by side: every job once, every message once."""
    now = timezone.now()
    schedule = Schedule.objects.create(owner=owner, interval="PT1H")
    Job.objects.bulk_create(
        [
            Job(
                owner=owner,
                name=f"flood-{i}",
                schedule=schedule,
                task="scheduling.diagnostics.noop",
                next_occurrence_at=now,
                next_due_at=now,
                created_at=now - timedelta(hours=1),
            )
            for i in range(FLOOD)
        ]
    )
    settings.SCHEDULING_FLOOD_LANES = 3
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    dispatcher = Dispatcher(app, batch_size=100)
    lanes_seen: set[str] = set()
    try:
        deadline = time.monotonic() + 60
        while dispatcher.stats["claimed"] < FLOOD and time.monotonic() < deadline:
            dispatcher.tick(now)
            lanes_seen |= {t.name for t in threading.enumerate() if "duecourse-lane" in t.name}
    finally:
        dispatcher.close()
    assert len(lanes_seen) == 3, lanes_seen
    assert_flood_went_out_once(dispatcher, client, redis_prefix)
    assert set(Job.objects.values_list("next_due_at", flat=True)) == {now + timedelta(hours=1)}


def test_the_broker_identity_is_the_redis_servers_run_id(redis_prefix: str, settings: Any) -> None:
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    publisher = Publisher(app)
    try:
        first = publisher.broker_identity()
        assert publisher.publish([_bell(1)]) == [1]
        again = publisher.broker_identity()
    finally:
        publisher.close()
    _drain(client, redis_prefix)
    assert first == again == client.info("server")["run_id"]


@pytest.fixture
def fail_once_on_insert_of(db: Any) -> Any:
    """Make the claim that inserts an execution for the given job fail once, in the database.

    A trigger raises the first time that job's execution row is inserted; a sequence, which
    a rollback does not undo, makes it only the first time. Returns a setter for the job id.
    """
    with connection.cursor() as cursor:
        cursor.execute("CREATE SEQUENCE IF NOT EXISTS test_fault_once")
    yield _install_fault
    # A fresh cursor: the dispatcher closes the connection it saw fail.
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER IF EXISTS test_fault ON scheduling_execution")
        cursor.execute("DROP FUNCTION IF EXISTS test_fault()")
        cursor.execute("DROP SEQUENCE IF EXISTS test_fault_once")


def _install_fault(job_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            CREATE OR REPLACE FUNCTION test_fault() RETURNS trigger AS $$
            BEGIN
                IF NEW.job_id = {int(job_id)} AND nextval('test_fault_once') = 1 THEN
                    RAISE EXCEPTION 'injected fault for job {int(job_id)}';
                END IF;
                RETURN NEW;
            END $$ LANGUAGE plpgsql
            """
        )
        cursor.execute(
            "CREATE TRIGGER test_fault BEFORE INSERT ON scheduling_execution"
            " FOR EACH ROW EXECUTE FUNCTION test_fault()"
        )


@pytest.mark.django_db(transaction=True)
def test_a_lane_that_fails_mid_flood_loses_and_doubles_nothing(
    redis_prefix: str, settings: Any, owner: Any, fail_once_on_insert_of: Any
) -> None:
    """A database error in one lane's claim rolls back that lane's batch only. The other lanes
    claim what is still due (that batch's jobs included), the tick then reports the error and
    backs off, and no lane is left running: every job once, every message once."""
    now = timezone.now()
    schedule = Schedule.objects.create(owner=owner, interval="PT1H")
    jobs = Job.objects.bulk_create(
        [
            Job(
                owner=owner,
                name=f"flood-{i}",
                schedule=schedule,
                task="scheduling.diagnostics.noop",
                # Due one after another, so the faulty job is claimed by a lane, not inline.
                next_occurrence_at=now - timedelta(milliseconds=FLOOD - i),
                next_due_at=now - timedelta(milliseconds=FLOOD - i),
                created_at=now - timedelta(hours=1),
            )
            for i in range(FLOOD)
        ]
    )
    fail_once_on_insert_of(jobs[FLOOD * 2 // 3].pk)
    settings.SCHEDULING_FLOOD_LANES = 3
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    dispatcher = Dispatcher(app, batch_size=100, max_sleep=1.0)
    sleeps = []
    try:
        deadline = time.monotonic() + 60
        while dispatcher.stats["claimed"] < FLOOD and time.monotonic() < deadline:
            sleeps.append(dispatcher.tick(now))
    finally:
        dispatcher.close()
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value FROM test_fault_once")
        assert cursor.fetchone()[0] >= 1, "the fault never fired"
    # How far a tick gets before its deadline depends on the machine: the fault may fire in
    # any of the first ticks, and that one, and only that one, backs off.
    assert sleeps.count(2.0) == 1, f"the failed tick backs off: {sleeps}"
    assert_flood_went_out_once(dispatcher, client, redis_prefix)
