"""A subscription and its items: what a customer receives every period, and the statuses
that say whether it still renews.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from subscriptions import periods
from subscriptions.models.validation import check_aware, validate_plain_text

#: The highest period number a subscription reaches: period numbers are kept in INTEGER
#: columns (``SubscriptionJob.custom_integer``, ``Order.period_number``,
#: ``SubscriptionItem.applies_from``), whose largest value is 2,147,483,647.
MAX_PERIOD_NUMBER = 2_000_000_000


class SubscriptionStatus(models.TextChoices):
    ACTIVE = "active", "active"  # renews at every period start
    PAST_DUE = "past_due", "past due"  # a renewal failed and is being retried (Stripe's word)
    PENDING_CANCEL = "pending_cancel", "pending cancel"  # ends at the current period's end
    CANCELLED = "cancelled", "cancelled"  # ended by a cancel; nothing more happens
    EXPIRED = "expired", "expired"  # reached its end date
    NEEDS_ATTENTION = "needs_attention", "needs attention"  # a job failed past its retries


#: Statuses in which a renewal may still create an order.
RENEWABLE = (
    SubscriptionStatus.ACTIVE,
    SubscriptionStatus.PAST_DUE,
    SubscriptionStatus.NEEDS_ATTENTION,
)
#: Statuses a confirmed renewal clears: the subscription is paid up again.
FAILING = (SubscriptionStatus.PAST_DUE, SubscriptionStatus.NEEDS_ATTENTION)
#: Statuses after which nothing happens any more.
ENDED = (SubscriptionStatus.CANCELLED, SubscriptionStatus.EXPIRED)


class Subscription(models.Model):
    """A customer's recurring order: items delivered and charged once per period."""

    customer = models.CharField(max_length=100, validators=[validate_plain_text])
    interval = models.CharField(
        "fulfilment interval",
        max_length=64,
        help_text="ISO-8601 duration: P1M (monthly, keeps the anchor day), P1Y, P7D, PT30S.",
    )
    anchor = models.DateTimeField(
        "billing anchor", help_text="Periods are counted from here (normally the start)."
    )
    starts_at = models.DateTimeField("start")
    ends_at = models.DateTimeField("end", null=True, blank=True)
    status = models.CharField(
        max_length=20, choices=SubscriptionStatus.choices, default=SubscriptionStatus.ACTIVE
    )
    attention_reason = models.TextField(
        "last error",
        blank=True,
        default="",
        help_text="Past due or needs attention: the failing renewal's last error, as the "
        "gateway (or whatever failed) said it.",
    )
    cancelled_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=SubscriptionStatus.values),
                name="subscription_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(ends_at__isnull=True) | Q(ends_at__gt=models.F("starts_at")),
                name="subscription_ends_after_start",
            ),
        ]

    def __str__(self) -> str:
        return f"subscription {self.pk} ({self.customer}, every {self.interval})"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        try:
            periods.parse_interval(self.interval, field="interval")
        except periods.PeriodError as exc:
            errors["interval"] = exc.reason
        check_aware(self.starts_at, "starts_at", errors)
        check_aware(self.ends_at, "ends_at", errors)
        check_aware(self.anchor, "anchor", errors)
        if (
            "starts_at" not in errors
            and "ends_at" not in errors
            and self.starts_at
            and self.ends_at
            and self.ends_at <= self.starts_at
        ):
            errors["ends_at"] = (
                f"{self.ends_at.isoformat()} is not after the start {self.starts_at.isoformat()}"
            )
        if self.anchor and self.starts_at and not errors and self.anchor > self.starts_at:
            errors["anchor"] = "must not be after the start"
        if self.anchor and not errors:
            self._check_first_period(errors)
        if (
            self.pk is None
            and "ends_at" not in errors
            and self.ends_at
            and self.created_at
            and self.ends_at <= self.created_at
        ):
            errors["ends_at"] = (
                f"{self.ends_at.isoformat()} has already passed; a subscription must end after"
                " it is created"
            )
        if errors:
            raise ValidationError(errors)

    def _check_first_period(self, errors: dict[str, str]) -> None:
        """The first period must be one the calendar and the columns can hold: it ends before
        the year 9999 is out, and its number fits the period-number columns."""
        try:
            number = self.first_period
            self.period_bounds(number + 1)
        except (OverflowError, ValueError):
            # The interval's fault when even a period starting at creation would not fit.
            try:
                periods.period_bounds(self.created_at or timezone.now(), self.period_interval, 1)
            except (OverflowError, ValueError):
                errors["interval"] = f"{self.interval!r} ends the first period after the year 9999"
            else:
                errors["starts_at"] = (
                    f"{self.starts_at.isoformat()} leaves no whole period of {self.interval} "
                    "before the year 9999 ends"
                )
            return
        if number > MAX_PERIOD_NUMBER:
            errors["starts_at"] = (
                f"{self.starts_at.isoformat()} lies {number:,} periods of {self.interval} "
                f"back; a subscription has at most {MAX_PERIOD_NUMBER:,} periods"
            )

    @property
    def period_interval(self) -> periods.Interval:
        return periods.parse_interval(self.interval)

    def period_bounds(self, number: int) -> tuple[datetime, datetime]:
        return periods.period_bounds(self.anchor, self.period_interval, number)

    @property
    def first_period(self) -> int:
        """The first period charged: the one that contains the start, or, for a start in the
        past, the one that contains the moment the subscription was created. Periods that
        ended before it existed are never charged."""
        moment = max(self.starts_at, self.created_at) if self.created_at else self.starts_at
        return periods.period_containing(self.anchor, self.period_interval, moment)


