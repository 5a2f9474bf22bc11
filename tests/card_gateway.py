"""A payment gateway of a project's own, as ``SUBSCRIPTIONS_GATEWAY`` names one in production.

Only ``manage.py check --deploy`` meets it (tests/test_project.py): it must be importable and
shaped as a gateway, and it is not the test gateway. It never takes money.
"""

from __future__ import annotations

from decimal import Decimal

from subscriptions.payments import ChargeLookup, ChargeResult


class CardGateway:
    """The shape of a card processor's adapter; nothing here reaches one."""

    def charge(self, *, customer: str, amount: Decimal, idempotency_key: str) -> ChargeResult:
        raise NotImplementedError("a real adapter calls the card processor here")

    def find_charge(self, *, idempotency_key: str) -> ChargeLookup:
        raise NotImplementedError("a real adapter asks the card processor here")
