"""Every list in the admin reads at a glance at 1,400 px: no changelist is wider than its box.

Each registered model's changelist is opened in Debian's chromium (Playwright) with rows of
every kind in it (engine jobs and their history, a subscription whose renewal was declined, an
email run with its deliveries and history), and its table's scroll width is compared with
the width of the box that holds it. What does not decide a click belongs on the object's page.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib import admin
from django.utils import timezone

from emailer.models import Participant, Project, SendEmailTask
from emailer.sending import run_send_email_task
from scheduling.api import RunContext
from scheduling.models import Execution
from subscriptions import payments, pricing, renewals, services
from subscriptions.models import SubscriptionJob
from tests.conftest import send_mail_through
from tests.factories import create_job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WIDTH = 1400


def every_kind_of_row(owner: Any, settings: Any) -> None:
    now = timezone.now()
    job = create_job(
        owner=owner,
        name="nightly-report-for-the-finance-department",
        task="scheduling.diagnostics.noop",
        every="PT10S",
        now=now,
    )
    Execution.objects.bulk_create(
        Execution(
            job=job,
            task=job.task,
            scheduled_for=now - timedelta(seconds=10 * step + 1),
            status="failed" if step % 3 == 0 else "completed",
            worker="celery@a-rather-long-worker-host-name.example.internal",
            started_at=now - timedelta(seconds=10 * step),
            finished_at=now - timedelta(seconds=10 * step - 1),
            last_heartbeat_at=now - timedelta(seconds=10 * step - 1),
            last_error="TimeoutError: the upstream service did not answer within 30 seconds",
        )
        for step in range(30)
    )
    settings.SUBSCRIPTIONS_BATCH_SIZE = 1_000_000
    subscription = services.create_subscription(
        customer="a-customer-with-a-long-name@example.org",
        items=[pricing.ItemSpec("COFFEE-BEANS-ETHIOPIA-1KG", 2, Decimal("19.90"))],
        interval="PT1M",
        start=now,
        end=None,
        now=now,
    )
    payments.script_customer(customer=subscription.customer, declines=1)
    job_row = SubscriptionJob.objects.get(subscription=subscription)
    run = RunContext(execution_id=0, job_id=None, scheduled_for=now, attempt=1)
    renewals.run_batch(job_row.batch_id, run=run, clock=timezone.now)
    project = Project.objects.create(name="customer-satisfaction-survey-2030", state="active")
    Participant.objects.bulk_create(
        Participant(
            project=project,
            email=f"participant-{i}@a-long-domain.example.org",
            name=f"Participant number {i}",
        )
        for i in range(5)
    )
    task = SendEmailTask(
        project=project,
        name="invitation-to-the-customer-satisfaction-survey",
        subject="Your survey, {{ participant.name }}",
        body="Hello {{ participant.name }}. Stop: {{ unsubscribe_url }}",
        from_email="survey@example.org",
    )
    task.full_clean()
    task.save()
    run_send_email_task(task, RunContext(execution_id=1, job_id=None, scheduled_for=now, attempt=1))
    run_send_email_task(
        task,
        RunContext(
            execution_id=2, job_id=None, scheduled_for=now + timedelta(minutes=1), attempt=1
        ),
    )


def test_no_changelist_is_wider_than_its_container_at_1400_px(
    page: Any, admin_user: Any, settings: Any
) -> None:
    send_mail_through(settings, "locmem")
    every_kind_of_row(admin_user, settings)
    page.set_viewport_size({"width": WIDTH, "height": 900})
    too_wide = {}
    for model in admin.site._registry:
        opts = model._meta
        url = f"{page.base}/admin/{opts.app_label}/{opts.model_name}/"
        page.goto(url)
        if page.locator("#result_list").count() == 0:
            continue  # an empty list has no table
        table, box = page.evaluate(
            """() => {
                const table = document.querySelector('#result_list');
                const box = table.closest('.results') || table.parentElement;
                return [table.scrollWidth, box.clientWidth];
            }"""
        )
        if table > box:
            too_wide[opts.label] = (table, box)
    assert too_wide == {}
    # Every changelist rendered and ran its scripts with nothing refused by a policy (the
    # engine's lists send theirs: scheduling/csp.py).
    assert page.csp_violations == []
