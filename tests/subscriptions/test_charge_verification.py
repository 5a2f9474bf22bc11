"""Money follows the gateway, not a record: a renewal that resumes past its charge step asks
the gateway what happened under the period's idempotency key (``Gateway.find_charge``) and
charges or fails as the gateway says.

- charged, for the order's amount, to the subscription's customer: the order is confirmed
  with the gateway's reference, whatever reference the job recorded;
- not charged: the charge is made now, under the same key;
- declined: the renewal fails as a declined charge does, and its retry charges;
- charged for another amount or customer: the job fails for an operator, the order unpaid.

A step, a reference or a charge row written behind the app's back therefore confirms nothing
the gateway did not take. Crash recovery keeps its guarantee (one charge per period):
``test_workers`` kills a worker between the charge and the confirmation.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any, ClassVar

import pytest
from django.test import override_settings

from subscriptions import payments, services
from subscriptions.models import (
    JobStep,
    Order,
    OrderStatus,
    Subscription,
    SubscriptionJob,
    SubscriptionJobStatus,
    SubscriptionStatus,
)
from subscriptions.testgateway.models import GatewayCharge, GatewayDecline
from tests.subscriptions.conftest import pending_job, run_inline

pytestmark = pytest.mark.django_db

PRICE = Decimal("19.8")  # the fixture's 2 x COFFEE at 9.90


def forge_charged(
    job: SubscriptionJob, reference: str, *, status: int = SubscriptionJobStatus.RETRY
) -> None:
    """Write the charge step into the job's row as no code of the app would: behind its back."""
    SubscriptionJob.objects.filter(pk=job.pk).update(
        parameter=JobStep.CHARGE, custom_text=reference, status=status
    )


def child_order(subscription: Subscription) -> Order:
    return Order.objects.get(subscription=subscription, parent__isnull=False, period_number=0)


def key_of(subscription: Subscription) -> str:
    return services.idempotency_key(subscription.pk, subscription.period_bounds(0)[0])


def failed_once(
    make_subscription: Any, now: Any, **script: int
) -> tuple[Subscription, SubscriptionJob]:
    """A renewal whose first charge was declined (``declines=1``) or met a gateway error
    (``errors=1``): retrying, its order pending."""
    subscription = make_subscription()
    payments.script_customer(customer="alice", **script)
    job = pending_job(subscription)
    assert run_inline(job, at=now) == {"retry": 1}
    job.refresh_from_db()
    return subscription, job


@override_settings(SUBSCRIPTIONS_MAX_RETRIES="3")
def test_a_step_forged_to_charged_with_a_made_up_reference_is_charged_for_real(
    make_subscription: Any, now: Any, subscriptions_log: Any
) -> None:
    subscription, job = failed_once(make_subscription, now, errors=1)
    forge_charged(job, "ch_made_up")

    assert run_inline(job, at=job.action_date) == {"renewed": 1}

    (charge,) = GatewayCharge.objects.all()
    order = child_order(subscription)
    assert (charge.amount, charge.idempotency_key) == (PRICE, key_of(subscription))
    assert (order.status, order.charge_reference) == (OrderStatus.CONFIRMED, charge.reference)
    job.refresh_from_db()
    assert (job.custom_text, job.parameter) == (charge.reference, JobStep.CONFIRM)
    unverified = f"renewal.unverified job={job.pk} step=charge recorded=ch_made_up"
    assert f"{unverified} gateway=not_charged" in subscriptions_log.text


def test_a_charge_the_gateway_took_is_confirmed_with_the_gateways_reference(
    make_subscription: Any, now: Any
) -> None:
    subscription = make_subscription()
    job = pending_job(subscription)
    taken = payments.TestGateway().charge(
        customer="alice", amount=PRICE, idempotency_key=key_of(subscription)
    )
    forge_charged(job, "ch_someone_elses", status=SubscriptionJobStatus.PROCESSING)

    assert run_inline(job, at=now) == {"renewed": 1}

    assert GatewayCharge.objects.count() == 1, "nothing taken twice"
    assert child_order(subscription).charge_reference == taken.reference
    job.refresh_from_db()
    assert job.custom_text == taken.reference


class RemoteGateway(payments.TestGateway):
    """A gateway that keeps its statement elsewhere (as a payment provider does): the app's
    own ``GatewayCharge`` table is not what it answers from."""

    statement: ClassVar[dict[str, tuple[str, str, Decimal]]] = {}

    def charge(self, *, customer: str, amount: Decimal, idempotency_key: str) -> Any:
        reference, _, _ = self.statement.setdefault(
            idempotency_key, (f"remote_{len(self.statement) + 1}", customer, amount)
        )
        return payments.ChargeResult(reference)

    def find_charge(self, *, idempotency_key: str) -> payments.ChargeLookup:
        if idempotency_key not in self.statement:
            return payments.ChargeLookup(payments.ChargeState.NOT_CHARGED)
        reference, customer, amount = self.statement[idempotency_key]
        return payments.ChargeLookup(
            payments.ChargeState.CHARGED, reference=reference, customer=customer, amount=amount
        )


