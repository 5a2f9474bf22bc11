"""Renewals run in-process against the real database: steps, retries, cancel and expire.

The engine is not running here: each test plays the part of the runner (``run_inline``), so
the rules can be read one at a time. The same paths on real workers are in ``test_workers``.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings

from scheduling.api import PermanentError, RunContext, jobs_for_row
from subscriptions import payments, services
from subscriptions.models import (
    GatewayCharge,
    JobAction,
    JobStatus,
    Order,
    OrderStatus,
    SubscriptionJob,
    SubscriptionStatus,
)
from tests.subscriptions.conftest import pending_job, run_inline

pytestmark = pytest.mark.django_db


def test_a_new_subscription_has_a_parent_order_and_its_first_renewal_scheduled(
    make_subscription, now
) -> None:
    subscription = make_subscription()
    (parent,) = Order.objects.filter(subscription=subscription)
    assert parent.status == OrderStatus.PLACED and parent.amount == Decimal("19.8")
    job = pending_job(subscription)
    assert (job.action, job.action_date, job.custom_integer) == ("CreateChildOrder", now, 0)
    (engine_job,) = jobs_for_row(job)
    assert (
        engine_job.next_due_at == now and engine_job.task_table == "subscriptions.SubscriptionJob"
    )


def test_a_renewal_creates_one_order_charges_once_and_places_the_next(
    make_subscription, now
) -> None:
    subscription = make_subscription()
    first = pending_job(subscription)
    run_inline(first, at=now)

    first.refresh_from_db()
    assert (first.status, first.parameter) == (JobStatus.COMPLETED, "confirm")
    (charge,) = GatewayCharge.objects.all()
    assert charge.amount == Decimal("19.8") and first.custom_text == charge.reference
    order = Order.objects.get(subscription=subscription, period_number=0)
    assert order.status == OrderStatus.CONFIRMED and order.charge_reference == charge.reference
    assert order.parent_id == Order.objects.get(subscription=subscription, parent=None).pk
    following = pending_job(subscription)
    assert following.custom_integer == 1
    assert following.action_date == subscription.period_bounds(1)[0]


def test_the_last_period_places_an_expire_at_the_end_date(make_subscription, now) -> None:
    subscription = make_subscription(interval="PT1S", end=now + timedelta(seconds=2))
    run_inline(pending_job(subscription), at=now)
    run_inline(pending_job(subscription), at=now + timedelta(seconds=1))
    expire = pending_job(subscription)
    assert (expire.action, expire.action_date) == ("Expire", subscription.ends_at)
    run_inline(expire, at=subscription.ends_at)
    subscription.refresh_from_db()
    assert subscription.status == SubscriptionStatus.EXPIRED
    assert Order.objects.filter(subscription=subscription, parent__isnull=False).count() == 2


@override_settings(SUBSCRIPTIONS_MAX_RETRIES="3")
def test_a_declined_charge_is_retried_from_the_charge_step(make_subscription, now) -> None:
    subscription = make_subscription()
    payments.script_customer(customer="alice", declines=2)
    job = pending_job(subscription)
    for attempt in (1, 2):
        with pytest.raises(payments.PaymentDeclined):
            run_inline(job, at=now, attempt=attempt)
        job.refresh_from_db()
        assert (job.status, job.retry_count, job.parameter) == (4, attempt, "create_order")
    run_inline(job, at=now, attempt=3)
    job.refresh_from_db()
    assert (job.status, job.retry_count) == (JobStatus.COMPLETED, 2)
    assert GatewayCharge.objects.count() == 1
    assert Order.objects.filter(subscription=subscription, period_number=0).count() == 1


@override_settings(SUBSCRIPTIONS_MAX_RETRIES="CreateChildOrder=1")
def test_declines_past_the_maximum_fail_the_job_and_flag_the_subscription(
    make_subscription, now
) -> None:
    subscription = make_subscription()
    payments.script_customer(customer="alice", declines=5)
    job = pending_job(subscription)
    with pytest.raises(payments.PaymentDeclined):
        run_inline(job, at=now)
    with pytest.raises(PermanentError, match="PaymentDeclined"):
        run_inline(job, at=now, attempt=2)
    job.refresh_from_db()
    subscription.refresh_from_db()
    assert (job.status, job.retry_count, job.parameter) == (JobStatus.FAILED, 1, "price")
    assert subscription.status == SubscriptionStatus.NEEDS_ATTENTION
    assert "failed after 1 retries" in subscription.attention_reason
    assert not Order.objects.filter(subscription=subscription, period_number=0).exists()
    assert not GatewayCharge.objects.exists()


def test_retry_now_runs_a_failed_job_again_and_clears_the_flag(make_subscription, now) -> None:
    subscription = make_subscription()
    job = pending_job(subscription)
    job.change(now=now, status=JobStatus.FAILED, retry_count=3)
    subscription.status = SubscriptionStatus.NEEDS_ATTENTION
    subscription.save()
    services.retry_job_now(job_id=job.pk, now=now)
    run_inline(job, at=now)
    subscription.refresh_from_db()
    assert subscription.status == SubscriptionStatus.ACTIVE and not subscription.attention_reason
    with pytest.raises(ValidationError, match="only failed jobs can be retried"):
        services.retry_job_now(job_id=pending_job(subscription).pk, now=now)


def test_a_renewal_that_already_charged_replays_its_key_and_takes_nothing(
    make_subscription, now
) -> None:
    subscription = make_subscription()
    job = pending_job(subscription)
    start = subscription.period_bounds(0)[0]
    key = services.idempotency_key(subscription.pk, start)
    first = payments.TestGateway().charge(
        customer="alice", amount=Decimal("19.8"), idempotency_key=key
    )
    again = payments.TestGateway().charge(
        customer="alice", amount=Decimal("19.8"), idempotency_key=key
    )
    assert again == payments.ChargeResult(first.reference, replayed=True)
    run_inline(job, at=now)
    assert GatewayCharge.objects.count() == 1
    assert Order.objects.get(period_number=0).charge_reference == first.reference


def test_a_key_reused_for_another_amount_is_refused(now) -> None:
    gateway = payments.TestGateway()
    gateway.charge(customer="alice", amount=Decimal("1"), idempotency_key="k")
    with pytest.raises(payments.GatewayError, match="idempotency key 'k' was used"):
        gateway.charge(customer="alice", amount=Decimal("2"), idempotency_key="k")


def test_a_renewal_that_starts_after_a_cancel_does_nothing(
    make_subscription, now, django_capture_on_commit_callbacks
) -> None:
    subscription = make_subscription()
    job = pending_job(subscription)
    read_by_the_engine = SubscriptionJob.objects.get(pk=job.pk)
    with django_capture_on_commit_callbacks(execute=True):
        services.cancel_subscription(subscription_id=subscription.pk, at_period_end=False, now=now)
    result = services.run_job(
        job=read_by_the_engine, run=RunContext(0, None, now, 1), clock=lambda: now
    )
    assert result == {"skipped": "job is completed"}
    job.refresh_from_db()
    assert (job.status, job.parameter) == (JobStatus.COMPLETED, "cancelled")
    assert not Order.objects.filter(subscription=subscription, parent__isnull=False).exists()
    assert not GatewayCharge.objects.exists()
    (engine_job,) = jobs_for_row(job)
    assert engine_job.status == "paused"


def test_cancel_at_period_end_keeps_the_paid_period_then_cancels(make_subscription, now) -> None:
    subscription = make_subscription()
    run_inline(pending_job(subscription), at=now)
    later = now + timedelta(days=3)
    services.cancel_subscription(subscription_id=subscription.pk, at_period_end=True, now=later)
    subscription.refresh_from_db()
    assert subscription.status == SubscriptionStatus.PENDING_CANCEL
    cancel = pending_job(subscription)
    paid_until = subscription.period_bounds(0)[1]
    assert (cancel.action, cancel.action_date) == (JobAction.CANCEL, paid_until)
    assert (
        SubscriptionJob.objects.get(subscription=subscription, custom_integer=1).parameter
        == "cancelled"
    )
    run_inline(cancel, at=paid_until)
    subscription.refresh_from_db()
    assert subscription.status == SubscriptionStatus.CANCELLED
    assert subscription.cancelled_at == paid_until


def test_cancel_before_anything_was_paid_is_immediate(make_subscription, now) -> None:
    subscription = make_subscription(start=now + timedelta(days=1))
    services.cancel_subscription(subscription_id=subscription.pk, at_period_end=True, now=now)
    subscription.refresh_from_db()
    assert subscription.status == SubscriptionStatus.CANCELLED


def test_an_ended_subscription_cannot_be_cancelled_again(make_subscription, now) -> None:
    subscription = make_subscription()
    services.cancel_subscription(subscription_id=subscription.pk, at_period_end=False, now=now)
    with pytest.raises(ValidationError, match="already cancelled"):
        services.cancel_subscription(subscription_id=subscription.pk, at_period_end=False, now=now)


@override_settings(
    SUBSCRIPTIONS_MAX_RETRIES="CreateChildOrder=5,*=2", SUBSCRIPTIONS_RETRY_DELAY="30"
)
def test_retry_settings_per_action_reach_the_engine_job(make_subscription) -> None:
    from subscriptions import conf

    assert (conf.max_retries("CreateChildOrder"), conf.max_retries("Expire")) == (5, 2)
    assert services.policies("Expire").retry_backoff == 30.0


def test_a_lost_attempt_counts_as_a_retry_and_the_next_resumes(make_subscription, now) -> None:
    subscription = make_subscription()
    job = pending_job(subscription)
    job.change(
        now=now, status=JobStatus.PROCESSING, parameter="charge", custom_decimal=Decimal("19.8")
    )
    assert run_inline(job, at=now, attempt=1) == {"skipped": "job is processing"}
    run_inline(job, at=now, attempt=2)
    job.refresh_from_db()
    assert (job.status, job.retry_count, job.parameter) == (JobStatus.COMPLETED, 1, "confirm")
