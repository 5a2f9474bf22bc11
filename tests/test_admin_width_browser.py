"""Every list in the admin reads at a glance at 1,400 px: no changelist is wider than its box,
no column that names its rows is narrower than 120 px, and no word is broken between letters.

Each registered model's changelist is opened in Debian's chromium (Playwright) with rows of
every kind in it, with the long values real projects have (engine jobs and their history, runs
a policy or a person stopped with their reasons, a Django task run named by its dotted path, a
subscription whose renewal was declined, an email run with its deliveries and history), with
Django's navigation sidebar open (its default) and the list's filter sidebar beside the table,
then with the navigation sidebar collapsed. Its table's scroll width is compared with the width
of the box that holds it, and the page's with the window's; the columns that name its rows are
measured; every word of its rows is found on one line. What does not decide a click belongs on
the object's page; times wrap onto two lines (date, then time and how long ago) rather than
widen a column, and long dotted names wrap after a dot rather than inside a word
(``scheduling/duecourse.css``)."""

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
from scheduling.models import ChangeSource, Execution, Job, Schedule
from scheduling.stages import controls, overlaps
from scheduling.stages.audit import Actor
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
    "subscriptions_testgateway.GatewayCharge",
    "subscriptions_testgateway.GatewayDecline",
    "subscriptions_testgateway.GatewayScript",
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
    controls.pause_job(
        job=paused,
        now=now,
        reason="the ERP is being migrated to its new data centre this week",
        by=Actor(who=colleague.get_username(), source=ChangeSource.COMMAND),
    )
    create_job(
        owner=colleague, name="one-off-reindex", task="scheduling.diagnostics.noop",
        at=now + timedelta(days=3), now=now,
    )  # fmt: skip
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
    # Runs a policy or a person decided, with their reasons under the badge, and a run
    # enqueued through Django's Tasks framework, named by its task's dotted path.
    Execution.objects.bulk_create(
        Execution(
            job=hosts if status != "failed" else None,
            task=HOST_TASK,
            scheduled_for=now - timedelta(minutes=step + 1),
            status=status,
            finished_at=now - timedelta(minutes=step),
            last_error=reason,
        )
        for step, (status, reason) in enumerate(
            (
                ("cancelled", f"cancelled in the admin by {colleague.get_username()}"),
                ("superseded", overlaps.superseded_note(now.replace(microsecond=0))),
                ("skipped", "missed while the scheduler was away or the job was paused"),
                (
                    "failed",
                    "ConnectionRefusedError: [Errno 111] Connection refused\n  File "
                    '"/srv/app/hostproject/billing/tasks.py", line 88, in reconcile',
                ),
            )
        )
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
#: browser keeps in local storage. A list with filters shows its filter sidebar beside the
#: table whichever it is, each filter unfolded (Django's default, kept in session storage).
SIDEBAR = {"open": "true", "collapsed": "false"}
#: The narrowest a column that names its rows may be.
NAME_MIN_PX = 120
#: The columns that name each list's rows (a name, a customer, an address, what a run runs):
#: the ones a reader scans a list by, by the name Django's header gives them (``column-*``).
NAME_COLUMNS = {
    "scheduling.Job": ("job_name", "target"),
    "scheduling.Schedule": ("__str__",),
    "scheduling.Execution": ("run",),
    "emailer.Project": ("name",),
    "emailer.Participant": ("email", "name", "project"),
    "emailer.SendEmailTask": ("name", "project"),
    "emailer.SendEmailHistory": ("task",),
    "emailer.Delivery": ("email", "task"),
    "subscriptions.Subscription": ("customer",),
    "subscriptions.SubscriptionJob": ("customer",),
    "subscriptions_testgateway.GatewayCharge": ("customer",),
    "subscriptions_testgateway.GatewayDecline": ("customer",),
    "subscriptions_testgateway.GatewayScript": ("customer",),
}

#: What one changelist measures in the browser: the table against its box and the page
#: against the window; whether each sidebar is open; each column's width; and every word of
#: the rows that a line ends inside of. A word here is a run of letters and digits: a line may
#: end at a space, at a hyphen, or after a dot, underscore, slash or at-sign of a dotted name,
#: a zone or an address (``display.breakable``), never between two letters.
MEASURE = """() => {
    const table = document.querySelector('#result_list');
    const box = table.closest('.results') || table.parentElement;
    const filters = document.querySelector('#changelist-filter');
    const widths = {};
    for (const th of table.querySelectorAll('thead th')) {
        const column = Array.from(th.classList).find((name) => name.startsWith('column-'));
        if (column) widths[column.slice('column-'.length)] = th.offsetWidth;
    }
    const broken = [];
    const walker = document.createTreeWalker(table.tBodies[0], NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const word of node.data.matchAll(/[\\p{L}\\p{N}]{2,}/gu)) {
            const range = document.createRange();
            range.setStart(node, word.index);
            range.setEnd(node, word.index + word[0].length);
            const lines = new Set(Array.from(range.getClientRects(), (rect) => rect.top));
            if (lines.size > 1) broken.push(word[0]);
        }
    }
    return {
        table: table.scrollWidth, box: box.clientWidth,
        page: document.documentElement.scrollWidth, window: window.innerWidth,
        open: document.querySelector('#main').classList.contains('shifted'),
        filters: filters === null ? null : filters.offsetWidth > 0
            && Array.from(filters.querySelectorAll('details')).every((one) => one.open),
        rows: table.querySelectorAll('tbody tr').length,
        widths, broken,
    };
}"""


@pytest.mark.parametrize("sidebar", SIDEBAR)
def test_every_changelist_fits_its_box_and_names_read_whole_at_1400_px(
    page: Any, admin_user: Any, settings: Any, sidebar: str
) -> None:
    """With the navigation sidebar open and the filter sidebar beside the table, or with the
    navigation sidebar collapsed: no table wider than its box, no name column narrower than
    ``NAME_MIN_PX``, and no word broken between two letters."""
    send_mail_through(settings, "locmem")
    every_kind_of_row(admin_user, settings)
    page.set_viewport_size({"width": WIDTH, "height": 900})
    page.evaluate(
        "open => { localStorage.setItem('django.admin.navSidebarIsOpen', open);"
        " sessionStorage.removeItem('django.admin.filtersState'); }",
        SIDEBAR[sidebar],
    )
    too_wide, too_narrow, broken, measured, filtered = {}, {}, {}, [], []
    for model in admin.site._registry:
        opts = model._meta
        url = f"{page.base}/admin/{opts.app_label}/{opts.model_name}/"
        page.goto(url)
        if page.locator("#result_list").count() == 0:
            continue  # an empty list has no table
        found = page.evaluate(MEASURE)
        assert found["open"] == (sidebar == "open"), url
        assert found["filters"] in (None, True), f"{url}: the filter sidebar is not open"
        measured.append(opts.label)
        if found["filters"]:
            filtered.append(opts.label)
        if found["table"] > found["box"] or found["page"] > found["window"]:
            too_wide[opts.label] = found
        narrow = {
            column: found["widths"][column]
            for column in NAME_COLUMNS.get(opts.label, ())
            if found["widths"][column] < NAME_MIN_PX
        }
        if narrow:
            too_narrow[opts.label] = found["widths"]
        if found["broken"]:
            broken[opts.label] = sorted(set(found["broken"]))
    assert too_wide == {}, "\n".join(f"{label}: {found}" for label, found in too_wide.items())
    assert too_narrow == {}, "\n".join(f"{label}: {widths}" for label, widths in too_narrow.items())
    assert broken == {}, "\n".join(f"{label}: {words}" for label, words in broken.items())
    # Every list of the three apps was measured with rows in it, the filter sidebar open
    # beside those that filter.
    for label in EVERY_LIST:
        assert label in measured, label
    assert {"scheduling.Job", "scheduling.Execution", "emailer.Delivery"} <= set(filtered)
    # Every changelist rendered and ran its scripts with nothing refused by a policy (the
    # engine's lists send theirs: scheduling/pages/csp.py).
    assert page.csp_violations == []
