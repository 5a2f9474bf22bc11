"""A failing subscription does not accumulate periods.

While a renewal fails and is retried (the subscription past due) or waits for an operator
(needs attention), the periods that start meanwhile get no order and no charge. When the
renewal is paid at last, the subscription resumes with the first period that starts after
that moment, and the periods in between are recorded as skipped (``SkippedPeriods``): no
customer sees a burst of catch-up charges, whatever the retry delay and the period. A
subscription that was not failing keeps catching up period by period.

Run in-process with a fixed clock; ``test_workers`` has the same on real workers.
"""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.urls import reverse

from subscriptions import payments, services
from subscriptions.models import (
    JobAction,
    Order,
    SkippedPeriods,
    Subscription,
    SubscriptionStatus,
)
from subscriptions.testgateway.models import GatewayCharge
from tests.subscriptions.conftest import pending_job, run_inline

pytestmark = pytest.mark.django_db

TEN_SECONDS = timedelta(seconds=10)


def charged_periods(subscription: Subscription) -> list[int]:
    return list(
        Order.objects.filter(subscription=subscription, parent__isnull=False)
        .order_by("period_number")
        .values_list("period_number", flat=True)
    )


@override_settings(SUBSCRIPTIONS_RETRY_DELAY="600", SUBSCRIPTIONS_MAX_RETRIES="3")
def test_periods_that_start_while_past_due_are_skipped_not_charged_in_a_burst(
    make_subscription: Any, now: Any
) -> None:
    """The case as it was found: every ten seconds, a decline retried ten minutes later."""
    subscription = make_subscription(interval="PT10S")
    payments.script_customer(customer="alice", declines=1)
    job = pending_job(subscription)
    assert run_inline(job, at=now) == {"retry": 1}
    job.refresh_from_db()
    assert timedelta(seconds=600) <= job.action_date - now < timedelta(seconds=601)

    assert run_inline(job, at=job.action_date) == {"renewed": 1}  # paid at +600 s

    (skipped,) = SkippedPeriods.objects.filter(subscription=subscription)
    assert (skipped.first_period, skipped.last_period) == (1, 60)
    assert (skipped.starts_at, skipped.ends_at) == (now + TEN_SECONDS, now + 61 * TEN_SECONDS)
    assert skipped.reason.startswith("past due: period 0 was paid at 2030-01-07 09:10:00 UTC")
    following = pending_job(subscription)
    assert (following.custom_integer, following.action_date) == (61, now + 61 * TEN_SECONDS)
    assert charged_periods(subscription) == [0] and GatewayCharge.objects.count() == 1
    subscription.refresh_from_db()
    assert subscription.status == SubscriptionStatus.ACTIVE

    # The next charge comes at the next period's start, one period at a time again.
    assert run_inline(following, at=following.action_date) == {"renewed": 1}
    assert charged_periods(subscription) == [0, 61] and GatewayCharge.objects.count() == 2
    assert pending_job(subscription).custom_integer == 62
    assert SkippedPeriods.objects.count() == 1


@override_settings(SUBSCRIPTIONS_MAX_RETRIES="0")
def test_a_subscription_an_operator_retries_days_later_resumes_without_catching_up(
    make_subscription: Any, now: Any
) -> None:
    subscription = make_subscription(interval="P1D")
    payments.script_customer(customer="alice", declines=1)
    job = pending_job(subscription)
    assert run_inline(job, at=now) == {"failed": 1}
    assert Subscription.objects.get(pk=subscription.pk).status == "needs_attention"

    three_days_later = now + timedelta(days=3, hours=5)
    services.retry_job_now(job_id=job.pk, now=three_days_later)
    assert run_inline(job, at=three_days_later) == {"renewed": 1}

    (skipped,) = SkippedPeriods.objects.filter(subscription=subscription)
    assert (skipped.first_period, skipped.last_period) == (1, 3)
    assert skipped.reason.startswith("needs attention: period 0 was paid")
    following = pending_job(subscription)
    assert (following.custom_integer, following.action_date) == (4, now + timedelta(days=4))
    assert charged_periods(subscription) == [0]


