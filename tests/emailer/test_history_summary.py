"""What an operator sees of a task's runs: failed deliveries count as failures for the engine,
consecutive runs that did nothing share one history row, and a task whose audience is
exhausted says so on its page."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse

from emailer.models import SendEmailHistory
from emailer.sending import run_send_email_task
from scheduling.api import RunContext
from tests.conftest import FIXED_NOW
from tests.emailer.conftest import address

pytestmark = [pytest.mark.django_db]

executions = itertools.count(5000)


class Run:
    """One occurrence's run context, remembering what the run reported to the engine."""

    def __init__(self, minutes: int) -> None:
        self.reported: list[tuple[int, str]] = []
        self.context = RunContext(
            execution_id=next(executions),
            job_id=None,
            scheduled_for=FIXED_NOW + timedelta(minutes=minutes),
            attempt=1,
            _report=lambda _id, count, detail: self.reported.append((count, detail)),
        )


def test_failed_deliveries_are_reported_to_the_engine_as_failures(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    smtp_settings.recorder.refuse[address(1)] = "550 5.1.1 No such user"
    task = make_task(make_project(participants=4))
    run = Run(0)
    result = run_send_email_task(task, run.context)
    assert (result["sent"], result["failed"]) == (3, 1)
    assert run.reported == [(1, "1 failed and 0 uncertain deliveries")]

    smtp_settings.recorder.refuse.clear()
    clean = make_task(make_project("other", participants=2), name="clean")
    quiet = Run(0)
    run_send_email_task(clean, quiet.context)
    assert quiet.reported == []


def test_consecutive_runs_that_did_nothing_share_one_history_row(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    task = make_task(make_project(participants=3))
    run_send_email_task(task, Run(0).context)
    for minute in (1, 2, 3, 4):
        assert run_send_email_task(task, Run(minute).context)["status"] == "skipped"

    rows = list(SendEmailHistory.objects.filter(task=task).order_by("scheduled_batch_start_time"))
    assert [(r.status, r.runs) for r in rows] == [("completed", 1), ("skipped", 4)]
    idle = rows[1]
    assert idle.scheduled_batch_start_time == FIXED_NOW + timedelta(minutes=1)
    assert idle.last_batch_start_time == FIXED_NOW + timedelta(minutes=4)
    assert idle.note.startswith("nobody left to mail")


def test_a_task_whose_audience_is_exhausted_says_so_on_its_page(
    smtp_settings: Any, make_project: Any, make_task: Any, admin_client: Any
) -> None:
    task = make_task(make_project(participants=2))
    url = reverse("admin:emailer_sendemailtask_change", args=[task.pk])
    assert "participants are due" in admin_client.get(url).content.decode()
    run_send_email_task(task, Run(0).context)
    page = admin_client.get(url).content.decode()
    assert "Exhausted" in page and "nobody left to mail" in page

    listing = admin_client.get(reverse("admin:emailer_sendemailtask_changelist")).content.decode()
    assert "not scheduled" in listing and "completed" in listing and "2 sent" in listing
