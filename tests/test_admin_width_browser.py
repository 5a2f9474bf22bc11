"""Every list in the admin reads at a glance at 1,400 px: no changelist is wider than its box.

Each registered model's changelist is opened in Debian's chromium (Playwright) with rows of
every kind in it, with the long values real projects have (engine jobs and their history, a
subscription whose renewal was declined, an email run with its deliveries and history), with
Django's navigation sidebar open (its default) and collapsed; its table's scroll width is
compared with the width of the box that holds it, and the page's with the window's. What does
not decide a click belongs on the object's page; times wrap onto two lines (date, then time
and how long ago) rather than widen a column (``scheduling/duecourse.css``).
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.utils import timezone

from emailer import services as emailer_services
from emailer.models import Participant, Project, SendEmailTask
from emailer.sending import run_send_email_task
from scheduling.api import Cron, RunContext
from scheduling.models import Execution, Job, Schedule
from scheduling.stages import jobs
from subscriptions import payments, pricing, renewals, services
from subscriptions.models import SubscriptionJob
from tests.conftest import send_mail_through
from tests.factories import create_job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WIDTH = 1400
#: Every list of the three apps; each is measured with rows in it.
EVERY_LIST = (
    "scheduling.Job",
    "scheduling.Schedule",
    "scheduling.Execution",
    "emailer.Project",
    "emailer.Participant",
    "emailer.SendEmailTask",
    "emailer.SendEmailHistory",
    "emailer.Delivery",
    "subscriptions.Subscription",
    "subscriptions.SubscriptionJob",
    "subscriptions.Order",
    "subscriptions.DueBatch",
    "subscriptions.GatewayCharge",
    "subscriptions.GatewayDecline",
    "subscriptions.GatewayScript",
)
#: A host project's task, by the dotted name such projects give theirs.
HOST_TASK = "hostproject.billing.tasks.reconcile_overdue_invoices_for_every_customer"


def every_kind_of_row(owner: Any, settings: Any) -> None:
    """Rows of every list, with the long values real projects have: long names, addresses and
    reasons, a cron schedule in a long zone name, another owner with a long username."""
    now = timezone.now()
    colleague = get_user_model().objects.create_user(
        "maria.fernandez-gonzalez@finance.example.org", is_staff=True
    )
    create_job(
        owner=colleague,
        name="reconcile invoices with the payment provider's settlement files",
        task="scheduling.diagnostics.steps",
        cron="*/15 9-17 * * 1-5",
        tz="America/Argentina/Buenos_Aires",
        now=now,
        queue="finance-reconciliation",
    )
    paused = create_job(
        owner=colleague,
        name="export-warehouse-stock-levels-to-the-erp",
        task="scheduling.diagnostics.noop",
        every="P1DT12H",
        now=now,
    )
    jobs.pause_job(
        job=paused, now=now, reason="the ERP is being migrated to its new data centre this week"
    )
    hosts = create_job(
        owner=owner, name="reconcile-overdue-invoices", task="scheduling.diagnostics.noop",
        cron="30 2 * * *", tz="Europe/Paris", now=now,
    )  # fmt: skip
    Job.objects.filter(pk=hosts.pk).update(task=HOST_TASK)
    Schedule.objects.create(
        owner=colleague,
        name="weekday mornings in the Buenos Aires office",
        cron="0 9 * * 1-5",
        timezone="America/Argentina/Buenos_Aires",
    )
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
    services.create_subscription(
        customer="accounts-payable@a-rather-long-company-name.example.com",
        items=[pricing.ItemSpec("PREMIUM-SUPPORT-PLAN-ANNUAL-EU", 1, Decimal("1249.00"))],
        interval="P1M",
        start=now,
        end=None,
        now=now,
    )
    run = RunContext(execution_id=0, job_id=None, scheduled_for=now, attempt=1)
    for batch in {row.batch_id for row in SubscriptionJob.objects.all()}:
        renewals.run_batch(batch, run=run, clock=timezone.now)
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
    emailer_services.schedule_task(
        task=task, timing=Cron("0 9 * * 1-5", tz="Europe/Paris"), name=task.name, now=now
    )
    run_send_email_task(task, RunContext(execution_id=1, job_id=None, scheduled_for=now, attempt=1))
    run_send_email_task(
        task,
        RunContext(
            execution_id=2, job_id=None, scheduled_for=now + timedelta(minutes=1), attempt=1
        ),
    )


#: Django's navigation sidebar, open (its default) or collapsed by its toggle, a choice the
#: browser keeps in local storage.
SIDEBAR = {"open": "true", "collapsed": "false"}


@pytest.mark.parametrize("sidebar", SIDEBAR)
def test_no_changelist_is_wider_than_its_container_at_1400_px(
    page: Any, admin_user: Any, settings: Any, sidebar: str
) -> None:
    send_mail_through(settings, "locmem")
    every_kind_of_row(admin_user, settings)
    page.set_viewport_size({"width": WIDTH, "height": 900})
    page.evaluate(
        "open => localStorage.setItem('django.admin.navSidebarIsOpen', open)", SIDEBAR[sidebar]
    )
    too_wide, measured = {}, []
    for model in admin.site._registry:
        opts = model._meta
        url = f"{page.base}/admin/{opts.app_label}/{opts.model_name}/"
        page.goto(url)
        if page.locator("#result_list").count() == 0:
            continue  # an empty list has no table
        found = page.evaluate(
            """() => {
                const table = document.querySelector('#result_list');
                const box = table.closest('.results') || table.parentElement;
                return {
                    table: table.scrollWidth, box: box.clientWidth,
                    page: document.documentElement.scrollWidth, window: window.innerWidth,
                    open: document.querySelector('#main').classList.contains('shifted'),
                    rows: table.querySelectorAll('tbody tr').length,
                    columns: Array.from(table.querySelectorAll('thead th'), (th) =>
                        `${th.className.split(' ')[0]} ${th.offsetWidth}`).join(', '),
                };
            }"""
        )
        assert found["open"] == (sidebar == "open"), url
        measured.append(opts.label)
        if found["table"] > found["box"] or found["page"] > found["window"]:
            too_wide[opts.label] = found
    assert too_wide == {}, "\n".join(f"{label}: {found}" for label, found in too_wide.items())
    # Every list of the three apps was measured with rows in it.
    for label in EVERY_LIST:
        assert label in measured, label
    # Every changelist rendered and ran its scripts with nothing refused by a policy (the
    # engine's lists send theirs: scheduling/csp.py).
    assert page.csp_violations == []
