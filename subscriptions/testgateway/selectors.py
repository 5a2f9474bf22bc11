"""The test gateway's charges as ``manage.py subscriptions charges`` and ``show`` print them."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from subscriptions.testgateway.models import GatewayCharge


def charge_summary(charge: GatewayCharge) -> dict[str, Any]:
    return {
        "reference": charge.reference,
        "idempotency_key": charge.idempotency_key,
        "customer": charge.customer,
        "amount": str(charge.amount),
        "created_at": charge.created_at.isoformat(),
    }


def charges(*, subscription_id: int | None = None) -> QuerySet[GatewayCharge]:
    """The test gateway's accepted charges; a subscription's carry its id in their key."""
    rows = GatewayCharge.objects.order_by("pk")
    if subscription_id is not None:
        rows = rows.filter(idempotency_key__startswith=f"subscription:{subscription_id}:")
    return rows
