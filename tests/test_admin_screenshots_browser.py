"""The admin as a reader of the README sees it: screenshots at 1,400 by 900 px,
with the navigation sidebar open.

``manage.py loaddemo`` fills the database (the demo jobs, the emailer's small mailing, three
subscriptions of which one is declined), and a day of history is added: a run every hour of
each recurring job, a failure now and then, one running now, the mailing's runs. Then Debian's
chromium (Playwright) opens the job list, a job's page, the execution list, the dashboard, the
email task's page and the declined subscription's page, checks each shows what its picture is
for, and saves it under ``var/screenshots/`` (ignored by git).

``make screenshots`` runs this file with ``DUECOURSE_UPDATE_SCREENSHOTS=1``, which also copies
the pictures to ``docs/screenshots/`` (README.md and docs/admin.md show them): an ordinary test
run never changes the git tree.
"""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.utils import timezone

from emailer.models import SendEmailTask
from emailer.sending import run_send_email_task
from scheduling.api import RunContext
from scheduling.models import Execution, Job, SchedulerState
from scheduling.timing.schedules import parse_duration
from subscriptions import renewals
from subscriptions.models import DueBatch, Subscription
from tests.conftest import ROOT, send_mail_through

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ARTIFACTS = ROOT / "var" / "screenshots"
DOCS = ROOT / "docs" / "screenshots"
SIZE = {"width": 1400, "height": 900}


def a_day_of_history(now: Any) -> None:
    """Each recurring demo job ran on its interval (at most hourly) for its last 24 runs; now and
    then a run failed, and the second job's latest did; the first job runs now."""
    engine_jobs = Job.objects.filter(task_table="").exclude(schedule__interval="")
    for offset, job in enumerate(engine_jobs.order_by("pk")):
        step = min(parse_duration(job.schedule.interval), timedelta(hours=1))
        rows = []
        for back in range(1, 25):
            due = now - step * back - timedelta(minutes=7 * offset)
            failed = (back + offset) % 9 == 0 or (offset, back) == (1, 1)
            rows.append(
                Execution(
                    job=job,
                    task=job.task,
                    scheduled_for=due,
                    status="failed" if failed else "completed",
                    worker="celery@worker-1.example.internal",
                    started_at=due + timedelta(seconds=0.3 + offset * 0.2),
                    finished_at=due + timedelta(seconds=1.5 + back % 4),
                    retry_count=3 if failed else 0,
                    last_error="ConnectionError: the reporting database did not answer"
                    if failed
                    else "",
                )
            )
        Execution.objects.bulk_create(rows)
    running = engine_jobs.order_by("pk").first()
    Execution.objects.create(
        job=running,
        task=running.task,
        scheduled_for=now - timedelta(seconds=4),
        status="running",
        worker="celery@worker-1.example.internal",
        started_at=now - timedelta(seconds=3),
        last_heartbeat_at=now,
    )
    SchedulerState.objects.create(
        name="scheduler@host-a:1",
        last_tick_at=now,
        last_tick_seconds=0.002,
        ticks_total=43_200,
        claimed_total=1_210,
        started_at=now - timedelta(days=1),
    )


def the_mailing_and_renewals_ran(now: Any) -> None:
    """The demo mailing's first two runs, and every subscription's first renewal (the declined
    customer's retried until it needs attention)."""
    task = SendEmailTask.objects.get()
    for minute in (2, 1):
        due = now - timedelta(minutes=minute)
        run_send_email_task(task, RunContext(execution_id=minute, job_id=None, scheduled_for=due,
                                             attempt=1))  # fmt: skip
    run = RunContext(execution_id=0, job_id=None, scheduled_for=now, attempt=1)
    for _ in range(5):  # the first try, then each retry (placed ten minutes on) at once
        due = DueBatch.objects.filter(closed_at__isnull=True, due_at__lte=now + timedelta(hours=1))
        for batch in due.values_list("pk", flat=True):
            renewals.run_batch(batch, run=run, clock=timezone.now)


def shoot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    assert path.stat().st_size > 10_000
    if os.environ.get("DUECOURSE_UPDATE_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS / path.name)


def test_the_admin_pages_of_the_readme_render_with_the_demo(
    page: Any, admin_user: Any, settings: Any
) -> None:
    settings.SCHEDULING_DEMO = True
    send_mail_through(settings, "locmem")
    cache.clear()
    call_command("loaddemo")
    now = timezone.now()
    a_day_of_history(now)
    the_mailing_and_renewals_ran(now)
    page.set_viewport_size(SIZE)
    base = f"{page.base}/admin"

    page.goto(f"{base}/scheduling/job/")
    assert page.evaluate("document.querySelector('#main').classList.contains('shifted')")
    assert "failing" in page.locator("#result_list").inner_text()
    shoot(page, "job-list")

    job = Job.objects.filter(task_table="").order_by("pk").first()
    page.goto(f"{base}/scheduling/job/{job.pk}/change/")
    assert "running" in page.locator(".duecourse-executions").inner_text()
    shoot(page, "job-page")

    page.goto(f"{base}/scheduling/execution/")
    assert "failed" in page.locator("#result_list").inner_text()
    shoot(page, "execution-list")

    page.goto(f"{page.base}/dashboard/")
    page.wait_for_selector("#panel-chart svg")
    shoot(page, "dashboard")

    task = SendEmailTask.objects.get()
    page.goto(f"{base}/emailer/sendemailtask/{task.pk}/change/")
    assert "demo-invitation" in page.locator(".field-schedules").inner_text()
    shoot(page, "email-task")

    declined = Subscription.objects.get(customer="grace@example.com")
    page.goto(f"{base}/subscriptions/subscription/{declined.pk}/change/")
    assert "declined" in page.locator("#content").inner_text()
    shoot(page, "subscription")
    assert page.csp_violations == []
