"""A backlog behind a slow worker costs few extra messages; a lost queue is still recovered.

Two hundred executions are claimed at once and wait in one Redis queue in front of a single
worker process that needs a little time for each. ``SCHEDULING_REQUEUE_AFTER`` (1.5 s) is
under a third of the time the backlog takes to drain (about 5 s), so age alone would call most
waiting rows lost. The scheduler must not believe it: a row that is merely waiting keeps its
one message, and the whole backlog costs at most 10 % extra messages. When the queue really is
emptied behind the scheduler's back (its Redis list deleted mid-way), every execution still
waiting is published again within REQUEUE_AFTER plus a tick, and every one runs exactly once.

The worker and the scheduler start side by side and the jobs are made once the worker
consumes, so the backlog's first seconds are a worker at work, not one starting up.

Messages published are counted from the scheduler's log (``dispatch.claimed`` for first
messages, one ``execution.republished`` line per extra one); extra messages that reached a
worker are counted by ``Execution.duplicates``.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from django.db import transaction
from django.db.models import Count, Sum
from django.utils import timezone

from scheduling.models import Attempt, AttemptOutcome, Execution, ExecutionStatus, Job, Schedule
from tests.conftest import Processes, scheduler_command, wait_for
from tests.factories import create_job
from tests.scheduling.test_worker_lifecycle import SLOW, start_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Once 400 executions, REQUEUE_AFTER 3 s and a tick of 1 s: the backlog is halved and both
# lengths with it, so the drain still lasts more than three times REQUEUE_AFTER, the bounds
# below are the same fractions of BACKLOG, and the republish deadline is shorter.
BACKLOG = 200
SLEEP = "scheduling.diagnostics.sleep"
TASK_SECONDS = 0.02  # with the history's own cost, 200 take about 5 s on one process
REQUEUE_AFTER = 1.5
TICK = 0.5  # SCHEDULING_MAX_SLEEP
CLAIMED = re.compile(r"dispatch\.claimed jobs=\d+ executions=(\d+)")
REPUBLISHED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ scheduling execution\.republished "
    r"execution=(\d+) status=queued",
    re.MULTILINE,
)


def backlog(owner: Any, count: int = BACKLOG) -> list[int]:
    """``count`` hourly jobs due now, one occurrence each, every one a short sleep.

    One job is created by the service; the rest are copies of its row in one bulk insert. All
    are committed together, so a scheduler already running claims them at once.
    """
    with transaction.atomic():
        return _backlog(owner, count)


def _backlog(owner: Any, count: int) -> list[int]:
    now = timezone.now()
    schedule = Schedule.objects.create(owner=owner, name="backlog", interval="PT1H")
    template = create_job(
        owner=owner,
        name="backlog-0",
        task=SLEEP,
        kwargs={"seconds": TASK_SECONDS},
        schedule=schedule,
        now=now,
    )
    Job.objects.bulk_create(
        Job(
            owner=owner,
            name=f"backlog-{i}",
            schedule=schedule,
            task=SLEEP,
            kwargs=template.kwargs,
            overlap=template.overlap,
            misfire=template.misfire,
            timeout=template.timeout,
            next_due_at=template.next_due_at,
            next_occurrence_at=template.next_occurrence_at,
            created_at=now,
        )
        for i in range(1, count)
    )
    return list(Job.objects.filter(schedule=schedule).values_list("pk", flat=True))


def backlog_env(process_env: dict[str, str]) -> dict[str, str]:
    return {
        **process_env,
        "SCHEDULING_REQUEUE_AFTER": str(REQUEUE_AFTER),
        "SCHEDULING_MAX_SLEEP": str(TICK),
        "SCHEDULING_STALE_AFTER": "30",
    }


def completed(count: int) -> Any:
    return lambda: Execution.objects.filter(status=ExecutionStatus.COMPLETED).count() >= count


def messages_published(scheduler_log: str) -> tuple[int, int]:
    """(first messages, extra messages) the scheduler published, from its log."""
    first = sum(int(n) for n in CLAIMED.findall(scheduler_log))
    return first, len(REPUBLISHED.findall(scheduler_log))


def republished_at(scheduler_log: str) -> dict[int, list[datetime]]:
    """When each execution's message was published again (the scheduler logs in UTC)."""
    found: dict[int, list[datetime]] = {}
    for stamp, execution in REPUBLISHED.findall(scheduler_log):
        at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
        found.setdefault(int(execution), []).append(at)
    return found


