"""The emailer's pages and runs under the apps' one rule for times and names
(docs/operations.md, *Times and names*), in a project that runs in New York."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from emailer import services
from emailer.models import SendEmailHistory
from scheduling.api import Every, instant
from scheduling.models import Execution, ExecutionStatus, Job

pytestmark = pytest.mark.django_db

#: Django's own date-time format ("Nov. 25, 2026, 11:35 a.m."), to the minute, no zone.
DJANGOS_FORMAT = re.compile(r"\b\d{1,2}:\d\d [ap]\.m\.|\bmidnight\b|\bnoon\b")
NAMED = 'email "invite" of project survey'


@pytest.fixture(autouse=True)
def in_new_york(settings: Any) -> None:
    settings.TIME_ZONE = "America/New_York"


@pytest.fixture
def scheduled(make_project: Any, make_task: Any) -> Job:
    """The task's job, made without a name: stored as ``emailer.SendEmailTask:N:1``."""
    task = make_task(make_project())
    info = services.schedule_task(task=task, timing=Every("PT1M"))
    return Job.objects.get(pk=info.id)


def test_an_email_tasks_runs_are_named_by_the_email_and_its_project(
    admin_client: Any, scheduled: Job
) -> None:
    assert scheduled.name.startswith("emailer.SendEmailTask:")
    now = timezone.now()
    Execution.objects.create(
        job=scheduled,
        task=scheduled.task,
        scheduled_for=now - timedelta(minutes=2),
        finished_at=now - timedelta(minutes=1),
        status=ExecutionStatus.FAILED,
        last_error="SMTP refused",
    )
    for url in (
        reverse("admin:scheduling_execution_changelist"),
        reverse("admin:scheduling_job_changelist"),
        "/dashboard/",
    ):
        page = admin_client.get(url).content.decode()
        assert NAMED.replace('"', "&quot;") in page, url
        assert "emailer.SendEmailTask:" not in page, url
    out = StringIO()
    call_command("executions", stdout=out)
    assert f" {NAMED} failed " in out.getvalue()
    out = StringIO()
    call_command("jobs", "list", "--json", stdout=out)
    [job] = json.loads(out.getvalue())
    assert (job["name"], job["title"]) == (scheduled.name, NAMED)


def test_the_history_shows_its_times_to_the_second_in_the_named_zone(
    admin_client: Any, scheduled: Job
) -> None:
    due = timezone.now().replace(microsecond=250000)
    history = SendEmailHistory.objects.create(
        task_id=scheduled.task_row_id,
        execution_id=1,
        job_id=scheduled.pk,
        scheduled_batch_start_time=due,
        started_at=due + timedelta(seconds=1),
        updated_at=due + timedelta(seconds=2),
    )
    page = admin_client.get(reverse("admin:emailer_sendemailhistory_changelist")).content
    assert instant(history.scheduled_batch_start_time) in page.decode()
    detail = reverse("admin:emailer_sendemailhistory_change", args=[history.pk])
    text = admin_client.get(detail).content.decode()
    assert instant(history.scheduled_batch_start_time) in text
    assert instant(history.started_at) in text
    assert not DJANGOS_FORMAT.search(text), DJANGOS_FORMAT.search(text)


def test_the_email_task_page_names_its_jobs_in_words_and_a_paused_one_is_not_due(
    admin_client: Any, scheduled: Job
) -> None:
    """The task's page lists the jobs that run it as the engine's pages name them, never by
    the stored ``emailer.SendEmailTask:N:1``; a paused job there shows no next run."""
    url = reverse("admin:emailer_sendemailtask_change", args=[scheduled.task_row_id])
    page = admin_client.get(url).content.decode()
    jobs_field = page[page.index("field-schedules") :]
    jobs_field = jobs_field[: jobs_field.index("</fieldset>")]
    assert "emailer.SendEmailTask:" not in page
    assert NAMED.replace('"', "&quot;") + " · every minute · next <time" in jobs_field
    assert f">{instant(scheduled.next_due_at)}</time>" in jobs_field
    Job.objects.filter(pk=scheduled.pk).update(
        status="paused", next_due_at=timezone.now() - timedelta(days=2)
    )
    page = admin_client.get(url).content.decode()
    jobs_field = page[page.index("field-schedules") :]
    jobs_field = jobs_field[: jobs_field.index("</fieldset>")]
    assert "· next paused</div>" in jobs_field
    listed = admin_client.get(reverse("admin:emailer_sendemailtask_changelist")).content.decode()
    assert '<td class="field-next_run">-</td>' in listed


def test_scheduling_a_task_without_a_job_name_names_the_job_in_words(
    make_project: Any, make_task: Any
) -> None:
    make_task(make_project())
    out = StringIO()
    call_command("emailer", "task", "schedule", "invite", "--every", "PT1H", stdout=out)
    said = out.getvalue().strip()
    assert said.startswith(f"job for {NAMED} runs every hour; next at "), said
    assert "emailer.SendEmailTask:" not in said
    out = StringIO()
    call_command("emailer", "task", "schedule", "invite", "--every", "PT1H", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["title"].startswith(NAMED)  # a second job of the task: "(schedule 2)"
    assert data["name"].startswith("emailer.SendEmailTask:")
    out = StringIO()
    call_command(
        "emailer", "task", "schedule", "invite", "--every", "PT1H", "--job-name", "hourly",
        stdout=out,
    )  # fmt: skip
    assert out.getvalue().startswith("job hourly runs invite every hour; next at ")
