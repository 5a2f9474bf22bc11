"""A job's occurrences waiting for a running slot are bounded (``SCHEDULING_MAX_WAITING_PER_JOB``).

Under overlap ``allow``, a job is claimed at every occurrence whatever runs; with its running
limit (or its owner's) reached, each of those executions waits in the ledger, one row per
occurrence, and behind a limit that never frees up they once piled up without end. Once a job
has as many waiting as the bound, the claim records its next occurrence as SKIPPED with the
reason, sends no message for it, and claims as before when a waiting one has gone. Runs on
PostgreSQL (where the plain claim is planned in the locking statement) and on SQLite.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings

from scheduling import checks
from scheduling.models import Execution, ExecutionStatus, Job
from scheduling.stages import attempts, claims, limits, waiting

pytestmark = [pytest.mark.django_db, pytest.mark.specification]

MINUTE = timedelta(minutes=1)
REASON = (
    "skipped: at least 2 occurrences of this job already wait for a running slot "
    "(the bound, SCHEDULING_MAX_WAITING_PER_JOB)"
)


@pytest.fixture(autouse=True)
def bound_of_two(settings: Any) -> None:
    for name in [n for n in dir(django_settings) if n.startswith("SCHEDULING")]:
        delattr(settings, name)
    settings.SCHEDULING_MAX_WAITING_PER_JOB = 2


def claim_and_start(job: Job, at: datetime) -> list[int]:
    """Claim at ``at`` and let a worker try to start every execution the claim published."""
    bells = claims.claim_due_jobs(now=at, limit=100).bells
    for bell in bells:
        attempts.start_execution(execution_id=bell.execution_id, worker="w1", pid=1, now=at)
    return [bell.execution_id for bell in bells]


def statuses(job: Job) -> list[str]:
    return list(job.executions.order_by("scheduled_for").values_list("status", flat=True))


def test_past_the_bound_an_occurrence_is_recorded_skipped_with_the_reason_and_not_sent(
    make_job: Any, now: datetime
) -> None:
    job = make_job(every="PT1M", overlap="allow", max_running=1)
    for i in range(3):
        assert len(claim_and_start(job, now + i * MINUTE)) == 1
    assert statuses(job) == ["running", "waiting", "waiting"]
    # The second claim past the bound plans in the locking statement on PostgreSQL (the
    # interval is known by then); the first in Python: both paths keep the bound.
    for i in (3, 4):
        assert claim_and_start(job, now + i * MINUTE) == []
    assert statuses(job) == ["running", "waiting", "waiting", "skipped", "skipped"]
    for skipped in job.executions.filter(status=ExecutionStatus.SKIPPED):
        assert skipped.last_error == REASON
        assert skipped.finished_at == skipped.created_at and skipped.queued_at is None
    assert Job.objects.get(pk=job.pk).next_due_at == now + 5 * MINUTE


def test_once_a_waiting_run_has_gone_the_next_occurrence_is_claimed_as_before(
    make_job: Any, now: datetime
) -> None:
    job = make_job(every="PT1M", overlap="allow", max_running=1)
    for i in range(4):
        claim_and_start(job, now + i * MINUTE)
    assert statuses(job) == ["running", "waiting", "waiting", "skipped"]
    running = job.executions.get(status=ExecutionStatus.RUNNING)
    assert attempts.complete_execution(execution_id=running.pk, now=now + 4 * MINUTE)
    [released] = limits.release_waiting(now=now + 4 * MINUTE, limit=10)
    assert len(claims.claim_due_jobs(now=now + 4 * MINUTE, limit=100).bells) == 1
    assert Execution.objects.get(pk=released).status == ExecutionStatus.PENDING
    assert statuses(job) == ["completed", "pending", "waiting", "skipped", "pending"]


def test_missed_occurrences_caught_up_past_the_bound_are_each_recorded_skipped(
    make_job: Any, now: datetime
) -> None:
    job = make_job(every="PT1M", overlap="allow", misfire="catch_up", max_running=1)
    for i in range(3):
        claim_and_start(job, now + i * MINUTE)
    back = now + 6 * MINUTE + 30 * (MINUTE / 60)
    assert claim_and_start(job, back) == []
    assert statuses(job) == ["running", "waiting", "waiting", *["skipped"] * 4]
    assert set(
        job.executions.filter(status=ExecutionStatus.SKIPPED).values_list("last_error", flat=True)
    ) == {REASON}


def test_a_job_whose_overlap_holds_its_run_is_not_bounded_by_backfilled_waiting_rows(
    make_job: Any, now: datetime
) -> None:
    job = make_job(every="PT1M", overlap="forbid")
    for i in range(1, 4):
        Execution.objects.create(
            job=job, task=job.task, scheduled_for=now - i * MINUTE,
            status=ExecutionStatus.WAITING,
        )
    assert len(claims.claim_due_jobs(now=now, limit=100).bells) == 1
    assert job.executions.get(scheduled_for=now).status == ExecutionStatus.PENDING


def test_the_bound_names_its_setting_in_the_reason() -> None:
    assert waiting.note(1000) == (
        "skipped: at least 1,000 occurrences of this job already wait for a running slot "
        "(the bound, SCHEDULING_MAX_WAITING_PER_JOB)"
    )


@pytest.mark.parametrize("value", [0, -1, "many", 2.5])
def test_a_bound_out_of_range_is_refused_by_the_system_checks(settings: Any, value: Any) -> None:
    settings.SCHEDULING_MAX_WAITING_PER_JOB = value
    [message] = checks.check_settings()
    assert message.id == "scheduling.E008"
    assert message.msg.startswith(f"SCHEDULING_MAX_WAITING_PER_JOB = {value!r} ")
    assert message.msg.endswith("it accepts a whole number from 1 to 1,000,000")


def test_the_reason_states_the_bound_as_at_least_when_more_than_the_bound_wait(
    make_job: Any, now: datetime
) -> None:
    job = make_job(every="PT1M", overlap="allow", max_running=1)
    for i in range(1, 6):  # five waiting, past a bound of two (retries may put them there)
        Execution.objects.create(
            job=job, task=job.task, scheduled_for=now - i * MINUTE,
            status=ExecutionStatus.WAITING,
        )
    assert claim_and_start(job, now) == []
    skipped = job.executions.get(scheduled_for=now)
    assert skipped.status == ExecutionStatus.SKIPPED
    assert skipped.last_error.startswith("skipped: at least 2 occurrences of this job")
