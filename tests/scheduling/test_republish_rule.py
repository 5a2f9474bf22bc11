"""When a queued execution's message counts as lost, and what a row the claim cannot use gets.

A specification on a fixed clock, with the workers played by the verbs they call: a QUEUED
row is published again only on evidence that its message is gone (overtaken, a stalled queue,
an empty broker queue), never for its age alone, and each row's delay doubles. Rows written
behind the model (times out of range, arguments of the wrong JSON type) are isolated with an
error naming the field, and the scheduler reaps nothing until workers had a full STALE_AFTER
to beat again after an outage.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import DatabaseError, connection

from config.celery import app
from scheduling.ledger import pgtimes
from scheduling.models import Execution, ExecutionStatus, Job, JobStatus
from scheduling.scheduler import loop
from scheduling.scheduler.loop import Dispatcher
from scheduling.stages import attempts, claims, publishing

pytestmark = pytest.mark.django_db

SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
REQUEUE_AFTER = 10 * MINUTE  # the documented default
MakeJob = Callable[..., Job]


@pytest.fixture(autouse=True)
def default_knobs(settings: Any) -> None:
    """The documented defaults, whatever the environment says."""
    for name in [n for n in dir(django_settings) if n.startswith("SCHEDULING")]:
        delattr(settings, name)


def queued(make_job: MakeJob, now: datetime, count: int, *, at: datetime) -> list[int]:
    """``count`` executions claimed at ``now`` whose messages reached the broker at ``at``."""
    jobs = [make_job(every="PT1H") for _ in range(count)]
    claims.claim_due_jobs(now=now, limit=100)
    ids = [Execution.objects.get(job=job).pk for job in jobs]
    publishing.mark_queued(execution_ids=ids, now=at)
    return ids


def started(execution_id: int, at: datetime) -> None:
    assert attempts.start_execution(execution_id=execution_id, worker="w1", pid=1, now=at)


def reclaim(at: datetime, depth: int | None = None) -> list[int]:
    """One tick's republish step, its publish recorded; the broker reports ``depth``."""
    bells = publishing.reclaim_for_publish(
        now=at, limit=100, queue_depth=None if depth is None else (lambda queue, pri: depth)
    )
    publishing.mark_queued(execution_ids=[b.execution_id for b in bells], now=at)
    return sorted(b.execution_id for b in bells)


def test_a_backlog_that_moves_is_never_published_again(make_job: MakeJob, now: datetime) -> None:
    first, *rest = queued(make_job, now, 4, at=now)
    for i, execution_id in enumerate(rest, 1):
        started(execution_id, now + i * 4 * MINUTE)  # one start every four minutes
    # Older than REQUEUE_AFTER, but its queue moves and nothing published later has started.
    assert reclaim(now + 13 * MINUTE) == []
    assert reclaim(now + 13 * MINUTE, depth=5) == []
    assert Execution.objects.get(pk=first).status == ExecutionStatus.QUEUED


def test_a_row_overtaken_by_a_later_message_is_published_again(
    make_job: MakeJob, now: datetime
) -> None:
    (lost,) = queued(make_job, now, 1, at=now)
    (later,) = queued(make_job, now, 1, at=now + 5 * SECOND)
    started(later, now + 6 * SECOND)
    assert reclaim(now + REQUEUE_AFTER) == []  # overtaken, but not yet older than that
    assert reclaim(now + REQUEUE_AFTER + SECOND) == [lost]


def test_a_queue_where_nothing_starts_is_published_again_with_a_doubling_delay(
    make_job: MakeJob, now: datetime
) -> None:
    (waiting,) = queued(make_job, now, 1, at=now)
    first = now + REQUEUE_AFTER + SECOND
    assert reclaim(first - SECOND) == []
    assert reclaim(first) == [waiting]
    # It had waited ten minutes before this publish: it waits as long again, then twice that.
    second = first + (first - now)
    assert reclaim(second - SECOND) == []
    assert reclaim(second) == [waiting]
    third = second + (second - now)
    assert reclaim(third - SECOND) == []
    assert reclaim(third) == [waiting]


def test_an_empty_broker_queue_is_evidence_of_loss(make_job: MakeJob, now: datetime) -> None:
    lost, busy = queued(make_job, now, 2, at=now)
    started(busy, now + 9 * MINUTE)  # the queue moves
    assert reclaim(now + REQUEUE_AFTER + SECOND, depth=3) == []
    assert reclaim(now + REQUEUE_AFTER + SECOND, depth=0) == [lost]


