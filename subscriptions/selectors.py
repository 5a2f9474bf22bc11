"""Subscription reads: plain dictionaries for the command line's ``--json`` and for tests.

Job dictionaries carry the seed's column names (``SCHEDULED_ID`` … ``OPTCOUNTER``, lower-case)
beside the readable ones, so an operator who knows SUBSCRSCHJOBS finds every column.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from scheduling.api import ALL_TIME, ExportWindow, in_key_order
from subscriptions import payments
from subscriptions.models import (
    Order,
    OrderStatus,
    SkippedPeriods,
    Subscription,
    SubscriptionJob,
    SubscriptionJobStatus,
)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _decimal(value: Any) -> str | None:
    return None if value is None else str(value)


def job_summary(job: SubscriptionJob) -> dict[str, Any]:
    return {
        "scheduled_id": job.scheduled_id,
        "action_date": _iso(job.action_date),
        "subscription_id": job.subscription_id,
        "action": job.action,
        "time_placed": _iso(job.time_placed),
        "last_update": _iso(job.last_update),
        "status": job.status,
        "status_name": SubscriptionJobStatus(job.status).label,
        "parameter": job.parameter,
        "field1": job.custom_integer,
        "field2": _decimal(job.custom_decimal),
        "field3": job.custom_text,
        "retry_count": job.retry_count,
        "last_error": job.last_error or None,
        "opt_counter": job.opt_counter,
        "batch_id": job.batch_id,
    }


def order_summary(order: Order) -> dict[str, Any]:
    """An order as ``subscriptions show`` and ``orders`` print it, with its lines (read with
    ``prefetch_related("lines")`` for many orders at once)."""
    return {
        "id": order.pk,
        "subscription_id": order.subscription_id,
        "kind": "parent" if order.parent_id is None else "child",
        "parent_id": order.parent_id,
        "period_number": order.period_number,
        "period_start": _iso(order.period_start),
        "period_end": _iso(order.period_end),
        "amount": _decimal(order.amount),
        "lines": [
            {"sku": line.sku, "quantity": line.quantity, "unit_price": _decimal(line.unit_price)}
            for line in sorted(order.lines.all(), key=lambda line: line.pk)
        ],
        "status": order.status,
        "charge_reference": order.charge_reference,
        "created_at": _iso(order.created_at),
        "confirmed_at": _iso(order.confirmed_at),
    }


def skipped_summary(skipped: SkippedPeriods) -> dict[str, Any]:
    return {
        "first_period": skipped.first_period,
        "last_period": skipped.last_period,
        "starts_at": _iso(skipped.starts_at),
        "ends_at": _iso(skipped.ends_at),
        "reason": skipped.reason,
    }


def subscription_row(subscription: Subscription) -> dict[str, Any]:
    return {
        "id": subscription.pk,
        "customer": subscription.customer,
        "status": subscription.status,
        "interval": subscription.interval,
        "anchor": _iso(subscription.anchor),
        "starts_at": _iso(subscription.starts_at),
        "ends_at": _iso(subscription.ends_at),
        "attention_reason": subscription.attention_reason,
        "last_error": subscription.attention_reason or None,
        "cancelled_at": _iso(subscription.cancelled_at),
    }


def subscription_detail(subscription: Subscription) -> dict[str, Any]:
    """Everything ``subscriptions show`` prints: status, items, orders, jobs, charges, and the
    periods skipped while it was failing."""
    return {
        **subscription_row(subscription),
        "items": [
            {"sku": i.sku, "quantity": i.quantity, "unit_price": _decimal(i.unit_price)}
            for i in subscription.items.order_by("pk")
        ],
        "orders": [
            order_summary(o) for o in subscription.orders.prefetch_related("lines").order_by("pk")
        ],
        "jobs": [job_summary(j) for j in subscription.jobs.order_by("scheduled_id")],
        "charges": gateway_charges(subscription_id=subscription.pk),
        "skipped": [
            skipped_summary(s) for s in subscription.skipped_periods.order_by("first_period")
        ],
    }


def subscriptions() -> QuerySet[Subscription]:
    """Every subscription, oldest first."""
    return Subscription.objects.order_by("pk")


def jobs(*, subscription_id: int | None = None, status: int | None = None) -> QuerySet[Any]:
    rows = SubscriptionJob.objects.order_by("scheduled_id")
    if subscription_id is not None:
        rows = rows.filter(subscription_id=subscription_id)
    if status is not None:
        rows = rows.filter(status=status)
    return rows


def orders(
    *,
    subscription_id: int | None = None,
    status: str | None = None,
    window: ExportWindow = ALL_TIME,
) -> QuerySet[Order]:
    """Orders placed in ``window`` (``created_at``), of one subscription or all, in
    ``status`` when given; their lines read with them."""
    if status is not None and status not in OrderStatus.values:
        raise ValidationError(
            {"status": f"{status!r} is not one of {', '.join(OrderStatus.values)}"}
        )
    rows = window.of(Order.objects.prefetch_related("lines"), "created_at")
    if subscription_id is not None:
        rows = rows.filter(subscription_id=subscription_id)
    return rows if status is None else rows.filter(status=status)


def export_orders(
    rows: QuerySet[Order], *, limit: int | None = None
) -> Iterator[list[dict[str, Any]]]:
    """Every order of ``rows`` as ``order_summary``, oldest first by ``(created_at, id)``,
    a page at a time (``order_created``), with no cap unless ``limit``."""
    for page in in_key_order(
        rows, time_field="created_at", key=lambda o: (o.created_at, o.pk), limit=limit
    ):
        yield [order_summary(order) for order in page]


def gateway_charges(*, subscription_id: int | None = None) -> list[dict[str, Any]]:
    """The test gateway's accepted charges (of one subscription), where the host installed it:
    another gateway keeps its charges on its own side, and there is none to show here."""
    if not payments.has_test_gateway():
        return []
    from subscriptions.testgateway import selectors

    return [selectors.charge_summary(c) for c in selectors.charges(subscription_id=subscription_id)]
