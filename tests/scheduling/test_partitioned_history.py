"""The history on PostgreSQL is partitioned by ``scheduled_for``, and retention drops periods.

Executions and attempts live in partitions of ``SCHEDULING_HISTORY_PARTITION_DAYS`` days with
the same bounds, made ahead of now by the scheduler; the keys hold across them; retention drops
a period whole, keeping what it always kept; and an installation moves to the partitioned
tables and back with its workers and scheduler running, losing and doubling nothing.
"""

from __future__ import annotations

import io
import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone

from scheduling.checks import check_history_periods
from scheduling.ledger import partitions
from scheduling.models import Attempt, Execution, ExecutionStatus, Job, JobStatus
from scheduling.scheduler.periods import PeriodKeeper
from scheduling.stages import retention
from tests.conftest import Processes, celery_worker_command, scheduler_command, wait_for
from tests.factories import create_job

pytestmark = pytest.mark.postgres

DAYS = 7
PLAIN = "0016_attempt_scheduled_for"


def execution(job: Job | None, at: datetime, status: str = ExecutionStatus.COMPLETED) -> Execution:
    return Execution.objects.create(
        job=job, task="scheduling.diagnostics.noop", scheduled_for=at, status=status
    )


def table_names(prefix: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname FROM pg_class WHERE relname LIKE %s", [prefix + "%"])
        return {row[0] for row in cursor.fetchall()}


def relation_of(row: Execution) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM scheduling_execution WHERE id = %s", [row.pk]
        )
        return cursor.fetchone()[0]


@pytest.mark.parametrize("days", [1, 7, 30])
def test_periods_start_on_a_monday_at_midnight_utc_and_follow_each_other(days: int) -> None:
    at = datetime(2027, 3, 28, 1, 30, tzinfo=UTC)  # a Sunday, the night Europe's clocks change
    period = partitions.period_of(at, days)
    assert period.start <= at < period.end == period.start + timedelta(days=days)
    assert (period.start.hour, period.start.minute) == (0, 0)
    assert days != 7 or period.start.weekday() == 0
    assert partitions.period_of(period.end, days).start == period.end


@pytest.mark.django_db
def test_both_tables_are_partitioned_with_the_current_period_and_the_next_ones_made() -> None:
    now = timezone.now()
    assert partitions.is_partitioned()
    current = partitions.period_of(now, DAYS)
    # What the migration made is there: nothing to make, unless a period began between the
    # migration and now (a run across midnight on a Monday), when the one period that came
    # into the window ahead is made, and only that one.
    made = PeriodKeeper().maybe(now)
    farthest = current.start + timedelta(days=DAYS * partitions.AHEAD)
    assert all(period.start == farthest for period in made), made
    assert PeriodKeeper().maybe(now) == []
    have = partitions.periods()
    assert have == partitions.periods(table=partitions.ATTEMPT)
    assert current in have
    assert have[-1].end >= current.end + timedelta(days=DAYS * partitions.AHEAD)
    assert all(a.end == b.start for a, b in itertools.pairwise(have)), "no gaps, no overlaps"


@pytest.mark.django_db
def test_one_execution_per_occurrence_holds_across_partitions(make_job: Any, now: datetime) -> None:
    job = make_job(every="PT1M")
    for at in (now, now - timedelta(days=400), now + timedelta(days=4000)):  # default partition
        execution(job, at)
        with pytest.raises(IntegrityError), transaction.atomic():
            execution(job, at)
    assert Execution.objects.filter(job=job).count() == 3


@pytest.mark.django_db
def test_an_attempt_lies_beside_its_execution_and_is_deleted_with_it(
    make_job: Any, now: datetime
) -> None:
    job = make_job(every="PT1M")
    run = execution(job, now - timedelta(days=1), ExecutionStatus.RUNNING)
    attempt = Attempt.objects.create(execution=run, number=1, started_at=now)
    assert attempt.scheduled_for == run.scheduled_for
    with pytest.raises(IntegrityError), transaction.atomic():
        Attempt.objects.create(execution=run, number=1, started_at=now)  # numbers are unique
    Execution.objects.filter(pk=run.pk).delete()
    assert not Attempt.objects.filter(pk=attempt.pk).exists()


