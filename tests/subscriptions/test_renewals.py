"""Renewals run in-process against the real database: steps, retries, cancel and expire.

The engine is not running here: each test plays the part of the runner (``run_inline``), so
the rules can be read one at a time. The same paths on real workers are in ``test_workers``.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings

from scheduling.api import RunContext, jobs_for_row
from subscriptions import batches, conf, payments, placing, renewals, services, steps
from subscriptions.models import (
    DueBatch,
    JobAction,
    Order,
    OrderStatus,
    Subscription,
    SubscriptionJob,
    SubscriptionJobStatus,
    SubscriptionStatus,
)
from subscriptions.scheduled import run_subscription_job
from subscriptions.testgateway.models import GatewayCharge
from tests.subscriptions.conftest import pending_job, run_inline

pytestmark = [pytest.mark.django_db, pytest.mark.specification]


def test_a_new_subscription_has_a_parent_order_and_its_first_renewal_scheduled(
    make_subscription, now
) -> None:
    subscription = make_subscription()
    (parent,) = Order.objects.filter(subscription=subscription)
    assert parent.status == OrderStatus.PLACED and parent.amount == Decimal("19.8")
    job = pending_job(subscription)
    assert (job.action, job.action_date, job.custom_integer) == ("CreateChildOrder", now, 0)
    assert not jobs_for_row(job), "the job runs in its due batch, not in an engine job of its own"
    (engine_job,) = jobs_for_row(job.batch)
    assert (engine_job.next_due_at, engine_job.task_table) == (now, "subscriptions.DueBatch")
    assert (job.batch.due_at, job.batch.closed_at) == (now, None)


def test_subscriptions_due_at_one_instant_share_a_batch_per_block(
    make_subscription, now, settings
) -> None:
    settings.SUBSCRIPTIONS_BATCH_SIZE = 3
    jobs = [pending_job(make_subscription(customer=f"c{n}")) for n in range(7)]
    blocks = {job.subscription_id // 3 for job in jobs}
    batches = {job.batch_id for job in jobs}
    assert len(batches) == len(blocks) >= 3
    assert all(len(jobs_for_row(DueBatch.objects.get(pk=pk))) == 1 for pk in batches)
    later = pending_job(make_subscription(customer="late", start=now + timedelta(hours=1)))
    assert later.batch_id not in batches


def test_one_run_renews_every_job_of_the_batch_then_closes_it(make_subscription, now) -> None:
    subscriptions = [make_subscription(customer=f"c{n}") for n in range(5)]
    first = pending_job(subscriptions[0])
    assert run_inline(first, at=now) == {"renewed": 5}
    assert Order.objects.filter(parent__isnull=False, status=OrderStatus.CONFIRMED).count() == 5
    assert GatewayCharge.objects.count() == 5
    first.refresh_from_db()
    assert first.batch.closed_at is not None
    following = [pending_job(s) for s in subscriptions]
    (next_batch,) = {j.batch_id for j in following}
    assert next_batch != first.batch_id
    assert {j.custom_integer for j in following} == {1}


def test_a_job_placed_in_a_batch_its_run_already_closed_gets_a_new_batch(
    make_subscription, now
) -> None:
    first = pending_job(make_subscription())
    run_inline(first, at=now)
    closed = SubscriptionJob.objects.get(pk=first.pk).batch
    late = SubscriptionJob.objects.create(
        subscription=first.subscription, action=JobAction.EXPIRE, action_date=now, batch=closed
    )
    batches.attach([late], now=now)
    late.refresh_from_db()
    assert late.batch_id != closed.pk and late.batch.closed_at is None
    assert late.batch.due_at == now and jobs_for_row(late.batch)


def test_a_renewal_creates_one_order_charges_once_and_places_the_next(
    make_subscription, now
) -> None:
    subscription = make_subscription()
    first = pending_job(subscription)
    run_inline(first, at=now)

    first.refresh_from_db()
    assert (first.status, first.parameter) == (SubscriptionJobStatus.COMPLETED, "confirm")
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
        due = job.action_date
        assert run_inline(job, at=due) == {"retry": 1}
        job.refresh_from_db()
        assert (job.status, job.retry_count, job.parameter) == (4, attempt, "create_order")
        # Placed again after the delay (SUBSCRIPTIONS_RETRY_DELAY, 600 s), in a new batch.
        assert timedelta(seconds=600) <= job.action_date - due < timedelta(seconds=601)
        assert job.batch.due_at == job.action_date and jobs_for_row(job.batch)
    assert run_inline(job, at=job.action_date) == {"renewed": 1}
    job.refresh_from_db()
    assert (job.status, job.retry_count) == (SubscriptionJobStatus.COMPLETED, 2)
    assert GatewayCharge.objects.count() == 1
    assert Order.objects.filter(subscription=subscription, period_number=0).count() == 1


@override_settings(SUBSCRIPTIONS_MAX_RETRIES="CreateChildOrder=1")
def test_declines_past_the_maximum_fail_the_job_and_flag_the_subscription(
    make_subscription, now
) -> None:
    subscription = make_subscription()
    payments.script_customer(customer="alice", declines=5)
    job = pending_job(subscription)
    assert run_inline(job, at=now) == {"retry": 1}
    assert run_inline(job, at=now) == {"failed": 1}
    job.refresh_from_db()
    subscription.refresh_from_db()
    assert (job.status, job.retry_count, job.parameter) == (
        SubscriptionJobStatus.FAILED,
        1,
        "price",
    )
    assert subscription.status == SubscriptionStatus.NEEDS_ATTENTION
    assert "failed after 1 retries" in subscription.attention_reason
    assert not Order.objects.filter(subscription=subscription, period_number=0).exists()
    assert not GatewayCharge.objects.exists()


def test_retry_now_runs_a_failed_job_again_and_clears_the_flag(make_subscription, now) -> None:
    subscription = make_subscription()
    job = pending_job(subscription)
    job.change(now=now, status=SubscriptionJobStatus.FAILED, retry_count=3)
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
    tally: Counter[str] = Counter()
    renewals._renew([read_by_the_engine], clock=lambda: now, tally=tally)
    assert tally == {"skipped": 1}
    job.refresh_from_db()
    assert (job.status, job.parameter) == (SubscriptionJobStatus.COMPLETED, "cancelled")
    assert not Order.objects.filter(subscription=subscription, parent__isnull=False).exists()
    assert not GatewayCharge.objects.exists()
    assert run_inline(job, at=now) == {}
    job.batch.refresh_from_db()
    assert job.batch.closed_at is not None


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
def test_retry_settings_per_action_reach_the_jobs_and_their_batches() -> None:
    assert (conf.max_retries("CreateChildOrder"), conf.max_retries("Expire")) == (5, 2)
    assert conf.retry_delay("Expire") == 30.0
    policies = batches.policies()  # a batch's run that died is retried like a renewal
    assert (policies.retry_backoff, policies.max_retries) == (30.0, 5 + 3)


def test_a_lost_attempt_counts_as_a_retry_and_the_next_resumes(make_subscription, now) -> None:
    subscription = make_subscription()
    job = pending_job(subscription)
    job.change(
        now=now,
        status=SubscriptionJobStatus.PROCESSING,
        parameter="charge",
        custom_decimal=Decimal("19.8"),
    )
    assert run_inline(job, at=now) == {"renewed": 1}
    job.refresh_from_db()
    assert (job.status, job.retry_count, job.parameter) == (
        SubscriptionJobStatus.COMPLETED,
        1,
        "confirm",
    )


def test_a_declined_card_in_a_batch_waits_alone_while_the_rest_renew(
    make_subscription, now
) -> None:
    paying = [make_subscription(customer=f"c{n}") for n in range(3)]
    declined = make_subscription(customer="declined")
    payments.script_customer(customer="declined", declines=1)
    assert run_inline(pending_job(paying[0]), at=now) == {"renewed": 3, "retry": 1}
    assert all(pending_job(s).custom_integer == 1 for s in paying)
    job = pending_job(declined)
    assert (job.status, job.custom_integer, job.retry_count) == (SubscriptionJobStatus.RETRY, 0, 1)
    assert run_inline(job, at=job.action_date) == {"renewed": 1}
    assert GatewayCharge.objects.count() == 4


class EditingGateway(payments.TestGateway):
    """Charges, and meanwhile an operator saves the job in the admin (the counter moves)."""

    def charge(self, **kwargs):
        (job,) = SubscriptionJob.objects.filter(status=SubscriptionJobStatus.PROCESSING)
        job.custom_text = "edited by an operator"
        job.save()
        return super().charge(**kwargs)


@override_settings(SUBSCRIPTIONS_GATEWAY=f"{__name__}.EditingGateway")
def test_a_job_an_operator_changed_mid_run_is_not_overwritten_and_is_retried(
    make_subscription, now, subscriptions_log
) -> None:
    subscription = make_subscription()
    job = pending_job(subscription)
    assert run_inline(job, at=now) == {"retry": 1}
    job.refresh_from_db()
    assert (job.custom_text, job.parameter, job.status) == (
        "edited by an operator",
        "create_order",
        SubscriptionJobStatus.RETRY,
    )
    assert "StaleJob: subscription job" in subscriptions_log.text
    assert "was changed" in subscriptions_log.text
    with override_settings(SUBSCRIPTIONS_GATEWAY="subscriptions.payments.TestGateway"):
        assert run_inline(job, at=job.action_date) == {"renewed": 1}
    assert GatewayCharge.objects.count() == 1  # the retry replayed the key


def test_a_job_placed_before_due_batches_still_runs_through_its_own_engine_job(
    make_subscription, now
) -> None:
    subscription = make_subscription()
    job = pending_job(subscription)
    job.change(now=now, batch_id=None)  # as every job was before due batches existed
    run = RunContext(execution_id=0, job_id=None, scheduled_for=now, attempt=1)
    assert run_subscription_job(job, run) == {"renewed": 1}
    job.refresh_from_db()
    assert job.status == SubscriptionJobStatus.COMPLETED
    assert pending_job(subscription).batch_id is not None


@override_settings(SUBSCRIPTIONS_RETRY_DELAY="0")
def test_a_job_back_in_its_own_batch_mid_run_is_not_stranded_the_batch_is_retried(
    make_subscription, now
) -> None:
    job = pending_job(make_subscription())
    payments.script_customer(customer="alice", declines=1)
    run = RunContext(execution_id=0, job_id=None, scheduled_for=now, attempt=1)
    # The clock stands still: the retry "after 0 s" falls due at the batch's own instant.
    with pytest.raises(renewals.StuckJobs, match=f"jobs {job.pk} of batch {job.batch_id}"):
        renewals.run_batch(job.batch_id, run=run, clock=lambda: now)
    job.refresh_from_db()
    assert (job.status, job.batch.closed_at) == (SubscriptionJobStatus.RETRY, None)
    assert renewals.run_batch(job.batch_id, run=run, clock=lambda: now) == {"renewed": 1}


@override_settings(SUBSCRIPTIONS_MAX_RETRIES="0")
def test_a_subscription_no_renewal_can_plan_fails_alone_and_the_batch_renews_the_rest(
    make_subscription, now
) -> None:
    good = [make_subscription(customer=f"c{n}") for n in range(2)]
    bad = make_subscription(customer="corrupt")
    Subscription.objects.filter(pk=bad.pk).update(interval="P1Q")  # written around the model
    assert run_inline(pending_job(good[0]), at=now) == {"failed": 1, "renewed": 2}
    job = SubscriptionJob.objects.get(subscription=bad)
    bad.refresh_from_db()
    assert job.status == SubscriptionJobStatus.FAILED
    assert bad.status == SubscriptionStatus.NEEDS_ATTENTION and "interval" in bad.attention_reason
    assert all(pending_job(s).custom_integer == 1 for s in good)


@override_settings(SUBSCRIPTIONS_MAX_RETRIES="1")
def test_a_job_whose_runs_died_past_its_maximum_still_replays_its_charge_and_confirms(
    make_subscription, now
) -> None:
    """A run that died may have been charged before it could record it, so a lost run never
    fails the job by itself: the charge's replay decides (here it had been charged)."""
    subscription = make_subscription()
    job = pending_job(subscription)
    job.change(
        now=now,
        status=SubscriptionJobStatus.PROCESSING,
        parameter="create_order",
        retry_count=1,
        custom_decimal=Decimal("19.8"),
    )
    Order.objects.create(
        subscription=subscription,
        parent=Order.objects.get(subscription=subscription, parent=None),
        period_number=0,
        period_start=now,
        period_end=subscription.period_bounds(0)[1],
        amount=Decimal("19.8"),
        status=OrderStatus.PENDING,
    )
    key = services.idempotency_key(subscription.pk, now)
    taken = payments.TestGateway().charge(
        customer="alice", amount=Decimal("19.8"), idempotency_key=key
    )
    assert run_inline(job, at=now) == {"renewed": 1}
    job.refresh_from_db()
    assert (job.status, job.retry_count, job.custom_text) == (3, 2, taken.reference)
    assert GatewayCharge.objects.count() == 1


