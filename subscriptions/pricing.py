"""What a period of a subscription costs: its items, the ones in force for each period, and
their sum; the bounds a subscription's items must fit; the period a change of items applies to.

This is the only place an amount is computed (``price_periods``): a child order stores it with
its lines when it is created, and the charge takes the order's amount. A new subscription, the
admin's items and ``services.add_item`` all check new items here (``check_items_fit``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.db.models import Max

from subscriptions import periods
from subscriptions.models import (
    MAX_ITEMS,
    MAX_PERIOD_AMOUNT,
    Order,
    OrderLine,
    Subscription,
    SubscriptionItem,
)


@dataclass(frozen=True)
class ItemSpec:
    """One item: of a new subscription, as the command line or a caller gives it, or of a
    period as priced (``Priced``)."""

    sku: str
    quantity: int
    unit_price: Decimal


@dataclass(frozen=True)
class Priced:
    """What one period of a subscription costs: the items in force for it, and their sum."""

    amount: Decimal
    lines: tuple[ItemSpec, ...]

    def order_lines(self, order: Order) -> list[OrderLine]:
        """Unsaved lines of ``order``, one per item priced."""
        return [
            OrderLine(order=order, sku=i.sku, quantity=i.quantity, unit_price=i.unit_price)
            for i in self.lines
        ]


def check_items_fit(
    *, existing: Sequence[SubscriptionItem], adding: Sequence[SubscriptionItem]
) -> None:
    """Refuse items that would give a subscription more than ``MAX_ITEMS`` items, or make a
    period cost more than ``MAX_PERIOD_AMOUNT`` (the command line, the admin's items and
    ``add_item`` all ask here).

    Items are never removed, and each applies from its period on, so the periods to come cost
    the sum of every item: that sum is what must fit an order's amount.
    """
    items = [*existing, *adding]
    if len(items) > MAX_ITEMS:
        raise ValidationError(
            {"item": f"{len(items)} items; a subscription has at most {MAX_ITEMS}"}
        )
    total = sum(
        (i.amount for i in items if i.quantity is not None and i.unit_price is not None),
        Decimal(0),
    )
    if total > MAX_PERIOD_AMOUNT:
        raise ValidationError(
            {
                "item": f"the items come to {total} a period; one period costs at most "
                f"{MAX_PERIOD_AMOUNT:,}"
            }
        )


def price_periods(wanted: Iterable[tuple[int, int]]) -> dict[tuple[int, int], Priced]:
    """What each (subscription id, period number) costs: its items in force for that period
    (``applies_from`` at or before it), with the sum of quantity x unit price, in one query.

    This is the only place an amount is computed; a child order stores it with its lines when
    it is created, and the charge takes the order's amount.
    """
    wanted = set(wanted)
    items: dict[int, list[SubscriptionItem]] = {}
    for item in SubscriptionItem.objects.filter(
        subscription_id__in={pk for pk, _ in wanted}
    ).order_by("pk"):
        items.setdefault(item.subscription_id, []).append(item)
    priced = {}
    for pk, number in wanted:
        lines = tuple(
            ItemSpec(i.sku, i.quantity, i.unit_price)
            for i in items.get(pk, [])
            if i.in_force(number)
        )
        total = sum((line.unit_price * line.quantity for line in lines), Decimal(0))
        priced[(pk, number)] = Priced(total.quantize(Decimal("0.00001")), lines)
    return priced


def next_period_for_changes(*, subscription: Subscription, now: datetime) -> int:
    """The first period a change made to ``subscription``'s items at ``now`` applies to.

    Before billing starts (the subscription is being created), its first period. Once it
    is live, the period after the last one that has begun or has an order: a period under
    way, ordered or charged keeps the items it was priced with.
    """
    first = subscription.first_period
    if not Order.objects.filter(subscription=subscription, parent__isnull=True).exists():
        return first
    last = first - 1
    if subscription.period_bounds(first)[0] <= now:
        last = periods.period_containing(subscription.anchor, subscription.period_interval, now)
    ordered = Order.objects.filter(subscription=subscription, parent__isnull=False).aggregate(
        last=Max("period_number")
    )["last"]
    if ordered is not None:
        last = max(last, ordered)
    return last + 1


def parse_price(raw: str, *, field: str = "price") -> Decimal:
    try:
        value = Decimal(str(raw).strip())
    except InvalidOperation:
        raise ValidationError({field: f"{raw!r} is not a decimal number such as 9.90"}) from None
    if not value.is_finite():
        raise ValidationError({field: f"{raw!r} is not a finite number"})
    return value
