"""What an operator sees in a real browser (Debian's chromium driven by Playwright): a declined
renewal shows its state and the gateway's reply on the subscription's page and is counted on
the dashboard; the Jobs list leaves the due batches' one-off jobs out until asked."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from scheduling.api import jobs_for_row
from scheduling.models import Execution, Job
from scheduling.stages import selectors
from scheduling.worker import runtime
from scheduling.worker.run_context import RunContext
from subscriptions import payments, pricing, services
from subscriptions.models import SubscriptionJob
from subscriptions.scheduled import run_due_batch

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def declined_renewal(settings: Any) -> Any:
    """A subscription whose first renewal was declined, run as the engine runs its batch: an
    execution of the batch's one-off job, whose run context records what the run reports."""
    settings.SUBSCRIPTIONS_BATCH_SIZE = 1_000_000
    now = timezone.now()
    subscription = services.create_subscription(
        customer="alice",
        items=[pricing.ItemSpec("COFFEE", 2, Decimal("9.90"))],
        interval="P1M",
        start=now,
        end=None,
        now=now,
    )
    payments.script_customer(customer="alice", declines=1)
    batch = SubscriptionJob.objects.get(subscription=subscription).batch
    (job,) = jobs_for_row(batch)
    execution = Execution.objects.create(
        job_id=job.id, task="scheduling.run_task_row", scheduled_for=now, status="running",
        started_at=now, last_heartbeat_at=now,
    )
    run = RunContext(
        execution_id=execution.pk, job_id=job.id, scheduled_for=now, attempt=1,
        _report=runtime._report_failures,
    )
    assert run_due_batch(batch, run) == {"retry": 1}
    Execution.objects.filter(pk=execution.pk).update(
        status="completed", finished_at=now + timedelta(seconds=1)
    )
    return subscription


def test_a_declined_renewal_shows_its_state_and_reason_and_the_dashboard_counts_it(
    page: Any, settings: Any
) -> None:
    subscription = declined_renewal(settings)
    page.goto(f"{page.base}/admin/subscriptions/subscription/{subscription.pk}/change/")
    status = page.locator(".field-status .readonly").inner_text()
    reason = page.locator(".field-attention_reason .readonly").inner_text()
    assert status == "past due"
    assert "PaymentDeclined" in reason and "retried (1 of" in reason
    assert "PaymentDeclined" in page.locator("#jobs-group").inner_text()

    page.goto(f"{page.base}/admin/subscriptions/subscription/?attention=failing")
    assert "PaymentDeclined" in page.locator("#result_list").inner_text()

    dashboard = page.goto(f"{page.base}/dashboard/")
    assert "content-security-policy" in dashboard.headers
    assert page.locator("#panel-failures .dc-big").inner_text() == "1"
    failures = page.locator("#panel-failures").inner_text()
    assert "1 failed item inside runs" in failures and "PaymentDeclined" in failures


def test_the_jobs_list_leaves_due_batch_one_offs_out_by_default(
    page: Any, settings: Any
) -> None:
    subscription = declined_renewal(settings)
    batch = SubscriptionJob.objects.get(subscription=subscription).batch
    (job,) = jobs_for_row(batch)
    # The list names the batch's job by its subscriptions, never ``subscriptions.DueBatch:N``.
    title = selectors.job_titles([Job.objects.get(pk=job.id)])[job.id]
    assert title == "1 subscription due: alice (2 x COFFEE, every month)", title
    page.goto(f"{page.base}/admin/scheduling/job/")
    assert title not in page.locator("#content").inner_text()
    page.click("text=Anyone, with internal jobs (due batches)")
    page.wait_for_selector("#result_list")
    assert title in page.locator("#result_list").inner_text()
    assert job.name not in page.locator("#result_list").inner_text()
    assert page.csp_violations == []  # the list filters' script ran under the policy