@pytest.fixture
def remote() -> Iterator[type[RemoteGateway]]:
    RemoteGateway.statement = {}
    with override_settings(SUBSCRIPTIONS_GATEWAY=f"{__name__}.RemoteGateway"):
        yield RemoteGateway


def test_a_charge_row_written_behind_the_apps_back_confirms_nothing(
    make_subscription: Any, now: Any, remote: type[RemoteGateway]
) -> None:
    subscription = make_subscription()
    job = pending_job(subscription)
    forged = GatewayCharge.objects.create(
        reference="ch_forged", idempotency_key=key_of(subscription), customer="alice", amount=PRICE
    )
    forge_charged(job, forged.reference, status=SubscriptionJobStatus.PROCESSING)

    assert run_inline(job, at=now) == {"renewed": 1}

    assert remote.statement == {key_of(subscription): ("remote_1", "alice", PRICE)}
    assert child_order(subscription).charge_reference == "remote_1"


@override_settings(SUBSCRIPTIONS_MAX_RETRIES="3")
def test_a_decline_under_the_key_fails_the_resumed_renewal_as_a_decline_and_its_retry_charges(
    make_subscription: Any, now: Any
) -> None:
    """The forgery as it was found: a declined renewal's step set to ``charge`` with a
    made-up reference while it waited for its retry."""
    subscription, job = failed_once(make_subscription, now, declines=1)
    assert GatewayDecline.objects.get().idempotency_key == key_of(subscription)
    forge_charged(job, "ch_made_up")

    assert run_inline(job, at=job.action_date) == {"retry": 1}
    job.refresh_from_db()
    subscription.refresh_from_db()
    assert (job.status, job.retry_count, job.parameter, job.custom_text) == (
        SubscriptionJobStatus.RETRY,
        2,
        JobStep.CREATE_ORDER,
        "",
    )
    assert subscription.status == SubscriptionStatus.PAST_DUE
    assert "PaymentDeclined: test gateway: card of customer alice declined" in (
        subscription.attention_reason
    )
    assert child_order(subscription).status == OrderStatus.PENDING
    assert not GatewayCharge.objects.exists()

    assert run_inline(job, at=job.action_date) == {"renewed": 1}
    (charge,) = GatewayCharge.objects.all()
    assert child_order(subscription).charge_reference == charge.reference


@override_settings(SUBSCRIPTIONS_MAX_RETRIES="3")
def test_a_charge_for_another_amount_under_the_key_is_for_an_operator(
    make_subscription: Any, now: Any
) -> None:
    subscription, job = failed_once(make_subscription, now, errors=1)
    taken = payments.TestGateway().charge(
        customer="alice", amount=Decimal("0.01"), idempotency_key=key_of(subscription)
    )
    forge_charged(job, taken.reference)

    assert run_inline(job, at=job.action_date) == {"failed": 1}

    job.refresh_from_db()
    subscription.refresh_from_db()
    assert job.status == SubscriptionJobStatus.FAILED and job.last_error.startswith(
        "ChargeMismatch: "
    )
    assert subscription.status == SubscriptionStatus.NEEDS_ATTENTION
    assert "charged 0.01000 to alice" in subscription.attention_reason
    assert "the order is for 19.80000 from alice" in subscription.attention_reason
    assert child_order(subscription).status == OrderStatus.PENDING
    assert GatewayCharge.objects.count() == 1


def test_the_test_gateway_answers_from_its_records(now: Any) -> None:
    gateway = payments.TestGateway()
    assert gateway.find_charge(idempotency_key="k").state == payments.ChargeState.NOT_CHARGED
    payments.script_customer(customer="bob", declines=1)
    with pytest.raises(payments.PaymentDeclined):
        gateway.charge(customer="bob", amount=Decimal(3), idempotency_key="k")
    declined = gateway.find_charge(idempotency_key="k")
    assert (declined.state, declined.amount) == (payments.ChargeState.DECLINED, Decimal(3))
    taken = gateway.charge(customer="bob", amount=Decimal(3), idempotency_key="k")
    assert gateway.find_charge(idempotency_key="k") == payments.ChargeLookup(
        payments.ChargeState.CHARGED, reference=taken.reference, customer="bob", amount=Decimal(3)
    )
