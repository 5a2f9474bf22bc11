"""The admin pages for subscriptions and subscription jobs, through Django's test client."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from subscriptions import services
from subscriptions.models import (
    Order,
    Subscription,
    SubscriptionJob,
    SubscriptionJobStatus,
    SubscriptionStatus,
)
from tests.subscriptions.conftest import pending_job, run_inline

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:subscriptions_subscription_changelist"


def test_the_needs_attention_filter_lists_only_parked_subscriptions(
    admin_client: Any, make_subscription
) -> None:
    fine = make_subscription(customer="fine-customer")
    parked = make_subscription(customer="parked-customer")
    Subscription.objects.filter(pk=parked.pk).update(status=SubscriptionStatus.NEEDS_ATTENTION)
    page = admin_client.get(reverse(CHANGELIST), {"attention": "yes"}).content.decode()
    assert "parked-customer" in page and fine.customer not in page


def test_a_subscription_page_shows_its_orders_and_jobs_with_status_names(
    admin_client: Any, make_subscription, now
) -> None:
    subscription = make_subscription()
    run_inline(pending_job(subscription), at=now)
    url = reverse("admin:subscriptions_subscription_change", args=[subscription.pk])
    page = admin_client.get(url).content.decode()
    assert "3 completed" in page and "0 active" in page
    assert "CreateChildOrder" in page and "confirmed" in page
    assert Order.objects.get(period_number=0).charge_reference in page


def test_cancel_and_retry_now_actions_report_counts(
    admin_client: Any, make_subscription, now
) -> None:
    first, second = make_subscription(), make_subscription(customer="bob")
    response = admin_client.post(
        reverse(CHANGELIST),
        {"action": "cancel_now", "_selected_action": [first.pk, second.pk]},
        follow=True,
    )
    assert "2 subscriptions cancelled" in response.content.decode()
    assert set(Subscription.objects.values_list("status", flat=True)) == {"cancelled"}

    parked = make_subscription(customer="carol")
    job = pending_job(parked)
    job.change(now=now, status=SubscriptionJobStatus.FAILED)
    response = admin_client.post(
        reverse(CHANGELIST), {"action": "retry_now", "_selected_action": [parked.pk]}, follow=True
    )
    assert "1 subscription retried" in response.content.decode()
    job.refresh_from_db()
    assert job.status == SubscriptionJobStatus.ACTIVE


def test_adding_a_subscription_validates_fields_and_schedules_the_first_renewal(
    admin_client: Any,
) -> None:
    url = reverse("admin:subscriptions_subscription_add")
    form = {
        "customer": "dora",
        "interval": "PT0S",
        "starts_at_0": "2030-01-31",
        "starts_at_1": "09:00:00",
        "items-TOTAL_FORMS": "1",
        "items-INITIAL_FORMS": "0",
        "items-MIN_NUM_FORMS": "1",
        "items-MAX_NUM_FORMS": "1000",
        "items-0-sku": "TEA",
        "items-0-quantity": "-3",
        "items-0-unit_price": "2.50",
        "orders-TOTAL_FORMS": "0",
        "orders-INITIAL_FORMS": "0",
        "jobs-TOTAL_FORMS": "0",
        "jobs-INITIAL_FORMS": "0",
    }
    page = admin_client.post(url, form).content.decode()
    assert "&#x27;PT0S&#x27; is zero" in page
    assert not Subscription.objects.exists()

    response = admin_client.post(url, {**form, "interval": "P1M", "items-0-quantity": "3"})
    assert response.status_code == 302, response.content.decode()[:3000]
    subscription = Subscription.objects.get()
    assert subscription.anchor == subscription.starts_at
    job = pending_job(subscription)
    assert job.action == "CreateChildOrder" and job.action_date == subscription.starts_at
    assert Order.objects.get(subscription=subscription).amount == 7.5


def test_a_job_edit_that_raced_the_scheduler_is_refused_with_the_reason(
    admin_client: Any, make_subscription, now
) -> None:
    subscription = make_subscription()
    run_inline(pending_job(subscription), at=now)
    services.cancel_subscription(subscription_id=subscription.pk, at_period_end=True, now=now)
    job = pending_job(subscription)  # the Cancel at the paid period's end
    url = reverse("admin:subscriptions_subscriptionjob_change", args=[job.pk])
    assert "0 active" in admin_client.get(url).content.decode()
    form = {"custom_integer": "7", "custom_text": "note"}

    job.change(
        now=now, status=SubscriptionJobStatus.PROCESSING
    )  # the scheduler starts it meanwhile
    page = admin_client.post(url, {**form, "opt_counter": "0"}).content.decode()
    assert "was changed at" in page and "optimistic counter 0, now 1" in page
    job.refresh_from_db()
    assert (job.custom_text, job.status, job.opt_counter) == (
        "",
        SubscriptionJobStatus.PROCESSING,
        1,
    )

    response = admin_client.post(url, {**form, "opt_counter": "1"})
    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.custom_text, job.custom_integer, job.status, job.opt_counter) == (
        "note",
        7,
        SubscriptionJobStatus.PROCESSING,
        2,
    )


def test_the_job_list_shows_status_codes_with_their_names(
    admin_client: Any, make_subscription
) -> None:
    make_subscription()
    page = admin_client.get(reverse("admin:subscriptions_subscriptionjob_changelist")).content
    assert b"0 active" in page
    assert SubscriptionJob.objects.count() == 1


def test_the_batch_list_shows_each_due_batch_with_its_job_count_read_only(
    admin_client: Any, make_subscription, now
) -> None:
    jobs = [pending_job(make_subscription(customer=f"c{n}")) for n in range(3)]
    run_inline(jobs[0], at=now)
    url = reverse("admin:subscriptions_duebatch_changelist")
    page = admin_client.get(url, {"closed_at__isnull": "True"}).content.decode()
    (open_batch,) = {pending_job(j.subscription).batch_id for j in jobs}

    def link(pk: int) -> str:
        return reverse("admin:subscriptions_duebatch_change", args=[pk])

    assert link(open_batch) in page and link(jobs[0].batch_id) not in page
    closed = admin_client.get(url, {"closed_at__isnull": "False"}).content.decode()
    assert link(jobs[0].batch_id) in closed
    assert '<td class="field-job_count">3</td>' in closed
    assert admin_client.get(reverse("admin:subscriptions_duebatch_add")).status_code == 403