def test_a_subscription_cancelled_while_its_batch_charges_is_not_charged(
    make_subscription, now, monkeypatch
) -> None:
    first, second = make_subscription(customer="first"), make_subscription(customer="second")
    monkeypatch.setattr(steps, "CHARGE_GROUP", 1)  # re-read before every charge
    real = payments.TestGateway.charge

    def charge_then_cancel(self, **kwargs):
        result = real(self, **kwargs)
        if kwargs["customer"] == "first":
            Subscription.objects.filter(pk=second.pk).update(status=SubscriptionStatus.CANCELLED)
        return result

    monkeypatch.setattr(payments.TestGateway, "charge", charge_then_cancel)
    assert run_inline(pending_job(first), at=now) == {"renewed": 1, "skipped": 1}
    (charge,) = GatewayCharge.objects.all()
    assert charge.customer == "first"
    job = SubscriptionJob.objects.get(subscription=second)
    assert (job.status, job.parameter) == (SubscriptionJobStatus.COMPLETED, "cancelled")
    assert not Order.objects.filter(subscription=second, parent__isnull=False).exists()


def test_a_charged_period_whose_order_was_deleted_gets_it_back_confirmed(
    make_subscription, now, monkeypatch
) -> None:
    subscription = make_subscription()
    real = payments.TestGateway.charge

    def charge_and_delete_the_order(self, **kwargs):
        Order.objects.filter(subscription=subscription, parent__isnull=False).delete()
        return real(self, **kwargs)

    monkeypatch.setattr(payments.TestGateway, "charge", charge_and_delete_the_order)
    assert run_inline(pending_job(subscription), at=now) == {"renewed": 1}
    (order,) = Order.objects.filter(subscription=subscription, parent__isnull=False)
    (charge,) = GatewayCharge.objects.all()
    assert (order.status, order.charge_reference) == (OrderStatus.CONFIRMED, charge.reference)