def broker_is_empty(env: dict[str, str]) -> bool:
    """No message waits in this test's queue and none is delivered but unacknowledged."""
    client = redis.Redis.from_url(env["CELERY_BROKER_URL"])
    prefix = env["CELERY_REDIS_KEY_PREFIX"]
    return client.llen(f"{prefix}celery") == 0 and client.hlen(f"{prefix}unacked") == 0


def assert_each_ran_once(job_ids: list[int]) -> None:
    """Every job has one execution, completed by its single attempt, counted once."""
    executions = Execution.objects.filter(job_id__in=job_ids)
    assert executions.count() == len(job_ids)
    statuses = Counter(executions.values_list("status", flat=True))
    assert statuses == {ExecutionStatus.COMPLETED: len(job_ids)}, statuses
    attempts = Counter(
        Attempt.objects.filter(execution__job_id__in=job_ids).values_list("outcome", flat=True)
    )
    assert attempts == {AttemptOutcome.COMPLETED: len(job_ids)}, attempts
    assert not executions.filter(retry_count__gt=0).exists()
    counts = Counter(Job.objects.filter(pk__in=job_ids).values_list("execute_count", flat=True))
    assert counts == {1: len(job_ids)}, counts


def test_a_backlog_behind_a_slow_worker_costs_at_most_a_tenth_more_messages(
    owner: Any, processes: Processes, process_env: dict[str, str]
) -> None:
    env = backlog_env(process_env)
    scheduler = processes.start(scheduler_command(), env=env, name="scheduler")
    worker = start_worker(processes, env, "slow", concurrency=1)
    job_ids = backlog(owner)

    wait_for(completed(BACKLOG), timeout=SLOW * 3, interval=0.5, message="the backlog drains")
    wait_for(lambda: broker_is_empty(env), timeout=SLOW, message="no message is left")
    assert scheduler.poll() is None and worker.poll() is None

    assert_each_ran_once(job_ids)
    first, extra = messages_published(processes.log_of(scheduler))
    duplicates = Execution.objects.aggregate(n=Sum("duplicates"))["n"]
    assert first == BACKLOG
    assert extra <= BACKLOG // 10, f"{extra} extra messages for {BACKLOG} executions"
    assert duplicates <= BACKLOG // 10, f"{duplicates} duplicate messages reached the worker"


def test_a_queue_emptied_behind_the_scheduler_s_back_is_published_again(
    owner: Any, processes: Processes, process_env: dict[str, str]
) -> None:
    """The queue's Redis list is deleted while most of the backlog still waits in it."""
    env = backlog_env(process_env)
    scheduler = processes.start(scheduler_command(), env=env, name="scheduler")
    worker = start_worker(processes, env, "slow", concurrency=1)
    job_ids = backlog(owner)
    wait_for(completed(BACKLOG // 5), timeout=SLOW * 2, interval=0.2, message="a fifth is done")

    client = redis.Redis.from_url(env["CELERY_BROKER_URL"])
    assert client.delete(f"{env['CELERY_REDIS_KEY_PREFIX']}celery") == 1
    deleted_at = timezone.now()
    lost = set(Execution.objects.filter(status=ExecutionStatus.QUEUED).values_list("pk", flat=True))
    assert len(lost) > BACKLOG // 2, "most of the backlog should still be waiting"

    wait_for(completed(BACKLOG), timeout=SLOW * 3, interval=0.5, message="the backlog drains")
    wait_for(lambda: broker_is_empty(env), timeout=SLOW, message="no message is left")
    assert scheduler.poll() is None and worker.poll() is None

    assert_each_ran_once(job_ids)
    again = republished_at(processes.log_of(scheduler))
    since = deleted_at - timedelta(seconds=1)  # log stamps are to the millisecond
    resent = {pk: min(t for t in again[pk] if t >= since) for pk in lost
              if any(t >= since for t in again.get(pk, []))}  # fmt: skip
    # The one message in the worker's hands at the deletion (prefetch 1) was not lost.
    assert len(lost - set(resent)) <= 1, f"{len(lost - set(resent))} lost messages not resent"
    # A second of slack for this loaded machine, on top of the promise.
    latest = max(resent.values()) - deleted_at
    assert latest <= timedelta(seconds=REQUEUE_AFTER + TICK + 1), latest
    per_job = Execution.objects.values("job_id").annotate(n=Count("id")).filter(n__gt=1)
    assert not per_job.exists()
    # Only the lost messages were sent again (and a tenth more at most).
    first, extra = messages_published(processes.log_of(scheduler))
    assert first == BACKLOG
    assert extra <= len(lost) + BACKLOG // 10, f"{extra} extra messages for {len(lost)} lost"
