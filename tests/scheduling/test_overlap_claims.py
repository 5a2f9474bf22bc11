"""The overlap policies at the claim: buffer_one, buffer_all and cancel_other as a specification.

Every test drives ``claims.claim_due_jobs`` with an explicit ``now``; workers are played by the
service verbs they call. Runs on every database (the `specification` marker).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from scheduling import api
from scheduling.ledger.engines.postgresql import STATEMENTS
from scheduling.models import (
    Attempt,
    AttemptOutcome,
    Execution,
    ExecutionStatus,
    Job,
    job_due_index,
)
from scheduling.stages import attempts, claims, limits, overlaps, plain_claims, selectors
from scheduling.timing import readable
from tests.scheduling.test_admin_jobs import form_data
from tests.scheduling.test_backfill import HOUR, hourly

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


def claim(at: datetime) -> claims.Claim:
    return claims.claim_due_jobs(now=at, limit=1000)


def start(execution_id: int, at: datetime) -> None:
    assert attempts.start_execution(execution_id=execution_id, worker="w1", pid=1, now=at)


def run(execution_id: int, at: datetime) -> None:
    """A worker takes the execution and finishes it successfully."""
    start(execution_id, at)
    assert attempts.complete_execution(execution_id=execution_id, now=at)


def history(job: Job) -> list[tuple[datetime, str, str]]:
    return list(
        Execution.objects.filter(job=job)
        .order_by("scheduled_for")
        .values_list("scheduled_for", "status", "last_error")
    )


def is_due(at: datetime) -> bool:
    """The idle tick's question: is any job due (an index probe of ``job_due_idx``)?"""
    return selectors.scheduler_probe(
        now=at, pending_before=at, queued_before=at, stale_before=at - timedelta(days=1)
    ).due


# --- buffer_all -------------------------------------------------------------------------------


@pytest.mark.parametrize("misfire", ["catch_up", "coalesce", "skip"])
def test_buffer_all_runs_every_occurrence_due_during_a_run_in_order_one_at_a_time(
    make_job: MakeJob, now: datetime, misfire: str
) -> None:
    job = make_job(every="PT1M", overlap="buffer_all", misfire=misfire)
    [first] = claim(now).bells
    start(first.execution_id, now)
    # The run outlasts three intervals: nothing is claimed, nor even looked at, meanwhile.
    for seconds in (60, 120, 180, 200):
        assert not is_due(now + seconds * SECOND)
        assert claim(now + seconds * SECOND).bells == []
    done = now + 200 * SECOND
    assert attempts.complete_execution(execution_id=first.execution_id, now=done)
    order = []
    while bells := claim(done).bells:
        [bell] = bells  # one at a time
        assert claim(done).bells == []  # the next waits for this one
        order.append(Execution.objects.get(pk=bell.execution_id).scheduled_for)
        run(bell.execution_id, done)
    assert order == [now + MINUTE, now + 2 * MINUTE, now + 3 * MINUTE]
    assert [status for _, status, _ in history(job)] == [ExecutionStatus.COMPLETED] * 4
    job.refresh_from_db()
    assert job.next_occurrence_at == now + 4 * MINUTE
    assert job.execute_count == 4


# --- buffer_one -------------------------------------------------------------------------------


@pytest.mark.parametrize("misfire", ["catch_up", "coalesce", "skip"])
def test_buffer_one_runs_the_latest_occurrence_due_during_a_run_and_supersedes_the_rest(
    make_job: MakeJob, now: datetime, misfire: str
) -> None:
    job = make_job(every="PT1M", overlap="buffer_one", misfire=misfire)
    [first] = claim(now).bells
    start(first.execution_id, now)
    assert claim(now + 150 * SECOND).bells == []
    assert not is_due(now + 200 * SECOND)
    done = now + 200 * SECOND
    assert attempts.complete_execution(execution_id=first.execution_id, now=done)
    [latest] = claim(done).bells
    assert claim(done).bells == []  # it holds the job like any run
    run(latest.execution_id, done + SECOND)
    winner = readable.instant(now + 3 * MINUTE)
    note = f"superseded by the occurrence of {winner} (overlap policy)"
    assert history(job) == [
        (now, ExecutionStatus.COMPLETED, ""),
        (now + MINUTE, ExecutionStatus.SUPERSEDED, note),
        (now + 2 * MINUTE, ExecutionStatus.SUPERSEDED, note),
        (now + 3 * MINUTE, ExecutionStatus.COMPLETED, ""),
    ]
    assert Execution.objects.get(pk=latest.execution_id).scheduled_for == now + 3 * MINUTE
    job.refresh_from_db()
    assert job.next_occurrence_at == now + 4 * MINUTE
    assert job.execute_count == 2


