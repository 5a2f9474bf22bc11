"""What a period costs and what is charged for it, run in-process against the real database.

The amount charged is the period's order's own amount, priced from the items in force for
that period; the job's ``custom_decimal`` is only a copy and cannot be edited in the admin. An
item added to a live subscription applies from its next period. A start in the past is first
charged for the period that contains the subscription's creation. The same rules on real
workers are in ``test_pricing_workers``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from subscriptions import services
from subscriptions.models import (
    Order,
    OrderStatus,
    SubscriptionItem,
    SubscriptionJobStatus,
)
from subscriptions.testgateway.models import GatewayCharge
from tests.subscriptions.conftest import pending_job, run_inline

pytestmark = pytest.mark.django_db

PRICE = Decimal("19.8")  # the fixture's 2 x COFFEE at 9.90


def child(subscription: Any, number: int) -> Order:
    return Order.objects.get(subscription=subscription, parent__isnull=False, period_number=number)


def lines(order: Order) -> list[tuple[str, int, Decimal]]:
    return [(line.sku, line.quantity, line.unit_price) for line in order.lines.order_by("pk")]


def charged(subscription: Any, start: datetime) -> Decimal:
    key = services.idempotency_key(subscription.pk, start)
    return GatewayCharge.objects.get(idempotency_key=key).amount


def add_tea(subscription: Any, *, now: datetime) -> SubscriptionItem:
    item = SubscriptionItem(subscription=subscription, sku="TEA", quantity=1, unit_price=5)
    return services.add_item(item=item, now=now)


# --- the amount charged ---------------------------------------------------------------------


def test_a_renewal_charges_the_priced_amount_whatever_custom_decimal_says(
    make_subscription, now
) -> None:
    subscription = make_subscription()
    job = pending_job(subscription)
    job.change(now=now, custom_decimal=Decimal("999"))
    assert run_inline(job, at=now) == {"renewed": 1}
    order = child(subscription, 0)
    assert order.amount == PRICE and charged(subscription, order.period_start) == PRICE
    assert lines(order) == [("COFFEE", 2, Decimal("9.9"))]
    job.refresh_from_db()
    assert job.custom_decimal == PRICE  # written back as a copy of the order's amount


def test_a_resumed_renewal_charges_its_orders_amount_not_an_edited_custom_decimal(
    make_subscription, now
) -> None:
    """The run that created the order died before charging; meanwhile someone wrote 999 into
    the job. The retry charges what the order records."""
    subscription = make_subscription()
    job = pending_job(subscription)
    job.change(
        now=now,
        status=SubscriptionJobStatus.PROCESSING,
        parameter="create_order",
        custom_decimal=Decimal("999"),
    )
    Order.objects.create(
        subscription=subscription,
        parent=Order.objects.get(subscription=subscription, parent=None),
        period_number=0,
        period_start=now,
        period_end=subscription.period_bounds(0)[1],
        amount=PRICE,
        status=OrderStatus.PENDING,
    )
    assert run_inline(job, at=now) == {"renewed": 1}
    (charge,) = GatewayCharge.objects.all()
    assert charge.amount == PRICE
    assert child(subscription, 0).status == OrderStatus.CONFIRMED


def test_the_admin_shows_custom_decimal_read_only_and_ignores_a_posted_value(
    admin_client: Any, make_subscription
) -> None:
    job = pending_job(make_subscription())
    url = reverse("admin:subscriptions_subscriptionjob_change", args=[job.pk])
    page = admin_client.get(url).content.decode()
    assert 'name="custom_decimal"' not in page and "field-custom_decimal" in page
    form = {"parameter": "", "custom_integer": "0", "custom_text": "", "opt_counter": "0"}
    response = admin_client.post(url, {**form, "custom_decimal": "999"})
    assert response.status_code == 403  # a renewal's page is a view: nothing on it is a form
    job.refresh_from_db()
    assert job.custom_decimal is None


# --- items changed on a live subscription ---------------------------------------------------


def test_an_item_added_mid_period_applies_from_the_next_period_only(make_subscription, now) -> None:
    subscription = make_subscription()
    run_inline(pending_job(subscription), at=now)  # period 0: ordered and charged
    item = add_tea(subscription, now=now + timedelta(days=3))
    assert item.applies_from == 1

    renewal = pending_job(subscription)
    run_inline(renewal, at=renewal.action_date)  # period 1
    first, second = child(subscription, 0), child(subscription, 1)
    assert (first.amount, lines(first)) == (PRICE, [("COFFEE", 2, Decimal("9.9"))])
    assert second.amount == PRICE + 5
    assert lines(second) == [("COFFEE", 2, Decimal("9.9")), ("TEA", 1, Decimal("5"))]
    assert charged(subscription, first.period_start) == PRICE
    assert charged(subscription, second.period_start) == PRICE + 5
    parent = Order.objects.get(subscription=subscription, parent=None)
    assert parent.amount == PRICE  # what was subscribed to, as it was


def test_an_item_added_before_the_current_periods_renewal_ran_waits_for_the_next(
    make_subscription, now
) -> None:
    """Period 0 has begun but its renewal has not run yet (the scheduler is behind): the
    item still does not reach period 0's order or charge."""
    subscription = make_subscription()
    assert add_tea(subscription, now=now + timedelta(minutes=1)).applies_from == 1
    run_inline(pending_job(subscription), at=now + timedelta(minutes=2))
    order = child(subscription, 0)
    assert order.amount == PRICE and charged(subscription, order.period_start) == PRICE


