"""Claims as a specification: which occurrences become executions, and when.

Every test drives ``claims.claim_due_jobs`` with an explicit ``now``; no broker is involved
(a claim returns the doorbells to publish). Workers are played by the service verbs they call.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection, transaction

from scheduling.messages.doorbell import Doorbell
from scheduling.models import (
    EXECUTION_UNFINISHED,
    AttemptOutcome,
    Execution,
    ExecutionStatus,
    Job,
    JobStatus,
    Overlap,
    Schedule,
)
from scheduling.stages import (
    attempts,
    claims,
    controls,
    liveness,
    plain_claims,
    publishing,
    selectors,
)
from scheduling.timing import schedules
from tests.tasktable_app.models import Chore

pytestmark = [pytest.mark.django_db, pytest.mark.specification]

NOOP = "scheduling.diagnostics.noop"
SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
MakeJob = Callable[..., Job]


@pytest.fixture(autouse=True)
def default_knobs(settings: Any) -> None:
    """The documented defaults, whatever the environment says."""
    for name in [n for n in dir(django_settings) if n.startswith("SCHEDULING")]:
        delattr(settings, name)


def claim(at: datetime, limit: int = 1000) -> list[Doorbell]:
    return claims.claim_due_jobs(now=at, limit=limit).bells


def run(execution_id: int, at: datetime) -> None:
    """A worker takes the execution and finishes it successfully."""
    assert attempts.start_execution(execution_id=execution_id, worker="w1", pid=1, now=at)
    assert attempts.complete_execution(execution_id=execution_id, now=at)


def history(job: Job) -> list[tuple[datetime, str]]:
    return list(
        Execution.objects.filter(job=job)
        .order_by("scheduled_for")
        .values_list("scheduled_for", "status")
    )


def fresh(job: Job) -> Job:
    job.refresh_from_db()
    return job


# --- one occurrence, one execution ----------------------------------------------------------


def test_due_job_gets_exactly_one_pending_execution_and_advances(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1M", args=[1, "a"], kwargs={"k": 2}, queue="reports", timeout=30)
    bells = claim(now)
    execution = Execution.objects.get(job=job)
    assert execution.status == ExecutionStatus.PENDING
    assert execution.scheduled_for == now
    assert execution.task == NOOP
    assert bells == [
        Doorbell(
            execution_id=execution.pk,
            task_id=str(execution.task_id),
            task=NOOP,
            args=[1, "a"],
            kwargs={"k": 2},
            queue="reports",
            priority=None,
            timeout=30,
        )
    ]
    job = fresh(job)
    assert job.next_occurrence_at == now + MINUTE
    assert job.next_due_at == now + MINUTE
    assert job.current_execution_id == execution.pk


@pytest.mark.parametrize("overlap", Overlap.values)
def test_claiming_twice_at_the_same_moment_creates_nothing_more(
    make_job: MakeJob, now: datetime, overlap: str
) -> None:
    job = make_job(every="PT1M", overlap=overlap)
    assert len(claim(now)) == 1
    assert claim(now) == []
    assert claim(now + 30 * SECOND) == []
    assert history(job) == [(now, ExecutionStatus.PENDING)]


def test_job_not_yet_due_is_not_claimed(make_job: MakeJob, now: datetime) -> None:
    job = make_job(every="PT1M", start=now + 5 * MINUTE)
    assert claim(now + 5 * MINUTE - SECOND) == []
    assert history(job) == []
    assert len(claim(now + 5 * MINUTE)) == 1


def test_claim_takes_at_most_the_limit_oldest_first(make_job: MakeJob, now: datetime) -> None:
    late = make_job(every="PT1M", start=now + MINUTE)
    early = [make_job(every="PT1M") for _ in range(3)]
    bells = claim(now + MINUTE, limit=2)
    claimed = set(
        Execution.objects.filter(pk__in=[b.execution_id for b in bells]).values_list(
            "job_id", flat=True
        )
    )
    assert len(bells) == 2
    assert claimed < {job.pk for job in early}
    assert history(late) == []


# --- misfire after downtime -------------------------------------------------------------------


def drain(job: Job, at: datetime) -> int:
    """Claim at ``at`` until nothing more comes, finishing each execution; count the claims."""
    rounds = 0
    while bells := claim(at):
        rounds += 1
        assert rounds < 50
        for bell in bells:
            run(bell.execution_id, at)
    return rounds


def test_catch_up_runs_every_missed_occurrence_one_after_another(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1M", misfire="catch_up")
    back = now + 10 * MINUTE + 30 * SECOND  # the scheduler was down for ten intervals
    [first] = claim(back)
    assert claim(back) == []  # overlap forbidden: the next one waits for this one
    run(first.execution_id, back)
    assert drain(job, back) == 10
    assert history(job) == [(now + i * MINUTE, ExecutionStatus.COMPLETED) for i in range(11)]
    assert fresh(job).next_due_at == now + 11 * MINUTE


def test_catch_up_with_overlap_allowed_creates_the_missed_occurrences_at_once(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1M", misfire="catch_up", overlap="allow")
    back = now + 10 * MINUTE + 30 * SECOND
    assert len(claim(back)) == 11
    assert claim(back) == []
    assert history(job) == [(now + i * MINUTE, ExecutionStatus.PENDING) for i in range(11)]
    assert fresh(job).next_due_at == now + 11 * MINUTE


def test_catch_up_with_overlap_allowed_is_capped_per_claim(
    make_job: MakeJob, now: datetime, settings: Any
) -> None:
    settings.SCHEDULING_CATCH_UP_LIMIT = 4
    job = make_job(every="PT1M", misfire="catch_up", overlap="allow")
    back = now + 10 * MINUTE + 30 * SECOND
    assert [len(claim(back)) for _ in range(4)] == [4, 4, 3, 0]
    assert [at for at, _ in history(job)] == [now + i * MINUTE for i in range(11)]


def test_coalesce_runs_once_for_all_missed_then_waits_for_the_next_slot(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1M", misfire="coalesce")
    back = now + 10 * MINUTE + 30 * SECOND
    assert drain(job, back) == 1
    assert history(job) == [(now, ExecutionStatus.COMPLETED)]
    assert fresh(job).next_due_at == now + 11 * MINUTE
    assert len(claim(now + 11 * MINUTE)) == 1


def test_skip_records_the_gap_and_waits_for_the_next_slot(make_job: MakeJob, now: datetime) -> None:
    job = make_job(every="PT10M", misfire="skip")
    back = now + 25 * MINUTE
    assert claim(back) == []
    assert claim(back) == []
    skipped = Execution.objects.get(job=job)
    assert (skipped.scheduled_for, skipped.status) == (now, ExecutionStatus.SKIPPED)
    assert skipped.finished_at == back
    assert "skipped by the misfire policy" in skipped.last_error
    job = fresh(job)
    assert job.next_due_at == now + 30 * MINUTE
    assert job.current_execution_id is None
    assert len(claim(now + 30 * MINUTE)) == 1


def test_skip_runs_the_occurrence_that_is_on_time(make_job: MakeJob, now: datetime) -> None:
    job = make_job(every="PT1M", misfire="skip")
    back = now + 10 * MINUTE + 30 * SECOND
    assert len(claim(back)) == 1
    assert history(job) == [
        (now, ExecutionStatus.SKIPPED),
        (now + 10 * MINUTE, ExecutionStatus.PENDING),
    ]


@pytest.mark.parametrize("misfire", ["catch_up", "coalesce", "skip"])
def test_a_claim_within_the_grace_runs_the_occurrence_under_every_policy(
    make_job: MakeJob, now: datetime, misfire: str
) -> None:
    job = make_job(every="PT1M", misfire=misfire)
    assert len(claim(now + 59 * SECOND)) == 1
    assert history(job) == [(now, ExecutionStatus.PENDING)]


# --- overlap ----------------------------------------------------------------------------------


def test_forbid_overlap_next_occurrence_waits_for_the_unfinished_one(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1M", overlap="forbid")
    [first] = claim(now)
    assert claim(now + 90 * SECOND) == []
    assert attempts.start_execution(
        execution_id=first.execution_id, worker="w1", pid=1, now=now + 95 * SECOND
    )
    assert claim(now + 100 * SECOND) == []
    assert attempts.complete_execution(execution_id=first.execution_id, now=now + 110 * SECOND)
    assert fresh(job).current_execution_id is None
    [second] = claim(now + 110 * SECOND)  # its occurrence is already past: claimed at once
    assert Execution.objects.get(pk=second.execution_id).scheduled_for == now + MINUTE
    assert fresh(job).next_occurrence_at == now + 2 * MINUTE


def test_forbid_overlap_a_failed_execution_releases_the_job(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1M", max_retries=0)
    [bell] = claim(now)
    attempts.start_execution(execution_id=bell.execution_id, worker="w1", pid=1, now=now)
    status = attempts.fail_attempt(
        execution_id=bell.execution_id, error="boom", outcome=AttemptOutcome.FAILED, now=now
    )
    assert status == ExecutionStatus.FAILED
    assert fresh(job).current_execution_id is None
    assert len(claim(now + MINUTE)) == 1


def test_allow_overlap_lets_several_executions_run_at_once(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1M", overlap="allow")
    for i in range(3):
        assert len(claim(now + i * MINUTE)) == 1
    attempts.start_execution(
        execution_id=Execution.objects.get(job=job, scheduled_for=now).pk,
        worker="w1",
        pid=1,
        now=now + 2 * MINUTE,
    )
    unfinished = Execution.objects.filter(job=job, status__in=EXECUTION_UNFINISHED)
    assert unfinished.count() == 3
    assert fresh(job).current_execution_id is None


# --- one-off and window -----------------------------------------------------------------------


def test_one_off_job_runs_once_and_becomes_completed(make_job: MakeJob, now: datetime) -> None:
    job = make_job(at=now + 30 * MINUTE)
    assert claim(now + 29 * MINUTE) == []
    assert len(claim(now + 30 * MINUTE)) == 1
    job = fresh(job)
    assert job.status == JobStatus.COMPLETED
    assert job.next_due_at is None
    run(job.current_execution_id, now + 31 * MINUTE)
    assert claim(now + timedelta(days=3)) == []
    assert history(job) == [(now + 30 * MINUTE, ExecutionStatus.COMPLETED)]
    assert fresh(job).execute_count == 1


def test_one_off_whose_instant_already_passed_runs_once_at_once(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(at=now - timedelta(hours=2))
    assert len(claim(now)) == 1
    assert claim(now + timedelta(days=1)) == []
    assert history(job) == [(now - timedelta(hours=2), ExecutionStatus.PENDING)]
    assert fresh(job).status == JobStatus.COMPLETED


def test_job_past_its_end_becomes_completed_and_never_fires_again(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1M", overlap="allow", end=now + 2 * MINUTE + 30 * SECOND)
    for i in range(3):
        assert len(claim(now + i * MINUTE)) == 1
    job = fresh(job)
    assert job.status == JobStatus.COMPLETED
    assert job.next_due_at is None
    for later in (now + 3 * MINUTE, now + timedelta(days=30)):
        assert claim(later) == []
    assert [at for at, _ in history(job)] == [now, now + MINUTE, now + 2 * MINUTE]


def test_job_whose_end_passed_while_the_scheduler_was_away_completes(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1M", misfire="skip", end=now + 5 * MINUTE)
    assert claim(now + timedelta(hours=1)) == []
    assert fresh(job).status == JobStatus.COMPLETED
    assert history(job) == [(now, ExecutionStatus.SKIPPED)]


# --- pause and resume -------------------------------------------------------------------------


def test_paused_job_never_fires(make_job: MakeJob, now: datetime) -> None:
    job = make_job(every="PT1M")
    assert controls.pause_job(job=job, now=now)
    for later in (now, now + 5 * MINUTE, now + timedelta(days=2)):
        assert claim(later) == []
    assert history(job) == []
    assert fresh(job).status == JobStatus.PAUSED


@pytest.mark.parametrize(
    ("misfire", "pending", "skipped"),
    [
        ("catch_up", [0, 1, 2, 3, 4, 5], []),
        ("coalesce", [0], []),
        ("skip", [5], [0]),
    ],
)
def test_resumed_job_follows_its_misfire_policy(
    make_job: MakeJob, now: datetime, misfire: str, pending: list[int], skipped: list[int]
) -> None:
    job = make_job(every="PT1M", misfire=misfire, overlap="allow")
    controls.pause_job(job=job, now=now)
    back = now + 5 * MINUTE + 30 * SECOND
    assert claim(back) == []
    assert controls.resume_job(job=job, now=back)
    assert fresh(job).status == JobStatus.ACTIVE
    assert len(claim(back)) == len(pending)
    assert history(job) == sorted(
        [(now + i * MINUTE, ExecutionStatus.PENDING) for i in pending]
        + [(now + i * MINUTE, ExecutionStatus.SKIPPED) for i in skipped]
    )
    assert fresh(job).next_due_at == now + 6 * MINUTE


def test_resume_of_an_active_job_and_pause_of_a_paused_one_change_nothing(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1M")
    assert controls.resume_job(job=job, now=now) is False
    assert controls.pause_job(job=job, now=now) is True
    assert controls.pause_job(job=job, now=now) is False
    assert fresh(job).status == JobStatus.PAUSED


# --- jitter -----------------------------------------------------------------------------------


def test_jitter_spreads_ten_thousand_jobs_due_on_one_minute(owner: Any, now: datetime) -> None:
    jitter = timedelta(seconds=60)
    schedule = Schedule.objects.create(
        owner=owner, interval="PT1M", starts_at=now - timedelta(hours=1)
    )
    Job.objects.bulk_create(
        [
            Job(
                owner=owner,
                name=f"flood-{i}",
                schedule=schedule,
                task=NOOP,
                jitter=jitter,
                overlap=Overlap.ALLOW,
                next_occurrence_at=now,
                next_due_at=now,
                created_at=now,
            )
            for i in range(10_000)
        ],
        batch_size=2500,
    )
    assert len(claim(now, limit=20_000)) == 10_000
    minute = now + MINUTE
    due = dict(Job.objects.values_list("pk", "next_due_at"))
    assert set(Job.objects.values_list("next_occurrence_at", flat=True)) == {minute}
    assert all(at == minute + schedules.jitter_offset(pk, minute, jitter) for pk, at in due.items())
    offsets = [(at - minute).total_seconds() for at in due.values()]
    assert all(0 <= offset < 60 for offset in offsets)
    buckets = Counter(int(offset // 6) for offset in offsets)
    assert sorted(buckets) == list(range(10))
    assert all(500 <= count <= 1500 for count in buckets.values()), buckets

    # Three seconds into the window only the jobs whose offset has passed are due (about one
    # in twenty), and their executions keep the nominal minute.
    early = minute + 3 * SECOND
    expected = sum(1 for at in due.values() if at <= early)
    assert 300 < expected < 700
    assert len(claim(early, limit=20_000)) == expected
    assert Execution.objects.filter(scheduled_for=minute).count() == expected
    assert set(Execution.objects.values_list("scheduled_for", flat=True)) == {now, minute}


def test_create_job_jitters_the_first_occurrence_too(make_job: MakeJob, now: datetime) -> None:
    start = now + MINUTE
    jobs = [make_job(every="PT1H", start=start, jitter=timedelta(seconds=60)) for _ in range(40)]
    offsets = {(job.next_due_at - start).total_seconds() for job in jobs}
    assert all(job.next_occurrence_at == start for job in jobs)
    assert all(0 <= offset < 60 for offset in offsets)
    assert len(offsets) == 40
    assert max(offsets) - min(offsets) > 40
    bells = claim(start + 60 * SECOND)
    assert len(bells) == 40
    assert set(Execution.objects.values_list("scheduled_for", flat=True)) == {start}


# --- a bad row never stops the loop -----------------------------------------------------------


def test_a_bad_row_fails_its_occurrence_and_every_other_job_is_claimed(
    make_job: MakeJob, now: datetime
) -> None:
    healthy = [make_job(every="PT1M") for _ in range(3)]
    row = Chore.objects.create(name="digest")
    table_job = make_job(
        every="PT1M", task="", task_table="tasktable_app.Chore", task_row_id=row.pk
    )
    gone_row = Chore.objects.create(name="gone")
    orphan = make_job(
        every="PT1M", task="", task_table="tasktable_app.Chore", task_row_id=gone_row.pk
    )
    unregistered = make_job(every="PT1M")
    broken = make_job(every="PT1M")
    Job.objects.filter(pk=unregistered.pk).update(task="gone.task")
    gone_id = gone_row.pk
    with connection.cursor() as cursor:  # behind the ORM's back: deletes unschedule their jobs
        cursor.execute("DELETE FROM tasktable_app_chore WHERE id = %s", [gone_id])
    Schedule.objects.filter(pk=broken.schedule_id).update(interval="P1M")

    bells = claim(now)

    assert {b.task for b in bells} == {NOOP, "scheduling.run_task_row"}
    assert len(bells) == 4
    for job in [*healthy, table_job]:
        assert history(job) == [(now, ExecutionStatus.PENDING)]
    assert Execution.objects.get(job=table_job).task == "scheduling.run_task_row"

    # A task this process does not know is left for one that does (a rolling deploy): no
    # execution, the occurrence kept, the wait marked (tests/scheduling/test_rolling_deploys.py).
    assert history(unregistered) == []
    assert fresh(unregistered).next_occurrence_at == now
    assert fresh(unregistered).task_unknown_since == now

    missing = Execution.objects.get(job=orphan)
    assert missing.status == ExecutionStatus.FAILED
    assert f"task_row_id: no tasktable_app.Chore row with id {gone_id}" in missing.last_error
    assert fresh(orphan).current_execution_id is None

    invalid = Execution.objects.get(job=broken)
    assert invalid.status == ExecutionStatus.FAILED
    assert "schedule is invalid" in invalid.last_error and "months" in invalid.last_error
    assert fresh(broken).status == JobStatus.PAUSED


@pytest.mark.postgres
def test_times_written_past_the_model_pause_their_job_and_every_other_job_is_claimed(
    make_job: MakeJob, now: datetime
) -> None:
    """PostgreSQL takes 'infinity' and years past 9999 from raw SQL; Python cannot read them."""
    healthy = make_job(every="PT1M")
    endless = make_job(every="PT1M")
    lost = make_job(every="PT1M")
    waiting = make_job(every="PT1M")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduling_schedule SET ends_at = 'infinity' WHERE id = %s",
            [endless.schedule_id],
        )
        cursor.execute(
            "UPDATE scheduling_job SET next_due_at = '-infinity',"
            " next_occurrence_at = '-infinity' WHERE id = %s",
            [lost.pk],
        )
        cursor.execute(
            "UPDATE scheduling_job SET next_due_at = 'infinity' WHERE id = %s", [waiting.pk]
        )

    probe = selectors.scheduler_probe(
        now=now, pending_before=now, queued_before=now, stale_before=now
    )
    assert probe.due and probe.next_due_at is not None
    bells = claim(now)

    assert [b.execution_id for b in bells] == [Execution.objects.get(job=healthy).pk]
    failed = Execution.objects.get(job=endless)
    assert failed.status == ExecutionStatus.FAILED
    assert "ends_at: 'infinity' is not a time the scheduler can use" in failed.last_error
    assert fresh(endless).status == JobStatus.PAUSED
    assert not Execution.objects.filter(job=lost).exists()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT status, next_due_at::text FROM scheduling_job WHERE id = %s", [lost.pk]
        )
        assert cursor.fetchone() == (JobStatus.PAUSED, "-infinity")
    assert claim(now) == []  # nothing left due: the paused job does not come back


# --- publishing again -------------------------------------------------------------------------


def test_reclaim_republishes_stuck_pending_lost_queued_and_due_retries(
    make_job: MakeJob, now: datetime
) -> None:
    def reclaim(at: datetime) -> list[int]:
        """One scheduler tick's republish step; the publish succeeds and is recorded."""
        bells = publishing.reclaim_for_publish(now=at, limit=100)
        for bell in bells:
            row = Execution.objects.get(pk=bell.execution_id)
            assert (row.status, row.queued_at) == (ExecutionStatus.PENDING, at)
        publishing.mark_queued(execution_ids=[b.execution_id for b in bells], now=at)
        return [b.execution_id for b in bells]

    pending_job, queued_job, retry_job, fresh_job = (make_job(every="PT1H") for _ in range(4))
    bells = {b.execution_id: b for b in claim(now)}
    pending, queued, retry, recent = (
        Execution.objects.get(job=job).pk for job in (pending_job, queued_job, retry_job, fresh_job)
    )
    # `pending` was claimed but its scheduler died before publishing.
    publishing.mark_queued(execution_ids=[queued], now=now)
    attempts.start_execution(execution_id=retry, worker="w1", pid=1, now=now)
    attempts.fail_attempt(
        execution_id=retry, error="flaky", outcome=AttemptOutcome.FAILED, now=now, retry_in=300
    )
    publishing.mark_queued(execution_ids=[recent], now=now + 9 * MINUTE)

    assert reclaim(now + 9 * SECOND) == []
    assert publishing.reclaim_for_publish(now=now + 11 * SECOND, limit=100) == [bells[pending]]
    publishing.mark_queued(execution_ids=[pending], now=now + 11 * SECOND)

    assert reclaim(now + 5 * MINUTE - SECOND) == []
    assert reclaim(now + 5 * MINUTE) == [retry]
    assert Execution.objects.get(pk=retry).retry_count == 1

    assert reclaim(now + 10 * MINUTE) == []
    assert reclaim(now + 10 * MINUTE + SECOND) == [queued]
    assert reclaim(now + 10 * MINUTE + 2 * SECOND) == []
    assert set(Execution.objects.values_list("status", flat=True)) == {ExecutionStatus.QUEUED}


