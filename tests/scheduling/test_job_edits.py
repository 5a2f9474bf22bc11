"""Changing a job in place and retrying a failed execution: the services the admin and the
command line share (``scheduling.stages.jobs``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.core.exceptions import ValidationError

from scheduling.models import Execution, ExecutionStatus, Job, Schedule
from scheduling.rules.tasktables import TASK_ROW_TASK
from scheduling.stages import attempts, controls, edits, publishing
from tests.tasktable_app.models import Chore

pytestmark = pytest.mark.django_db

MakeJob = Callable[..., Job]
MINUTE = timedelta(minutes=1)


def test_a_retried_execution_is_published_again_and_keeps_its_attempts(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(every="PT1H", max_retries=0)
    execution = controls.run_job_now(job=job, now=now)
    attempts.start_execution(execution_id=execution.pk, worker="w", pid=1, now=now)
    attempts.fail_attempt(execution_id=execution.pk, error="boom", outcome="failed", now=now)
    assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.FAILED

    assert controls.retry_failed(job=job, now=now + MINUTE) == 1
    # not failed now
    assert not controls.retry_execution(execution_id=execution.pk, now=now + MINUTE)
    [bell] = publishing.reclaim_for_publish(now=now + MINUTE, limit=10)
    assert bell.execution_id == execution.pk
    started = attempts.start_execution(execution_id=execution.pk, worker="w", pid=1, now=now)
    assert started is not None and started.attempt == 2


def test_edit_moves_a_job_to_an_existing_schedule_and_drops_the_orphan(
    make_job: MakeJob, now: datetime
) -> None:
    shared = make_job(every="PT1H")
    job = make_job(every="PT5M")
    own = job.schedule_id
    edited = edits.edit_job(job=job, now=now, schedule=shared.schedule)
    assert edited.schedule_id == shared.schedule_id
    assert not Schedule.objects.filter(pk=own).exists()


def test_edit_switches_a_task_job_to_a_task_table_row_and_back(
    make_job: MakeJob, now: datetime
) -> None:
    row = Chore.objects.create(name="w")
    job = make_job(every="PT1H")
    edited = edits.edit_job(job=job, now=now, task_table="tasktable_app.Chore", task_row_id=row.pk)
    assert (edited.task, edited.task_table, edited.task_row_id) == (
        TASK_ROW_TASK, "tasktable_app.Chore", row.pk
    )  # fmt: skip
    back = edits.edit_job(job=job, now=now, task="scheduling.diagnostics.noop")
    assert (back.task, back.task_table, back.task_row_id) == (
        "scheduling.diagnostics.noop",
        "",
        None,
    )


def test_edit_collects_every_reason_and_saves_nothing(make_job: MakeJob, now: datetime) -> None:
    job = make_job(every="PT1H")
    with pytest.raises(ValidationError) as caught:
        edits.edit_job(job=job, now=now, timing={"interval": "PT0S"}, priority=999, task="x.y")
    assert set(caught.value.message_dict) == {"interval", "priority", "task"}
    job.refresh_from_db()
    assert (job.schedule.interval, job.priority, job.task) == (
        "PT1H", None, "scheduling.diagnostics.noop"
    )  # fmt: skip
    with pytest.raises(TypeError):
        edits.edit_job(job=job, now=now, status="paused")


def test_a_paused_job_stays_paused_when_retimed(make_job: MakeJob, now: datetime) -> None:
    job = make_job(every="PT1H")
    controls.pause_job(job=job, now=now, reason="r")
    edited = edits.edit_job(job=job, now=now, timing={"cron": "0 9 * * *"})
    assert edited.status == "paused" and edited.pause_reason == "r"
    assert edited.schedule.cron == "0 9 * * *" and edited.schedule.interval == ""