@pytest.mark.django_db
def test_a_period_made_later_takes_in_the_rows_its_default_partition_held(
    make_job: Any, now: datetime
) -> None:
    job = make_job(every="PT1M")
    later = now + timedelta(days=365)
    run = execution(job, later, ExecutionStatus.QUEUED)
    Attempt.objects.create(execution=run, number=1, started_at=now, outcome="abandoned")
    assert relation_of(run) == "scheduling_execution_default"

    made = partitions.make_ahead(now=later, days=DAYS)

    period = partitions.period_of(later, DAYS)
    assert period in made
    assert relation_of(run) == period.name("scheduling_execution")
    assert Execution.objects.get(pk=run.pk).status == ExecutionStatus.QUEUED
    assert Attempt.objects.get(execution=run).scheduled_for == later


@pytest.mark.django_db
def test_prune_drops_each_period_past_the_cutoff_whole_and_keeps_what_it_always_kept(
    make_job: Any, now: datetime
) -> None:
    old = partitions.period_of(now - timedelta(days=70), DAYS)
    partitions.make_period(old)  # periods before the migration's, as a long history has them
    busy, quiet = make_job(every="PT1M", name="busy"), make_job(every="P1D", name="quiet")
    hourly = [old.start + timedelta(hours=h) for h in range(24 * DAYS)]
    for at in hourly:
        run = execution(busy, at)
        Attempt.objects.create(execution=run, number=1, started_at=at, outcome="completed")
    quiet_runs = [execution(quiet, old.start + timedelta(days=d)) for d in range(3)]
    stuck = execution(busy, old.start + timedelta(minutes=30), ExecutionStatus.RETRY)
    for at in (now - timedelta(minutes=2), now - timedelta(minutes=1)):
        execution(busy, at)  # busy's latest runs are recent; quiet's are all in the old period
    partition = old.name("scheduling_execution")
    assert partition in table_names(partition)

    report = retention.prune_history(older_than=timedelta(days=30), keep_last=2, now=now)

    assert report.periods >= 1
    assert old not in partitions.periods()
    assert not table_names(partition) and not table_names(old.name("scheduling_attempt"))
    assert report.executions == len(hourly) + 1  # busy's, and quiet's oldest
    assert report.attempts == len(hourly)
    assert report.by_job == {busy.pk: len(hourly), quiet.pk: 1}
    kept = set(Execution.objects.filter(scheduled_for__lt=old.end).values_list("pk", flat=True))
    assert kept == {stuck.pk, quiet_runs[1].pk, quiet_runs[2].pk}
    assert {relation_of(row) for row in Execution.objects.filter(pk__in=kept)} == {
        "scheduling_execution_default"
    }
    assert (
        Execution.objects.filter(job=busy, scheduled_for__gte=now - timedelta(days=1)).count() == 2
    )


@pytest.mark.django_db
def test_a_jobs_latest_are_kept_whichever_partition_holds_them(
    make_job: Any, now: datetime
) -> None:
    """The drop finds each job's latest among the periods; rows in the default partition
    (kept by an earlier drop, or due past every period) change nothing the prune keeps."""
    old = partitions.period_of(now - timedelta(days=70), DAYS)
    partitions.make_period(old)
    rare, deferred = make_job(every="P1D", name="rare"), make_job(every="P1D", name="deferred")
    earlier = execution(rare, old.start - timedelta(days=30))  # in the default partition
    rare_runs = [execution(rare, old.start + timedelta(days=d)) for d in range(3)]
    deferred_runs = [execution(deferred, old.start + timedelta(days=d)) for d in range(3)]
    far = execution(deferred, datetime(2100, 1, 1, tzinfo=UTC))  # past every period: default
    assert {relation_of(earlier), relation_of(far)} == {"scheduling_execution_default"}

    report = retention.prune_history(older_than=timedelta(days=30), keep_last=3, now=now)

    assert old not in partitions.periods()
    # rare's three latest are the three of the period; the one before goes.
    assert set(Execution.objects.filter(job=rare).values_list("pk", flat=True)) == {
        run.pk for run in rare_runs
    }
    # deferred's three latest: the far one and the period's two newest.
    assert set(Execution.objects.filter(job=deferred).values_list("pk", flat=True)) == {
        far.pk,
        deferred_runs[1].pk,
        deferred_runs[2].pk,
    }
    assert report.by_job == {rare.pk: 1, deferred.pk: 1}