def test_buffer_one_with_nothing_waiting_runs_on_schedule(make_job: MakeJob, now: datetime) -> None:
    job = make_job(every="PT1M", overlap="buffer_one")
    for i in range(3):
        [bell] = claim(now + i * MINUTE).bells
        run(bell.execution_id, now + i * MINUTE + SECOND)
    assert [status for _, status, _ in history(job)] == [ExecutionStatus.COMPLETED] * 3


# --- cancel_other -----------------------------------------------------------------------------


def test_cancel_other_cancels_the_running_one_when_the_next_occurrence_comes_due(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1M", overlap="cancel_other")
    [first] = claim(now).bells
    start(first.execution_id, now)
    assert claim(now + 30 * SECOND).bells == []
    assert not is_due(now + 30 * SECOND)
    assert is_due(now + MINUTE)  # due while its run is in flight: it is due work
    result = claim(now + MINUTE)
    [second] = result.bells
    assert result.stop == [first.task_id]
    assert result.cancel_after == {}
    old = Execution.objects.get(pk=first.execution_id)
    assert old.status == ExecutionStatus.CANCELLED
    assert old.last_error == overlaps.cancelled_note(now + MINUTE)
    assert old.retry_at is None
    [attempt] = Attempt.objects.filter(execution=old)
    assert attempt.outcome == AttemptOutcome.CANCELLED
    job.refresh_from_db()
    assert job.current_execution_id == second.execution_id
    # The cancelled body finishing anyway is not recorded, nor retried.
    assert not attempts.complete_execution(execution_id=first.execution_id, now=now + MINUTE)
    assert (
        attempts.fail_attempt(
            execution_id=first.execution_id,
            error="SoftTimeLimitExceeded",
            outcome=AttemptOutcome.FAILED,
            now=now + MINUTE,
        )
        is None
    )
    assert Execution.objects.get(pk=first.execution_id).status == ExecutionStatus.CANCELLED
    run(second.execution_id, now + 70 * SECOND)
    assert [status for _, status, _ in history(job)] == [
        ExecutionStatus.CANCELLED,
        ExecutionStatus.COMPLETED,
    ]
    job.refresh_from_db()
    assert job.execute_count == 1
    assert job.current_execution_id is None


def test_cancel_other_cancels_a_queued_run_without_stopping_a_body(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1M", overlap="cancel_other")
    [first] = claim(now).bells
    result = claim(now + MINUTE)
    assert len(result.bells) == 1
    assert result.stop == []  # nobody runs it: its message is refused at the start
    assert Execution.objects.get(pk=first.execution_id).status == ExecutionStatus.CANCELLED
    assert attempts.start_execution(
        execution_id=first.execution_id, worker="w1", pid=1, now=now + MINUTE
    ) is None
    assert fresh_current(job) == result.bells[0].execution_id


def test_cancel_other_after_a_finished_run_cancels_nothing(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1M", overlap="cancel_other")
    [first] = claim(now).bells
    run(first.execution_id, now + SECOND)
    result = claim(now + MINUTE)
    assert len(result.bells) == 1
    assert result.stop == []
    assert [status for _, status, _ in history(job)] == [
        ExecutionStatus.COMPLETED,
        ExecutionStatus.PENDING,
    ]


def test_cancel_other_late_runs_only_the_latest_and_cancels_the_run(
    make_job: MakeJob, now: datetime
) -> None:
    """A scheduler away for minutes: each occurrence would cancel the one before it at once,
    so the newest runs and the others are superseded by it."""
    job = make_job(every="PT1M", overlap="cancel_other")
    [first] = claim(now).bells
    start(first.execution_id, now)
    result = claim(now + 190 * SECOND)
    assert len(result.bells) == 1
    assert result.stop == [first.task_id]
    latest = now + 3 * MINUTE
    assert history(job) == [
        (now, ExecutionStatus.CANCELLED, overlaps.cancelled_note(latest)),
        (now + MINUTE, ExecutionStatus.SUPERSEDED, overlaps.superseded_note(latest)),
        (now + 2 * MINUTE, ExecutionStatus.SUPERSEDED, overlaps.superseded_note(latest)),
        (latest, ExecutionStatus.PENDING, ""),
    ]


@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.django_db(transaction=True)
def test_cancel_other_leaves_a_run_whose_row_is_busy_to_after_the_commit(
    make_job: MakeJob, now: datetime
) -> None:
    """A worker holding the run's row (ending it, beating) is never waited for under the
    job's lock: the claim hands the run back, and the scheduler cancels it after the commit."""
    job = make_job(every="PT1M", overlap="cancel_other")
    [first] = claim(now).bells
    start(first.execution_id, now)
    settings = connection.settings_dict
    other = psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"],
        host=settings["HOST"],
        port=settings["PORT"] or 5432,
        password=settings["PASSWORD"] or None,
    )
    try:
        other.execute(
            f"SELECT 1 FROM {Execution._meta.db_table} WHERE id = %s FOR UPDATE",
            [first.execution_id],
        )
        result = claim(now + MINUTE)
        assert len(result.bells) == 1
        assert result.stop == []
        assert result.cancel_after == {first.execution_id: overlaps.cancelled_note(now + MINUTE)}
    finally:
        other.rollback()
        other.close()
    task_id = attempts.cancel_running(
        execution_id=first.execution_id, now=now + MINUTE, reason=overlaps.cancelled_note(now)
    )
    assert task_id == first.task_id
    assert Execution.objects.get(pk=first.execution_id).status == ExecutionStatus.CANCELLED
    assert fresh_current(job) == result.bells[0].execution_id


def fresh_current(job: Job) -> int | None:
    job.refresh_from_db()
    return job.current_execution_id


# --- the due index ----------------------------------------------------------------------------


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_the_claim_and_the_idle_probe_read_the_due_index_never_the_whole_table(
    make_job: MakeJob, now: datetime
) -> None:
    """buffer_* jobs with a run in flight are out of ``job_due_idx``; cancel_other ones are in
    it (their next occurrence is due work), and the claim's predicate is the index's."""
    for overlap in ("forbid", "buffer_one", "buffer_all", "cancel_other", "allow"):
        make_job(every="PT1M", overlap=overlap)
    claim(now)
    held = Job.objects.filter(current_execution__isnull=False)
    assert sorted(held.values_list("overlap", flat=True)) == [
        "buffer_all", "buffer_one", "cancel_other", "forbid"
    ]  # fmt: skip
    in_index = Job.objects.filter(job_due_index()).values_list("overlap", flat=True)
    assert sorted(in_index) == ["allow", "cancel_other"]
    planning = {
        **plain_claims.sql_planning(now, timedelta(seconds=60)),
        "now": now,
        "limit": 10,
        "active": "active",
        "pending": "pending",
    }
    statements = [
        (STATEMENTS["lock_due"].postgresql, planning),
        (
            STATEMENTS["probe"].postgresql,
            {"now": now, "pending_before": now, "queued_before": now, "stale_before": now},
        ),
    ]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        for sql, params in statements:
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "job_due_idx" in plan, plan
            assert "Seq Scan on scheduling_job" not in plan, plan


# --- the doors: command line, admin, API ------------------------------------------------------


@pytest.mark.parametrize("overlap", ["buffer_one", "buffer_all", "cancel_other"])
def test_the_command_line_sets_and_changes_each_policy(owner: Any, overlap: str) -> None:
    call_command("jobs", "add", "policy", "--task", NOOP, "--every", "PT1M",
                 "--overlap", overlap, "--owner", owner.username)  # fmt: skip
    assert Job.objects.get(name="policy").overlap == overlap
    call_command("jobs", "edit", "policy", "--overlap", "forbid", "--owner", owner.username)
    assert Job.objects.get(name="policy").overlap == "forbid"


def test_an_unknown_policy_is_refused_naming_the_field(owner: Any) -> None:
    with pytest.raises(CommandError, match=r"--overlap.*invalid choice: 'buffer'"):
        call_command("jobs", "add", "policy", "--task", NOOP, "--every", "PT1M",
                     "--overlap", "buffer", "--owner", owner.username)  # fmt: skip
    with pytest.raises(ValidationError) as caught:
        api.schedule_task(NOOP, timing=api.Every("PT1M"), name="policy",
                          policies=api.Policies(overlap="buffer"))  # fmt: skip
    assert "overlap" in caught.value.message_dict
    assert not Job.objects.filter(name="policy").exists()


def test_the_admin_offers_the_policies_and_refuses_others(
    admin_client: Client, admin_user: Any
) -> None:
    mine = {"owner": admin_user.pk}
    response = admin_client.post(
        "/admin/scheduling/job/add/", form_data(overlap="sometimes", **mine)
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["overlap"]
    response = admin_client.post(
        "/admin/scheduling/job/add/", form_data(overlap="cancel_other", **mine)
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Job.objects.get(name="report").overlap == "cancel_other"


def test_superseded_and_cancelled_runs_show_why_in_the_admin_and_count_in_metrics(
    admin_client: Client, make_job: MakeJob, now: datetime
) -> None:
    one = make_job(every="PT1M", overlap="buffer_one")
    other = make_job(every="PT1M", overlap="cancel_other")
    first = {Execution.objects.get(pk=b.execution_id).job_id: b for b in claim(now).bells}
    start(first[one.pk].execution_id, now)
    start(first[other.pk].execution_id, now)
    claim(now + MINUTE)  # cancels the cancel_other job's run
    done = now + 3 * MINUTE
    assert attempts.complete_execution(execution_id=first[one.pk].execution_id, now=done)
    # Supersedes two occurrences of the buffer_one job; the cancel_other job's 09:02 is
    # superseded by its 09:03, which cancels its 09:01.
    claim(now + 3 * MINUTE)
    page = admin_client.get("/admin/scheduling/execution/").content.decode()
    assert page.count("duecourse-badge-superseded") == 3
    assert page.count("duecourse-badge-cancelled") == 2
    assert f"superseded by the occurrence of {readable.instant(now + 3 * MINUTE)}" in page
    assert f"cancelled by the occurrence of {readable.instant(now + MINUTE)}" in page
    job_page = admin_client.get(f"/admin/scheduling/job/{one.pk}/change/").content.decode()
    assert "superseded by the occurrence of" in job_page
    metrics = admin_client.get("/metrics").content.decode()
    assert 'duecourse_executions_last_hour{status="superseded"}' in metrics


# --- backfill ---------------------------------------------------------------------------------


@pytest.mark.parametrize("overlap", ["buffer_one", "buffer_all", "cancel_other"])
def test_a_backfill_runs_one_at_a_time_oldest_first_under_the_new_policies(
    owner: Any, overlap: str
) -> None:
    """Backfilled occurrences are asked for by a person, each one: none is superseded, and they
    take the job's turn one after another, as under forbid."""
    job = hourly(owner, overlap=overlap)
    first = job.schedule.starts_at
    at = timezone.now()
    api.backfill(job.pk, start=first, end=first + 3 * HOUR, now=at)
    oldest, middle, newest = Execution.objects.filter(job=job).order_by("scheduled_for")
    for expected in (oldest, middle, newest):
        assert limits.release_waiting(now=at, limit=100) == [expected.pk]
        assert limits.release_waiting(now=at, limit=100) == []
        assert fresh_current(job) == expected.pk
        run(expected.pk, at)
    assert {status for _, status, _ in history(job)} == {ExecutionStatus.COMPLETED}