def test_an_item_added_before_a_subscription_starts_applies_from_its_first_period(
    make_subscription, now
) -> None:
    subscription = make_subscription(start=now + timedelta(days=10))
    assert add_tea(subscription, now=now).applies_from == 0
    run_inline(pending_job(subscription), at=subscription.starts_at)
    assert child(subscription, 0).amount == PRICE + 5


def change_form_data(response: Any) -> dict[str, Any]:
    """The POST data of a subscription's change page as rendered: the inlines' management
    forms and the ids of their rows (everything else on the page is read-only)."""
    data: dict[str, Any] = {}
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        management = formset.management_form
        for name in management.fields:
            data[f"{formset.prefix}-{name}"] = management.initial.get(name, "")
        data[f"{formset.prefix}-TOTAL_FORMS"] = formset.initial_form_count()
        for index, form in enumerate(formset.initial_forms):
            data[f"{formset.prefix}-{index}-{formset.model._meta.pk.name}"] = form.instance.pk
    return data


def test_the_admin_says_from_which_period_an_added_item_applies_and_keeps_to_it(
    admin_client: Any, make_subscription, now
) -> None:
    subscription = make_subscription()
    run_inline(pending_job(subscription), at=now)
    url = reverse("admin:subscriptions_subscription_change", args=[subscription.pk])
    response = admin_client.get(url)
    page = response.content.decode()
    start = subscription.period_bounds(1)[0]
    assert "Items added now apply from the next period: period 1, which starts " in page
    assert f"{start:%Y-%m-%d %H:%M:%S} UTC" in page
    assert "keep the items and the price they were charged with" in page

    data = change_form_data(response)
    index = data["items-TOTAL_FORMS"]
    data.update(
        {
            "items-TOTAL_FORMS": index + 1,
            f"items-{index}-sku": "TEA",
            f"items-{index}-quantity": "1",
            f"items-{index}-unit_price": "5",
        }
    )
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    tea = SubscriptionItem.objects.get(subscription=subscription, sku="TEA")
    assert tea.applies_from == 1
    assert child(subscription, 0).amount == PRICE
    assert "period 1, which starts" in admin_client.get(url).content.decode()


# --- a start in the past --------------------------------------------------------------------


def test_a_start_in_the_past_is_first_charged_for_the_period_containing_its_creation(
    make_subscription, now
) -> None:
    start = datetime(2028, 1, 20, 9, 0, tzinfo=UTC)  # about two years before ``now``
    subscription = make_subscription(start=start)
    job = pending_job(subscription)
    # 2029-12-20 09:00 to 2030-01-20 09:00 contains now (2030-01-07): period 23.
    assert job.custom_integer == 23
    assert job.action_date == datetime(2029, 12, 20, 9, 0, tzinfo=UTC)
    assert SubscriptionItem.objects.get(subscription=subscription).applies_from == 23
    assert run_inline(job, at=now) == {"renewed": 1}
    (order,) = Order.objects.filter(subscription=subscription, parent__isnull=False)
    assert order.period_number == 23 and order.period_start <= now < order.period_end
    assert GatewayCharge.objects.count() == 1
    following = pending_job(subscription)
    assert following.custom_integer == 24
    assert following.action_date == datetime(2030, 1, 20, 9, 0, tzinfo=UTC)


def test_a_subscription_that_ended_before_it_was_created_is_refused(make_subscription, now) -> None:
    with pytest.raises(ValidationError) as caught:
        make_subscription(start=now - timedelta(days=60), end=now - timedelta(days=1))
    assert "has already passed" in str(caught.value.message_dict["ends_at"])
