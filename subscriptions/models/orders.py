"""Orders: the parent order of a subscription, one child order per paid period with its
lines, and the periods skipped while the subscription was failing.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.db.models import Q
from django.utils import timezone

from subscriptions.models.subscription import Subscription


class OrderStatus(models.TextChoices):
    PLACED = "placed", "placed"  # the parent order: what the customer subscribed to
    PENDING = "pending", "pending payment"  # a child order created, not yet paid
    CONFIRMED = "confirmed", "confirmed"  # a child order paid and confirmed


class Order(models.Model):
    """The parent order of a subscription, or a child order for one period.

    ``(subscription, period_start)`` is unique: a second order for one period cannot exist,
    whatever the code does. A child order that is never paid (its job failed or was
    cancelled) is deleted, so "an order for this period" always means one that was paid or
    is being paid.
    """

    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="orders")
    parent = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="children"
    )
    period_number = models.IntegerField(null=True, blank=True)
    period_start = models.DateTimeField(null=True, blank=True)
    period_end = models.DateTimeField(null=True, blank=True)
    amount = models.DecimalField(max_digits=20, decimal_places=5)
    status = models.CharField(max_length=20, choices=OrderStatus.choices)
    charge_reference = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    confirmed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["subscription", "period_start"], name="order_one_per_period"
            ),
            models.UniqueConstraint(
                fields=["subscription"],
                condition=Q(parent__isnull=True),
                name="order_one_parent_per_subscription",
            ),
            models.CheckConstraint(
                condition=Q(status__in=OrderStatus.values), name="order_status_valid"
            ),
        ]
        indexes = [
            # subscriptions orders (selectors.orders, export_orders): orders by the time they
            # were placed, newest first for a listing, a page at a time for an export.
            models.Index(fields=["created_at", "id"], name="order_created"),
        ]

    def __str__(self) -> str:
        if self.parent_id is None:
            return f"parent order {self.pk}"
        return f"order {self.pk} for period {self.period_number}"


class OrderLine(models.Model):
    """One item of an order as it was priced: written with the order and never changed, so an
    order keeps what it charged whatever happens to the subscription's items later. The
    order's ``amount`` is the sum of its lines."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="lines")
    sku = models.CharField("item (SKU)", max_length=64)
    quantity = models.IntegerField()
    unit_price = models.DecimalField(max_digits=20, decimal_places=5)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(quantity__gt=0), name="orderline_quantity_positive"),
            models.CheckConstraint(
                condition=Q(unit_price__gte=0), name="orderline_unit_price_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.quantity} x {self.sku} at {self.unit_price}"

    @property
    def amount(self) -> Decimal:
        return self.unit_price * self.quantity


class SkippedPeriods(models.Model):
    """Periods of a subscription that got no order and no charge because they started while
    it was failing (past due, or needing attention): written when its renewal is paid at last
    and it resumes with the first period that starts after that (``placing.place_next``).

    A failing subscription does not accumulate periods, so paying up never brings a burst of
    catch-up charges (docs/subscriptions.md, *Past due: no catch-up*).
    """

    subscription = models.ForeignKey(
        Subscription, on_delete=models.CASCADE, related_name="skipped_periods"
    )
    first_period = models.IntegerField()
    last_period = models.IntegerField()
    starts_at = models.DateTimeField(help_text="The first skipped period's start.")
    ends_at = models.DateTimeField(help_text="The last skipped period's end.")
    reason = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "skipped periods"
        verbose_name_plural = "skipped periods"
        constraints = [
            models.CheckConstraint(
                condition=Q(last_period__gte=models.F("first_period")),
                name="skippedperiods_last_not_before_first",
            ),
        ]

    def __str__(self) -> str:
        return f"periods {self.first_period}-{self.last_period} skipped"
