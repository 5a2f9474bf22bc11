"""Jobs the engine makes for a domain app on its own (the one-offs behind an internal task
table, as subscriptions' due batches are) stay out of the operator's way: the job and schedule
lists and the dashboard's job panels leave them out unless asked, their runs stay in the
history, and ``prune_history`` removes them with their history once they are finished."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from scheduling import api
from scheduling.models import Attempt, Execution, Job, Schedule
from scheduling.web import overview
from tests.tasktable_app.models import ChoreBatch

pytestmark = [pytest.mark.django_db]


def internal_one_off(name: str, *, at: datetime) -> Job:
    row = ChoreBatch.objects.create(name=name)
    info = api.schedule_row(
        row, timing=api.Once(at=at, allow_past=True), name=f"ChoreBatch:{row.pk}:{name}"
    )
    return Job.objects.get(pk=info.id)


def names_listed(admin_client: Any, url: str) -> str:
    return admin_client.get(url).content.decode()


def test_the_job_list_leaves_internal_one_offs_out_unless_asked(
    admin_client: Any, make_job: Any
) -> None:
    soon = timezone.now() + timedelta(minutes=5)
    batch = internal_one_off("renewals at nine", at=soon)
    make_job(name="nightly-report")
    url = reverse("admin:scheduling_job_changelist")

    default = names_listed(admin_client, url)
    assert "nightly-report" in default and batch.name not in default
    assert batch.name in names_listed(admin_client, f"{url}?made_by=all")
    only = names_listed(admin_client, f"{url}?made_by=internal")
    assert batch.name in only and "nightly-report" not in only
    # Its page and its runs are still there.
    page = admin_client.get(reverse("admin:scheduling_job_change", args=[batch.pk]))
    assert page.status_code == 200


def test_the_schedule_list_leaves_the_one_offs_instants_out_unless_asked(
    admin_client: Any, make_job: Any
) -> None:
    batch = internal_one_off("renewals", at=timezone.now() + timedelta(hours=1))
    make_job(name="quick", every="PT10S")
    url = reverse("admin:scheduling_schedule_changelist")
    default = names_listed(admin_client, url)
    assert "every 10 seconds" in default and "once at" not in default
    assert "once at" in names_listed(admin_client, f"{url}?made_by=all")
    assert Schedule.objects.filter(jobs=batch).exists()


def test_the_dashboards_job_panels_leave_internal_jobs_out_unless_asked(
    admin_client: Any, make_job: Any
) -> None:
    now = timezone.now()
    batch = internal_one_off("renewals", at=now + timedelta(minutes=10))
    job = make_job(name="visible", at=now + timedelta(minutes=20), now=now)
    due = overview.due_soon(now=now, internal=False)
    assert [j.pk for j in due.rows] == [job.pk]
    assert {j.pk for j in overview.due_soon(now=now).rows} == {job.pk, batch.pk}

    page = admin_client.get(reverse("scheduling:dashboard")).content.decode()
    assert "visible" in page and batch.name not in page
    shown = admin_client.get(reverse("scheduling:dashboard") + "?internal=1").content.decode()
    assert batch.name in shown


def prune(*argv: str) -> dict[str, Any]:
    out = StringIO()
    call_command("prune_history", *argv, "--json", stdout=out)
    return json.loads(out.getvalue())


def ran(job: Job, *, at: datetime, status: str = "completed") -> Execution:
    execution = Execution.objects.create(job=job, task=job.task, scheduled_for=at, status=status)
    Attempt.objects.create(execution=execution, number=1, started_at=at, outcome="completed")
    return execution


def test_prune_history_removes_finished_internal_one_offs_with_their_history(
    make_job: Any,
) -> None:
    old = timezone.now() - timedelta(days=40)
    done = internal_one_off("done long ago", at=old)
    ran(done, at=old)
    Job.objects.filter(pk=done.pk).update(status="completed")
    unfinished = internal_one_off("still retrying", at=old)
    ran(unfinished, at=old, status="retry")
    Job.objects.filter(pk=unfinished.pk).update(status="completed")
    recent = internal_one_off("done today", at=timezone.now() - timedelta(hours=1))
    ran(recent, at=timezone.now() - timedelta(hours=1))
    Job.objects.filter(pk=recent.pk).update(status="completed")
    mine = make_job(name="my-one-off", at=old + timedelta(seconds=1), now=old, allow_past=True)
    ran(mine, at=old)
    Job.objects.filter(pk=mine.pk).update(status="completed")

    report = prune("--older-than", "30d")

    assert report["one_offs"] == 1
    assert not Job.objects.filter(pk=done.pk).exists()
    assert not Execution.objects.filter(job_id=done.pk).exists()
    assert not Schedule.objects.filter(pk=done.schedule_id).exists()
    assert set(Job.objects.values_list("pk", flat=True)) == {unfinished.pk, recent.pk, mine.pk}
    assert Execution.objects.filter(job=mine).count() == 1  # kept: the latest of its job