#: The most items one line may carry each period: far beyond any order, far inside the column.
MAX_QUANTITY = 1_000_000
#: The most one period of a subscription may cost (the sum of its items), and so the most one
#: item may come to: far beyond any order, far inside the amount columns (decimal(20,5), below
#: 10^15), so that no sum of items overflows an order or a charge.
MAX_PERIOD_AMOUNT = Decimal(1_000_000_000)
#: The most items a subscription has (items are added, never removed).
MAX_ITEMS = 100


class SubscriptionItem(models.Model):
    """One line of a subscription: what is delivered every period, and at what unit price,
    from period ``applies_from`` on.

    An item added to a live subscription applies from its next period
    (``pricing.next_period_for_changes``), so a period already begun, ordered or charged
    keeps the items it was priced with.
    """

    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="items")
    sku = models.CharField("item (SKU)", max_length=64, validators=[validate_plain_text])
    quantity = models.IntegerField()
    unit_price = models.DecimalField(max_digits=20, decimal_places=5)
    applies_from = models.IntegerField(
        "applies from period",
        default=0,
        help_text="The first period this item is delivered and charged in. An item added to a "
        "live subscription applies from its next period; orders already placed never change.",
    )

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(quantity__gt=0), name="item_quantity_positive"),
            models.CheckConstraint(
                condition=Q(unit_price__gte=0), name="item_unit_price_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(applies_from__gte=0), name="item_applies_from_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.quantity} x {self.sku} at {self.unit_price}"

    def in_force(self, number: int) -> bool:
        """Whether this item is part of period ``number``."""
        return self.applies_from <= number

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.quantity is not None and self.quantity <= 0:
            errors["quantity"] = f"{self.quantity} is not a positive number of items"
        elif self.quantity is not None and self.quantity > MAX_QUANTITY:
            errors["quantity"] = f"{self.quantity} is more than {MAX_QUANTITY:,} items"
        if self.unit_price is not None and self.unit_price < 0:
            errors["unit_price"] = f"{self.unit_price} is negative"
        elif (
            not errors
            and self.quantity is not None
            and self.unit_price is not None
            and self.amount > MAX_PERIOD_AMOUNT
        ):
            errors["unit_price"] = (
                f"{self.quantity} x {self.unit_price} comes to {self.amount} a period; one "
                f"period costs at most {MAX_PERIOD_AMOUNT:,}"
            )
        if errors:
            raise ValidationError(errors)

    @property
    def amount(self) -> Decimal:
        return self.unit_price * self.quantity