def test_a_row_whose_arguments_have_the_wrong_type_is_failed_instead_of_sent(
    make_job: MakeJob, now: datetime
) -> None:
    (execution_id,) = queued(make_job, now, 1, at=now)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE scheduling_job SET args = '{\"a\": 1}'::jsonb")
    assert reclaim(now + REQUEUE_AFTER + SECOND) == []
    row = Execution.objects.get(pk=execution_id)
    assert row.status == ExecutionStatus.FAILED
    assert row.last_error.startswith("args: must be a JSON list")


@pytest.mark.parametrize(
    ("task", "reason"),
    [
        ("celery.backend_cleanup", "is registered but not schedulable"),
        ("celery.nowhere", "is not a registered Celery task"),
    ],
)
def test_a_row_whose_task_is_not_schedulable_is_failed_as_the_claim_fails_a_job(
    make_job: MakeJob, now: datetime, task: str, reason: str
) -> None:
    """The same refusal, word for word, whether the job row or the execution row names it."""
    bad, good = queued(make_job, now, 2, at=now)
    refused_job = make_job(every="PT1H")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE scheduling_execution SET task = %s WHERE id = %s", [task, bad])
        cursor.execute("UPDATE scheduling_job SET task = %s WHERE id = %s", [task, refused_job.pk])
    claims.claim_due_jobs(now=now + REQUEUE_AFTER, limit=100)
    claimed = Execution.objects.get(job=refused_job)

    # Nothing on the queue has started since: both rows count as lost; only the good one goes.
    assert reclaim(now + REQUEUE_AFTER + SECOND) == [good]
    row = Execution.objects.get(pk=bad)
    assert row.status == claimed.status == ExecutionStatus.FAILED
    assert row.last_error == claimed.last_error == f"task: {task!r} {reason}" + (
        " (declare it with @schedulable_task,"
        " or a Django task with @task_options(schedulable=True))"
        if "registered but" in reason
        else ""
    )


@pytest.mark.parametrize(
    ("column", "value", "field"),
    [
        ("next_occurrence_at", "9999-12-31 23:59:59.999999+00", "next_occurrence_at"),
        ("next_occurrence_at", "infinity", "next_occurrence_at"),
        ("args", '{"to": "someone"}', "args"),
        ("kwargs", '["someone"]', "kwargs"),
    ],
)
def test_a_row_the_claim_cannot_use_is_isolated_naming_the_field(
    make_job: MakeJob, now: datetime, column: str, value: str, field: str
) -> None:
    healthy = make_job(every="PT1H")
    poison = make_job(every="PT1H")
    cast = "jsonb" if field in ("args", "kwargs") else "timestamptz"
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE scheduling_job SET {column} = %s::{cast} WHERE id = %s", [value, poison.pk]
        )

    bells = claims.claim_due_jobs(now=now, limit=100).bells

    assert [b.execution_id for b in bells] == [Execution.objects.get(job=healthy).pk]
    job = Job.objects.get(pk=poison.pk)
    failed = Execution.objects.filter(job=poison, status=ExecutionStatus.FAILED).first()
    if field == "next_occurrence_at":
        assert job.status == JobStatus.PAUSED and job.pause_reason.startswith(f"{field}: ")
        # Its times are kept; both read as the end of Python's range.
        assert pgtimes.is_out_of_range(job.next_occurrence_at)
    else:
        assert failed is not None and failed.last_error.startswith(f"{field}: must be a JSON")
        assert job.status == JobStatus.ACTIVE  # the next occurrence fails the same way, alone


@pytest.mark.django_db(transaction=True)  # a failed tick closes the connection
def test_no_reaping_until_workers_had_stale_after_to_beat_again(
    make_job: MakeJob, now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduler just started, or back from a database outage, waits STALE_AFTER first."""
    (execution_id,) = queued(make_job, now, 1, at=now)
    started(execution_id, now)
    later = now + 2 * MINUTE  # the heartbeat is stale (STALE_AFTER is 60 s)
    clock = [time.monotonic()]
    dispatcher = Dispatcher(app, max_sleep=0, clock=lambda: clock[0])
    try:
        dispatcher.tick(later)
        assert Execution.objects.get(pk=execution_id).status == ExecutionStatus.RUNNING

        clock[0] += 61
        with monkeypatch.context() as patch:  # the next tick meets a database that is away
            patch.setattr(loop.selectors, "scheduler_probe", _raise_database_error)
            dispatcher.tick(later)
        dispatcher.tick(later)
        assert Execution.objects.get(pk=execution_id).status == ExecutionStatus.RUNNING

        clock[0] += 61
        dispatcher.tick(later)
        assert Execution.objects.get(pk=execution_id).status == ExecutionStatus.RETRY
    finally:
        dispatcher.close()


def _raise_database_error(**_: Any) -> Any:
    raise DatabaseError("the server closed the connection")
