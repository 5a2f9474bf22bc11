"""What is charged, on real ``celery worker`` processes and the scheduler, PostgreSQL and Redis.

The amount comes from the period's order, priced from the items in force for the period,
never from the job's editable ``custom_decimal``; an item added to a live subscription
applies from its next period; a start in the past charges the period that contains the
subscription's creation, never a run of past periods.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from subscriptions import periods, services
from subscriptions.models import (
    JobAction,
    Order,
    OrderStatus,
    Subscription,
    SubscriptionItem,
    SubscriptionJob,
    SubscriptionJobStatus,
    SubscriptionStatus,
)
from tests.conftest import SHORT_LEASE, scheduler_command, wait_for
from tests.scheduling.test_worker_lifecycle import start_worker
from tests.subscriptions.pausing import pausing_env
from tests.subscriptions.test_workers import (
    SCHEDULER_KNOBS,
    charges,
    child_orders,
    first_job,
    job_is,
    status_is,
    subscribe,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SLOW = 60.0
SECOND = timedelta(seconds=1)
PRICE = Decimal("4.5")  # ``subscribe``'s one COFFEE at 4.50


@pytest.fixture
def env(process_env: dict[str, str], settings: Any) -> dict[str, str]:
    """As in ``test_workers``: a failed renewal is retried after a second, at most twice, and
    the scheduler ticks at least every 0.2 s."""
    knobs = {
        "SUBSCRIPTIONS_MAX_RETRIES": "2",
        "SUBSCRIPTIONS_RETRY_DELAY": "1",
        "SUBSCRIPTIONS_TIMEOUT": "30",
        "SUBSCRIPTIONS_BATCH_SIZE": "1000000",
    }
    for name, value in knobs.items():
        setattr(settings, name, value)
    return {**process_env, **knobs, **SCHEDULER_KNOBS}


def charged_amounts(subscription: Subscription) -> dict[str, Decimal]:
    """The gateway's charges of ``subscription`` by idempotency key."""
    return {c.idempotency_key: c.amount for c in charges(subscription)}


def order_lines(order: Order) -> list[tuple[str, int]]:
    return [(line.sku, line.quantity) for line in order.lines.order_by("pk")]


def test_a_period_is_charged_its_priced_amount_even_when_custom_decimal_says_999(
    processes: Any, env: dict[str, str]
) -> None:
    """The survivor's run waits for the doomed run's lease to run out: 4 s (``SHORT_LEASE``)."""
    env = {**env, **SHORT_LEASE}
    start = timezone.now() + SECOND
    before, during = (subscribe(n, every="P1M", start=start) for n in ("gina", "hank"))
    # One operator edits a job before its run; the other after its order was created.
    first_job(before).change(now=timezone.now(), custom_decimal=Decimal("999"))
    processes.start(scheduler_command(), env=env, name="scheduler")
    doomed = start_worker(
        processes,
        pausing_env(env, "create_order"),
        "doomed",
        concurrency=1,
    )
    wait_for(
        lambda: "renewal.paused" in processes.log_of(doomed),
        timeout=SLOW,
        message="the batch created its orders and stopped before charging",
    )
    job = first_job(during)
    assert (job.status, job.parameter) == (SubscriptionJobStatus.PROCESSING, "create_order")
    assert child_orders(during)[0].amount == PRICE and charges(during) == []
    job.change(now=timezone.now(), custom_decimal=Decimal("999"))
    processes.kill(doomed)
    doomed.wait(timeout=10)

    start_worker(processes, env, "survivor", concurrency=1)
    for subscription in (before, during):
        job = first_job(subscription)
        wait_for(
            job_is(job, SubscriptionJobStatus.COMPLETED),
            timeout=SLOW,
            message="the renewal confirms",
        )
        (order,) = child_orders(subscription)
        (charge,) = charges(subscription)
        assert charge.amount == order.amount == PRICE
        assert (order.status, order.charge_reference) == (OrderStatus.CONFIRMED, charge.reference)
        assert order_lines(order) == [("COFFEE", 1)]
        assert job.custom_decimal == PRICE  # the copy is written back from the order


def early_in_a_period(subscription: Subscription) -> bool:
    """Whether more than half of the period under way is still to come."""
    now = timezone.now()
    anchor, interval = subscription.anchor, subscription.period_interval
    start, end = subscription.period_bounds(periods.period_containing(anchor, interval, now))
    return end - now > (end - start) / 2