@override_settings(SUBSCRIPTIONS_RETRY_DELAY="600", SUBSCRIPTIONS_MAX_RETRIES="3")
def test_skipped_periods_stop_at_the_end_date_and_the_subscription_expires(
    make_subscription: Any, now: Any
) -> None:
    subscription = make_subscription(interval="PT10S", end=now + timedelta(seconds=95))
    payments.script_customer(customer="alice", declines=1)
    job = pending_job(subscription)
    assert run_inline(job, at=now) == {"retry": 1}
    job.refresh_from_db()
    assert run_inline(job, at=job.action_date) == {"renewed": 1}

    (skipped,) = SkippedPeriods.objects.filter(subscription=subscription)
    assert (skipped.first_period, skipped.last_period) == (1, 9)  # period 9 starts at +90 s
    assert skipped.ends_at == subscription.ends_at
    expire = pending_job(subscription)
    assert (expire.action, expire.action_date) == (JobAction.EXPIRE, subscription.ends_at)
    run_inline(expire, at=job.action_date)
    assert Subscription.objects.get(pk=subscription.pk).status == SubscriptionStatus.EXPIRED
    assert charged_periods(subscription) == [0]


@override_settings(SUBSCRIPTIONS_RETRY_DELAY="1", SUBSCRIPTIONS_MAX_RETRIES="3")
def test_a_retry_paid_before_the_next_period_starts_skips_nothing(
    make_subscription: Any, now: Any
) -> None:
    subscription = make_subscription(interval="PT10S")
    payments.script_customer(customer="alice", declines=1)
    job = pending_job(subscription)
    assert run_inline(job, at=now) == {"retry": 1}
    job.refresh_from_db()
    assert run_inline(job, at=job.action_date) == {"renewed": 1}
    assert not SkippedPeriods.objects.exists()
    assert pending_job(subscription).custom_integer == 1


def test_a_subscription_that_was_not_failing_still_catches_up(
    make_subscription: Any, now: Any
) -> None:
    """Late for a reason of the service's own (workers down), not the customer's: every
    period is still ordered and charged."""
    subscription = make_subscription(interval="PT10S")
    run_inline(pending_job(subscription), at=now + timedelta(minutes=5))
    assert pending_job(subscription).custom_integer == 1
    assert not SkippedPeriods.objects.exists()


@override_settings(SUBSCRIPTIONS_RETRY_DELAY="600", SUBSCRIPTIONS_MAX_RETRIES="3")
def test_skipped_periods_are_shown_by_the_command_and_on_the_subscriptions_page(
    make_subscription: Any, now: Any, admin_client: Any
) -> None:
    subscription = make_subscription(interval="PT10S")
    payments.script_customer(customer="alice", declines=1)
    job = pending_job(subscription)
    assert run_inline(job, at=now) == {"retry": 1}
    job.refresh_from_db()
    assert run_inline(job, at=job.action_date) == {"renewed": 1}

    out = StringIO()
    call_command("subscriptions", "show", str(subscription.pk), "--json", stdout=out)
    (shown,) = json.loads(out.getvalue())["skipped"]
    assert (shown["first_period"], shown["last_period"]) == (1, 60)
    assert shown["starts_at"] == "2030-01-07T09:00:10+00:00"
    text = StringIO()
    call_command("subscriptions", "show", str(subscription.pk), stdout=text)
    assert "  skipped periods 1-60 (2030-01-07 09:00:10 UTC to 2030-01-07 09:10:10 UTC)" in (
        text.getvalue()
    )
    url = reverse("admin:subscriptions_subscription_change", args=[subscription.pk])
    page = admin_client.get(url).content.decode()
    assert "periods 1 to 60 (2030-01-07 09:00:10 UTC to 2030-01-07 09:10:10 UTC)" in page
