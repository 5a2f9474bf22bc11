"""``scheduling.api``: what a domain app can do with the engine, and nothing more.

These run on PostgreSQL and on SQLite (``make test`` runs both). The test-only app
``tests.tasktable_app`` declares its ``Chore`` table exactly as a domain app would.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from config.celery import app as celery_app
from scheduling import api
from scheduling.models import Execution, ExecutionStatus, Job, JobStatus
from scheduling.rules import tasktables
from scheduling.stages import attempts, claims
from tests.conftest import with_key_prefix
from tests.tasktable_app.models import Chore
from tests.tasktable_app.scheduled import run_chore

pytestmark = [pytest.mark.django_db, pytest.mark.specification]

SECOND = timedelta(seconds=1)


def test_a_declared_task_table_is_registered_with_its_runner() -> None:
    table = tasktables.get("tasktable_app.Chore")
    assert table.model is Chore and table.runner is run_chore
    assert "tasktable_app.Chore" in [t.label for t in tasktables.registered()]


def test_registering_a_table_to_a_second_runner_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        api.task_table(Chore)(lambda row, run: None)


def test_a_row_scheduled_from_code_belongs_to_the_system_owner(now: datetime) -> None:
    chore = Chore.objects.create(name="sweep")
    job = api.schedule_row(chore, timing=api.Every("PT1H"), now=now)

    assert (job.task_table, job.task_row_id) == ("tasktable_app.Chore", chore.pk)
    assert job.task == "scheduling.run_task_row"
    assert job.name == f"tasktable_app.Chore:{chore.pk}:1"
    assert job.owner == api.SYSTEM_OWNER and job.next_due_at == now
    system = get_user_model().objects.get(username=api.SYSTEM_OWNER)
    assert not system.is_active and not system.has_usable_password()


def test_one_row_can_have_several_schedules(now: datetime) -> None:
    chore = Chore.objects.create(name="digest")
    morning = api.schedule_row(chore, timing=api.Cron("0 9 * * *", tz="Europe/Berlin"), now=now)
    hourly = api.schedule_row(chore, timing=api.Every(timedelta(hours=1)), now=now)
    assert [j.id for j in api.jobs_for_row(chore)] == [morning.id, hourly.id]
    assert hourly.schedule == "every hour"


def test_policies_reach_the_job(now: datetime, owner: Any) -> None:
    job = api.schedule_task(
        "scheduling.diagnostics.noop",
        timing=api.Once(now + timedelta(hours=2)),
        kwargs={"x": 1},
        policies=api.Policies(max_retries=7, timeout=30, queue="slow", expires=600),
        name="once",
        owner=owner,
        now=now,
    )
    row = Job.objects.get(pk=job.id)
    assert (row.max_retries, row.timeout, row.queue, row.expires) == (7, 30, "slow", 600)
    assert row.kwargs == {"x": 1} and row.owner == owner


@pytest.mark.parametrize(
    ("timing", "field"),
    [
        (api.Cron("61 * * * *"), "cron"),
        (api.Cron("0 9 * * *", tz="Mars/Olympus"), "timezone"),
        (api.Every("PT0S"), "interval"),
    ],
)
def test_bad_timing_is_refused_naming_the_field(timing: Any, field: str, now: datetime) -> None:
    chore = Chore.objects.create(name="bad")
    with pytest.raises(ValidationError) as refused:
        api.schedule_row(chore, timing=timing, now=now)
    assert field in refused.value.message_dict
    assert not Job.objects.exists()


def test_only_schedulable_tasks_can_be_scheduled(now: datetime) -> None:
    with pytest.raises(ValidationError) as refused:
        api.schedule_task("celery.backend_cleanup", timing=api.Every("PT1H"), now=now)
    assert "not schedulable" in refused.value.message_dict["task"][0]


def test_deleting_a_row_unschedules_its_jobs_and_their_history(now: datetime) -> None:
    chore = Chore.objects.create(name="gone")
    job = api.schedule_row(chore, timing=api.Every("PT1M"), now=now)
    other = api.schedule_row(Chore.objects.create(name="stays"), timing=api.Every("PT1M"), now=now)
    claims.claim_due_jobs(now=now, limit=10)
    assert Execution.objects.filter(job_id=job.id).exists()

    chore.delete()

    assert not Job.objects.filter(pk=job.id).exists()
    assert not Execution.objects.filter(job_id=job.id).exists()
    assert Job.objects.filter(pk=other.id).exists()


def test_pause_resume_cancel_and_read_executions(now: datetime) -> None:
    chore = Chore.objects.create(name="ops")
    job = api.schedule_row(chore, timing=api.Every("PT1M"), now=now)
    [bell] = claims.claim_due_jobs(now=now, limit=10).bells

    assert api.pause(job, reason="maintenance window")
    assert not api.pause(job)
    paused = Job.objects.get(pk=job.id)
    assert (paused.status, paused.pause_reason) == (JobStatus.PAUSED, "maintenance window")
    assert api.resume(job) and api.job(job).status == JobStatus.ACTIVE
    assert Job.objects.get(pk=job.id).pause_reason == ""

    assert api.cancel(job, reason="not needed") == 1
    [execution] = api.executions(job)
    assert (execution.id, execution.status) == (bell.execution_id, ExecutionStatus.CANCELLED)
    assert execution.last_error == "not needed" and execution.scheduled_for == now

    api.unschedule(job)
    with pytest.raises(ValidationError):
        api.job(job.id)


@pytest.fixture
def private_broker_prefix(broker_prefix: str) -> Iterator[str]:
    """Messages published in-process go under this test's own key prefix."""
    with with_key_prefix(celery_app, broker_prefix):
        yield broker_prefix