def test_two_jobs_for_one_period_make_one_order_one_charge_and_one_next_job(
    make_subscription, now
) -> None:
    subscription = make_subscription()
    first = pending_job(subscription)
    placing.place_job(
        subscription=subscription,
        action=JobAction.CREATE_CHILD_ORDER,
        action_date=first.action_date,
        period_number=0,
        now=now,
    )
    run = RunContext(execution_id=0, job_id=None, scheduled_for=now, attempt=1)
    with pytest.raises(renewals.StuckJobs):  # the second waits for the batch's retry
        renewals.run_batch(first.batch_id, run=run, clock=lambda: now)
    assert renewals.run_batch(first.batch_id, run=run, clock=lambda: now) == {"renewed": 1}
    assert Order.objects.filter(subscription=subscription, period_number=0).count() == 1
    assert GatewayCharge.objects.count() == 1
    assert SubscriptionJob.objects.filter(subscription=subscription, custom_integer=1).count() == 1


@override_settings(SUBSCRIPTIONS_RETRY_DELAY="60")
def test_a_declined_job_from_before_due_batches_is_retried_in_a_batch_after_the_delay(
    make_subscription, now
) -> None:
    job = pending_job(make_subscription())
    job.change(now=now, batch_id=None)
    payments.script_customer(customer="alice", declines=1)
    run = RunContext(execution_id=0, job_id=None, scheduled_for=now, attempt=1)
    assert run_subscription_job(job, run) == {"retry": 1}
    job.refresh_from_db()
    assert (job.status, job.retry_count) == (SubscriptionJobStatus.RETRY, 1)
    assert job.batch.due_at == job.action_date
    assert job.action_date - job.last_update == timedelta(seconds=60)


def test_a_resumed_job_whose_period_another_job_confirmed_places_nothing_more(
    make_subscription, now
) -> None:
    subscription = make_subscription()
    first = pending_job(subscription)
    run_inline(first, at=now)  # confirms period 0 and places period 1
    (charge,) = GatewayCharge.objects.all()
    late = placing.place_job(  # a second job for period 0 whose run died after charging
        subscription=subscription,
        action=JobAction.CREATE_CHILD_ORDER,
        action_date=now,
        period_number=0,
        now=now,
    )
    late.change(
        now=now,
        status=SubscriptionJobStatus.PROCESSING,
        parameter="charge",
        custom_decimal=Decimal("19.8"),
        custom_text=charge.reference,
    )
    assert run_inline(late, at=now) == {"renewed": 1}
    assert Order.objects.filter(subscription=subscription, period_number=0).count() == 1
    assert SubscriptionJob.objects.filter(subscription=subscription, custom_integer=1).count() == 1