def test_an_item_added_mid_life_applies_from_the_next_period_and_orders_keep_their_price(
    processes: Any, env: dict[str, str]
) -> None:
    """Eight periods of a second, from a second after the worker is ready (so a slow start
    cannot use up the periods before the change). The item is added once two periods are
    ordered, early in a period: the next period's order cannot come between the change and
    the look at the orders placed before it."""
    processes.start(scheduler_command(), env=env, name="scheduler")
    start_worker(processes, env, "renewals", concurrency=2)
    subscription = subscribe("ivy", every="PT1S", seconds=8)  # eight periods of one second
    wait_for(lambda: len(child_orders(subscription)) >= 2, timeout=SLOW, message="two periods")
    wait_for(
        lambda: early_in_a_period(subscription),
        timeout=SLOW,
        interval=0.02,
        message="more than half a period to go",
    )

    added_at = timezone.now()
    tea = services.add_item(
        item=SubscriptionItem(subscription=subscription, sku="TEA", quantity=1, unit_price=2),
        now=added_at,
    )
    ordered = {o.period_number: o.amount for o in child_orders(subscription)}
    current = periods.period_containing(subscription.anchor, subscription.period_interval, added_at)
    assert tea.applies_from == max(current, *ordered) + 1
    assert set(ordered.values()) == {PRICE}

    wait_for(status_is(subscription, SubscriptionStatus.EXPIRED), timeout=SLOW, message="ends")
    orders = child_orders(subscription)
    assert [o.period_number for o in orders] == list(range(8))
    amounts = charged_amounts(subscription)
    assert len(amounts) == 8
    for order in orders:
        assert order.status == OrderStatus.CONFIRMED
        key = services.idempotency_key(subscription.pk, order.period_start)
        assert amounts[key] == order.amount, "each period is charged what its order says"
        if order.period_number < tea.applies_from:
            assert (order.amount, order_lines(order)) == (PRICE, [("COFFEE", 1)])
        else:
            assert order.amount == PRICE + 2
            assert order_lines(order) == [("COFFEE", 1), ("TEA", 1)]
    for number, amount in ordered.items():  # the orders placed before the change kept it
        assert orders[number].amount == amount
    assert tea.applies_from < 8, "the change reached the periods after it"


def test_a_start_two_years_back_charges_only_the_current_period_then_goes_on(
    processes: Any, env: dict[str, str]
) -> None:
    two_years_ago = timezone.now() - timedelta(days=730)
    monthly = subscribe("kim", every="P1M", start=two_years_ago)
    secondly = subscribe("lee", every="PT1S", start=two_years_ago)
    processes.start(scheduler_command(), env=env, name="scheduler")
    start_worker(processes, env, "renewals", concurrency=2)

    def confirmed(subscription: Subscription) -> list[Order]:
        return [o for o in child_orders(subscription) if o.status == OrderStatus.CONFIRMED]

    wait_for(lambda: len(confirmed(secondly)) >= 4, timeout=SLOW, message="four periods")
    # Monthly: one period, the one that contains the creation, charged once; the next is
    # placed at its own start, a month ahead at most (in the confirmation's transaction).
    wait_for(lambda: confirmed(monthly), timeout=SLOW, message="the monthly period confirmed")
    (order,) = child_orders(monthly)
    assert order.period_number in (23, 24)  # about 24 months back, whatever today's date
    assert order.period_start <= monthly.created_at < order.period_end
    assert order.status == OrderStatus.CONFIRMED and len(charges(monthly)) == 1
    following = SubscriptionJob.objects.get(
        subscription=monthly, status=SubscriptionJobStatus.ACTIVE
    )
    assert following.action == JobAction.CREATE_CHILD_ORDER
    assert (following.custom_integer, following.action_date) == (
        order.period_number + 1,
        order.period_end,
    )
    assert following.action_date > timezone.now()

    # Every second: the first period charged contains the creation, and each one after it
    # follows in turn, at its own start: nothing from the two years before.
    orders = confirmed(secondly)
    first = orders[0]
    assert first.period_start <= secondly.created_at < first.period_end
    numbers = [o.period_number for o in orders]
    assert numbers == list(range(first.period_number, first.period_number + len(orders)))
    assert all(o.confirmed_at >= o.period_start for o in orders)
    amounts = charged_amounts(secondly)
    for order in orders:
        assert amounts[services.idempotency_key(secondly.pk, order.period_start)] == PRICE
    # Nothing else has an order or a charge: every charge is for one of these periods or the
    # one being renewed right now, after them.
    every_order = child_orders(secondly)
    assert min(o.period_number for o in every_order) == first.period_number
    assert set(amounts) <= {
        services.idempotency_key(secondly.pk, o.period_start) for o in every_order
    }