def test_run_now_publishes_at_once(private_broker_prefix: str, now: datetime) -> None:
    job = api.schedule_row(Chore.objects.create(name="now"), timing=api.Every("PT1H"), now=now)
    execution_id = api.run_now(job)
    execution = Execution.objects.get(pk=execution_id)
    assert execution.status == ExecutionStatus.QUEUED  # no wait for the pending grace
    assert execution.task == "scheduling.run_task_row"


def test_an_occurrence_that_would_start_too_late_is_skipped_with_the_reason(
    now: datetime,
) -> None:
    job = api.schedule_row(
        Chore.objects.create(name="late"),
        timing=api.Every("PT1H"),
        policies=api.Policies(expires=60),
        now=now,
    )
    [bell] = claims.claim_due_jobs(now=now, limit=10).bells

    started = attempts.start_execution(
        execution_id=bell.execution_id, worker="w", pid=1, now=now + 61 * SECOND
    )

    assert started is None
    execution = Execution.objects.get(pk=bell.execution_id)
    assert execution.status == ExecutionStatus.SKIPPED
    assert execution.last_error.startswith("expired: would have started 61s after its due time")
    assert execution.duplicates == 0 and not execution.attempts.exists()
    assert Job.objects.get(pk=job.id).current_execution_id is None  # the next one may come


def test_an_occurrence_within_its_expiry_starts(now: datetime) -> None:
    api.schedule_row(
        Chore.objects.create(name="on time"),
        timing=api.Every("PT1H"),
        policies=api.Policies(expires=60),
        now=now,
    )
    [bell] = claims.claim_due_jobs(now=now, limit=10).bells
    started = attempts.start_execution(
        execution_id=bell.execution_id, worker="w", pid=1, now=now + 59 * SECOND
    )
    assert started is not None and started.scheduled_for == now


def test_names_that_differ_only_in_case_are_two_jobs_and_a_lookup_finds_its_own(
    make_job: Any,
) -> None:
    upper = make_job(name="Backup", task="scheduling.diagnostics.noop")
    lower = make_job(name="backup", task="scheduling.diagnostics.noop")
    assert upper.pk != lower.pk
    assert Job.objects.get(name="backup").pk == lower.pk
    assert list(Job.objects.filter(name="BACKUP")) == []