# --- the reaper -------------------------------------------------------------------------------


def test_reaper_retries_a_stale_execution_then_fails_it_and_releases_the_job(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1M", max_retries=1)
    [bell] = claim(now)
    eid = bell.execution_id
    attempts.start_execution(execution_id=eid, worker="w1@host", pid=11, now=now + SECOND)
    liveness.record_heartbeat(execution_ids=[eid], now=now + 50 * SECOND)
    assert liveness.reap_stale_executions(now=now + 100 * SECOND, stale_after=60) == []

    assert liveness.reap_stale_executions(now=now + 111 * SECOND, stale_after=60) == [eid]
    execution = Execution.objects.get(pk=eid)
    assert execution.status == ExecutionStatus.RETRY
    assert execution.retry_count == 1
    assert execution.retry_at == now + 111 * SECOND
    assert "abandoned" in execution.last_error and "w1@host" in execution.last_error
    [attempt] = execution.attempts.all()
    assert attempt.outcome == AttemptOutcome.ABANDONED
    assert attempt.finished_at == now + 111 * SECOND
    assert fresh(job).current_execution_id == eid  # the retry still holds the job

    publishing.reclaim_for_publish(now=now + 112 * SECOND, limit=10)
    attempts.start_execution(execution_id=eid, worker="w2@host", pid=12, now=now + 113 * SECOND)
    assert liveness.reap_stale_executions(now=now + 174 * SECOND, stale_after=60) == [eid]
    execution = Execution.objects.get(pk=eid)
    assert execution.status == ExecutionStatus.FAILED
    assert execution.retry_count == 1
    assert [a.outcome for a in execution.attempts.all()] == [AttemptOutcome.ABANDONED] * 2
    assert fresh(job).current_execution_id is None
    [next_bell] = claim(now + 174 * SECOND)
    assert Execution.objects.get(pk=next_bell.execution_id).scheduled_for == now + MINUTE


def test_a_manual_run_at_an_occurrence_instant_does_not_stop_the_claim(
    make_job: MakeJob, now: datetime
) -> None:
    manual = make_job(every="PT1M")
    other = make_job(every="PT1M")
    controls.run_job_now(job=manual, now=now)
    claim(now)
    assert history(other) == [(now, ExecutionStatus.PENDING)]
    assert Execution.objects.filter(job=manual, scheduled_for=now).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_claim_never_joins_a_callers_transaction(make_job: MakeJob, now: datetime) -> None:
    """Joined to a caller's transaction, its locks and rows would live as long as the caller."""
    make_job(every="PT1M")
    with transaction.atomic(), pytest.raises(RuntimeError, match="durable"):
        claims.claim_due_jobs(now=now, limit=10)
    assert not Execution.objects.exists()


# --- the common case, planned in SQL ----------------------------------------------------------

Prepare = Callable[[Job, datetime], None]


def _off_grid(job: Job, now: datetime) -> None:
    """Moved behind the scheduler to a time between two occurrences."""
    Job.objects.filter(pk=job.pk).update(
        next_occurrence_at=now + 7 * SECOND, next_due_at=now + 7 * SECOND
    )


def _run_by_hand(job: Job, now: datetime) -> None:
    controls.run_job_now(job=job, now=now)


# case: (job options, claim this long after `now`, planned in SQL, change before the claim)
PLAN_CASES: dict[str, tuple[dict[str, Any], timedelta, bool, Prepare | None]] = {
    "on time": ({}, 0 * SECOND, True, None),
    "an hourly interval": ({"every": "PT1H"}, 0 * SECOND, True, None),
    "on time with overlap allowed": ({"overlap": "allow"}, 30 * SECOND, True, None),
    "within the grace under coalesce": ({"misfire": "coalesce"}, 59 * SECOND, True, None),
    "late under catch_up, overlap forbidden": (
        {"misfire": "catch_up"},
        10 * MINUTE + 30 * SECOND,
        True,
        None,
    ),
    "late under catch_up, overlap allowed": (
        {"misfire": "catch_up", "overlap": "allow"},
        10 * MINUTE + 30 * SECOND,
        False,
        None,
    ),
    "late under coalesce": ({"misfire": "coalesce"}, 10 * MINUTE + 30 * SECOND, False, None),
    "late under skip": ({"misfire": "skip"}, 10 * MINUTE + 30 * SECOND, False, None),
    "inside its window": ({"start": -60 * MINUTE, "end": 60 * MINUTE}, 0 * SECOND, True, None),
    "at the end of its window": (
        {"start": -60 * MINUTE, "end": 30 * SECOND},
        0 * SECOND,
        False,
        None,
    ),
    "with arguments, queue, priority and timeout": (
        {"args": [1, "a"], "kwargs": {"k": [2]}, "queue": "reports", "priority": 5, "timeout": 30},
        0 * SECOND,
        True,
        None,
    ),
    "jittered": ({"jitter": 5 * SECOND}, 10 * SECOND, False, None),
    "cron": ({"cron": "* * * * *"}, MINUTE, False, None),
    "off the interval's grid": ({}, 10 * SECOND, False, _off_grid),
    "whose occurrence already ran by hand": ({}, 0 * SECOND, True, _run_by_hand),
}


def claim_outcome(job: Job, at: datetime) -> tuple[Any, ...]:
    """What a claim at ``at`` writes and returns for ``job``, less the ids and uuids it draws."""
    bells = claim(at)
    executions = list(
        Execution.objects.filter(job=job)
        .order_by("scheduled_for")
        .values(
            "id", "task_id", "job_id", "task", "scheduled_for", "status", "last_error",
            "created_at", "queued_at", "finished_at", "retry_count", "worker", "duplicates",
            "updated_at",
        )
    )  # fmt: skip
    occurrence = {row.pop("id"): row["scheduled_for"] for row in executions}
    uuids = {str(row.pop("task_id")) for row in executions}
    assert {b.task_id for b in bells} <= uuids
    row = Job.objects.filter(pk=job.pk).values(
        "status", "next_occurrence_at", "next_due_at", "pause_reason", "updated_at",
        "current_execution_id",
    ).get()  # fmt: skip
    row["current_execution_id"] = occurrence.get(row["current_execution_id"])
    messages = [
        (occurrence[b.execution_id], b.task, b.args, b.kwargs, b.queue, b.priority, b.timeout)
        for b in bells
    ]
    return executions, row, messages


def jobs_planned_in_python(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The jobs ``claims._plan`` is handed from now on, in order (it still plans them)."""
    planned: list[int] = []
    plan = claims._plan

    def spy(row: dict[str, Any], *args: Any) -> Any:
        planned.append(row["pk"])
        return plan(row, *args)

    monkeypatch.setattr(claims, "_plan", spy)
    return planned


@pytest.mark.postgres
@pytest.mark.parametrize("case", PLAN_CASES)
def test_a_job_planned_in_sql_gets_what_the_python_plan_gives_it(
    make_job: MakeJob, now: datetime, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """The same job claimed twice from the same state: first planned by ``_plan`` (the claim
    has read no interval yet), then, where it qualifies, by CLAIM_DUE_JOBS itself."""
    options, later, in_sql, prepare = PLAN_CASES[case]
    for name in ("start", "end"):
        if name in options:
            options = {**options, name: now + options[name]}
    job = make_job(**options)
    if prepare is not None:
        prepare(job, now)
    monkeypatch.setattr(plain_claims, "STEPS", plain_claims.Steps())  # nothing read yet
    planned_in_python = jobs_planned_in_python(monkeypatch)
    before = Job.objects.filter(pk=job.pk).values().get()
    existing = list(Execution.objects.filter(job=job).values_list("pk", flat=True))
    first = claim_outcome(job, now + later)
    # Back to the state before the claim (a claim commits on its own: no savepoint to undo).
    Job.objects.filter(pk=job.pk).update(current_execution=None)
    Execution.objects.filter(job=job).exclude(pk__in=existing).delete()
    Job.objects.filter(pk=job.pk).update(**before)
    outcomes = [first, claim_outcome(job, now + later)]
    assert planned_in_python[0] == job.pk
    assert planned_in_python[1:] == ([] if in_sql else [job.pk])
    assert outcomes[1] == outcomes[0]


@pytest.mark.postgres
def test_a_batch_plans_its_common_jobs_in_sql_and_every_other_row_alone(
    make_job: MakeJob, now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plain_claims, "STEPS", plain_claims.Steps())
    plain_claims.STEPS.learn("PT1M", MINUTE)
    planned_in_python = jobs_planned_in_python(monkeypatch)
    common = [make_job(every="PT1M") for _ in range(3)]
    cron = make_job(cron="* * * * *")
    jittered = make_job(every="PT1M", jitter=5 * SECOND)
    unregistered, bad_args, unknown_step = (make_job(every="PT1M") for _ in range(3))
    Job.objects.filter(pk=unregistered.pk).update(task="gone.task")
    with connection.cursor() as cursor:  # behind the model: kwargs must be an object
        cursor.execute(
            "UPDATE scheduling_job SET kwargs = '[1]'::jsonb WHERE id = %s", [bad_args.pk]
        )
    Schedule.objects.filter(pk=unknown_step.schedule_id).update(interval="PT60S")

    bells = claim(now + MINUTE)

    others = [cron, jittered, unregistered, bad_args, unknown_step]
    assert sorted(planned_in_python) == sorted(job.pk for job in others)
    assert Counter(b.task for b in bells) == {NOOP: 6}
    for job in common:
        assert history(job) == [(now, ExecutionStatus.PENDING)]
        assert fresh(job).next_due_at == now + MINUTE
        assert fresh(job).current_execution_id == Execution.objects.get(job=job).pk
    assert history(unknown_step) == [(now, ExecutionStatus.PENDING)]
    assert history(bad_args) == [(now, ExecutionStatus.FAILED)]
    assert fresh(bad_args).current_execution_id is None
    assert history(unregistered) == []  # left for a process that knows its task
    assert "kwargs: must be a JSON object" in Execution.objects.get(job=bad_args).last_error
    assert plain_claims.STEPS.known == {"PT1M": 60_000_000, "PT60S": 60_000_000}


# --- task ids -------------------------------------------------------------------------------


def task_ids(jobs: list[Job]) -> list[uuid.UUID]:
    """The task ids of these jobs' executions, in the order the rows were inserted."""
    return list(
        Execution.objects.filter(job__in=jobs).order_by("pk").values_list("task_id", flat=True)
    )


def test_a_claims_task_ids_are_uuidv7_rising_in_insertion_order(
    make_job: MakeJob, now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Time-ordered ids put every new row on the unique index's right edge. On PostgreSQL the
    common jobs are planned and written by the locking statement, the cron ones in Python;
    on SQLite all of them in Python. Each path draws its ids in the order it inserts."""
    monkeypatch.setattr(plain_claims, "STEPS", plain_claims.Steps())
    plain_claims.STEPS.learn("PT1M", MINUTE)
    planned_in_python = jobs_planned_in_python(monkeypatch)
    common = [make_job(every="PT1M") for _ in range(40)]
    cron = [make_job(cron="* * * * *") for _ in range(40)]

    bells = claim(now + MINUTE)

    on_postgresql = connection.vendor == "postgresql"
    assert sorted(planned_in_python) == sorted(
        job.pk for job in (cron if on_postgresql else common + cron)
    )
    for group in (common, cron):
        drawn = task_ids(group)
        assert len(drawn) == len(group)
        assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in drawn)
        assert drawn == sorted(set(drawn))
    assert {b.task_id for b in bells} == {str(u) for u in task_ids(common + cron)}
