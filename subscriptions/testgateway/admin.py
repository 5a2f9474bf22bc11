"""The test gateway's pages: its charges and declines (read-only ledgers) and its script of
what to do to a customer's next calls (editable: that is how a demo declines a renewal).

Here, not in ``subscriptions.admin``, so a host that leaves this app out has none of them.
"""

from __future__ import annotations

from django.contrib import admin

from subscriptions.admin.common import ModelAdmin, ReadOnlyAdmin, amount
from subscriptions.testgateway.models import GatewayCharge, GatewayDecline, GatewayScript


@admin.register(GatewayCharge)
class GatewayChargeAdmin(ReadOnlyAdmin):
    """The test gateway's record of charges: read-only, as a bank statement is."""

    list_display = ("reference", "customer", amount, "idempotency_key", "created_at")
    search_fields = ("customer", "idempotency_key", "reference")


@admin.register(GatewayDecline)
class GatewayDeclineAdmin(ReadOnlyAdmin):
    """The test gateway's record of declined charges: read-only, as its charges are."""

    list_display = ("idempotency_key", "customer", amount, "reason", "created_at")
    search_fields = ("customer", "idempotency_key")


@admin.register(GatewayScript)
class GatewayScriptAdmin(ModelAdmin):
    list_display = ("customer", "declines_left", "errors_left", "updated_at")