@pytest.mark.django_db
def test_prune_partitions_only_leaves_the_rows_of_the_period_the_cutoff_falls_in(
    make_job: Any, now: datetime
) -> None:
    job = make_job(every="PT1M")
    cutoff = now - timedelta(days=1)
    inside = partitions.period_of(cutoff, DAYS)
    if inside not in partitions.periods():
        partitions.make_period(inside)
    early = [inside.start + timedelta(minutes=m) for m in range(3) if inside.start < cutoff]
    for at in early:
        execution(job, at)

    whole = retention.prune_history(
        older_than=timedelta(days=1), keep_last=0, now=now, partitions_only=True
    )
    assert whole.executions == 0 and inside in partitions.periods()
    exact = retention.prune_history(older_than=timedelta(days=1), keep_last=0, now=now)
    assert exact.executions == len(early)


@pytest.mark.django_db
def test_prune_history_command_says_how_many_periods_went(make_job: Any) -> None:
    old = partitions.period_of(timezone.now() - timedelta(days=90), DAYS)
    partitions.make_period(old)
    execution(make_job(every="PT1M"), old.start + timedelta(hours=1))
    out = io.StringIO()
    call_command("prune_history", "--older-than", "30d", "--keep-last", "0", "--json", stdout=out)
    said = json.loads(out.getvalue())
    assert (said["periods_dropped"], said["executions"]) == (1, 1)
    assert 0 < said["periods_seconds"] <= said["seconds"]  # how long the drops took, of the run


# --- the move, with workers and a scheduler running -------------------------------------------


def _latest_migration() -> str:
    loader = MigrationLoader(connection, ignore_no_migrations=True)
    return max(name for app, name in loader.graph.leaf_nodes() if app == "scheduling")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_move_to_partitions_and_back_with_workers_and_a_scheduler_running_loses_nothing(
    processes: Processes, process_env: dict[str, str], owner: Any
) -> None:
    job = create_job(owner=owner, name="every-second", task="scheduling.diagnostics.noop",
                     every="PT1S", misfire="catch_up", now=timezone.now())  # fmt: skip
    env = {**process_env, "SCHEDULING_QUEUE_IDLE_WARN": "0"}
    processes.start(celery_worker_command(name="mover", concurrency=2), env=env, name="worker")
    processes.start(scheduler_command(), env=env, name="scheduler")
    latest = _latest_migration()

    def completed() -> int:
        return Execution.objects.filter(job=job, status=ExecutionStatus.COMPLETED).count()

    def runs_on(count: int, message: str) -> None:
        target = completed() + count
        wait_for(lambda: completed() >= target, timeout=90, message=message)

    try:
        runs_on(3, "the job runs on the partitioned tables")
        call_command("migrate", "scheduling", PLAIN, verbosity=0)
        assert not partitions.is_partitioned()
        runs_on(3, "the job runs on plain tables, after the move back")
        call_command("migrate", "scheduling", latest, verbosity=0)
        assert partitions.is_partitioned()
        runs_on(3, "the job runs on the partitioned tables again")
    finally:
        call_command("migrate", "scheduling", latest, verbosity=0)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PAUSED)
    wait_for(
        lambda: not Execution.objects.filter(job=job).unfinished().exists(),
        timeout=60,
        message="the last runs end",
    )
    runs = list(Execution.objects.filter(job=job).order_by("scheduled_for"))
    due = [run.scheduled_for for run in runs]
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(due)), "none lost"
    assert {run.status for run in runs} == {ExecutionStatus.COMPLETED}
    for run in runs:
        outcomes = list(run.attempts.values_list("outcome", flat=True))
        assert outcomes.count("completed") == 1, f"{run.scheduled_for}: {outcomes}"
    assert Attempt.objects.filter(execution__job=job).count() >= len(runs)


@pytest.mark.django_db
def test_check_warns_while_no_period_holds_now_and_a_scheduler_makes_it(make_job: Any) -> None:
    now = timezone.now()
    current = partitions.period_of(now, DAYS)
    with connection.cursor() as cursor:
        for table in (partitions.ATTEMPT, partitions.EXECUTION):  # as if none ran for weeks
            cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {current.name(table)}")
            cursor.execute(f"DROP TABLE {current.name(table)}")
    [warning] = check_history_periods()
    assert warning.id == "scheduling.W012" and "no partition for now" in warning.msg

    made = PeriodKeeper().maybe(now)

    assert current in made and check_history_periods() == []
    assert relation_of(execution(make_job(every="PT1M"), now)) == current.name(partitions.EXECUTION)
