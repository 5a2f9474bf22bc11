"""Orders: a read-only ledger, written by subscriptions and their renewals alone."""

from __future__ import annotations

from django.contrib import admin

from subscriptions.admin.common import ReadOnlyAdmin, amount, when
from subscriptions.models import Order


@admin.register(Order)
class OrderAdmin(ReadOnlyAdmin):
    """Read-only: orders are written by subscriptions and their renewals."""

    list_display = ("id", "subscription_id", "period_number", "period", amount, "status")
    list_filter = ("status",)
    search_fields = ("subscription__customer", "charge_reference")
    ordering = ("-created_at", "-pk")

    @admin.display(description="period", ordering="period_start")
    def period(self, order: Order) -> str:
        return when(order.period_start)
