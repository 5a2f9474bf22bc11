"""The payment gateway interface, and the test gateway shipped with the project.

A gateway takes money once per idempotency key: a second ``charge`` with a key it has seen
returns the first charge's reference (``replayed=True``) and takes nothing, as Stripe's
idempotent requests do. That is what makes a retried or duplicated renewal safe even when the
worker died after the money moved and before the renewal could write that down.

The test gateway keeps its own tables (``GatewayCharge``: every accepted charge;
``GatewayScript``: per customer, decline the next N charges or fail the next N calls) and
commits on its own, outside the caller's transaction, as a remote service would.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils.module_loading import import_string

from subscriptions import conf
from subscriptions.models import GatewayCharge, GatewayScript

logger = logging.getLogger("subscriptions")


class PaymentDeclined(Exception):
    """The gateway refused the charge (card declined); a later retry may succeed."""


class GatewayError(Exception):
    """The gateway could not be reached or answered with an error; nothing was charged."""


@dataclass(frozen=True)
class ChargeResult:
    reference: str
    replayed: bool = False


class Gateway(Protocol):
    def charge(self, *, customer: str, amount: Decimal, idempotency_key: str) -> ChargeResult:
        """Take ``amount`` from ``customer`` once per ``idempotency_key``; raise
        ``PaymentDeclined`` or ``GatewayError`` when nothing was taken."""
        ...


def gateway() -> Gateway:
    """The configured gateway (``SUBSCRIPTIONS_GATEWAY``)."""
    return import_string(conf.gateway_path())()


class TestGateway:
    """A gateway backed by its own tables, scriptable per customer (see the module docstring)."""

    __test__ = False  # not a pytest test class

    def charge(self, *, customer: str, amount: Decimal, idempotency_key: str) -> ChargeResult:
        try:
            return self._charge(customer=customer, amount=amount, key=idempotency_key)
        except IntegrityError:
            # The same key raced in from another process and won: replay its charge.
            return self._charge(customer=customer, amount=amount, key=idempotency_key)

    def _charge(self, *, customer: str, amount: Decimal, key: str) -> ChargeResult:
        outcome = ""
        with transaction.atomic(durable=True):
            seen = GatewayCharge.objects.filter(idempotency_key=key).first()
            if seen is not None:
                if seen.amount != amount or seen.customer != customer:
                    raise GatewayError(
                        f"idempotency key {key!r} was used for {seen.amount} from "
                        f"{seen.customer}; refused for {amount} from {customer}"
                    )
                logger.info("gateway.replayed key=%s reference=%s", key, seen.reference)
                return ChargeResult(seen.reference, replayed=True)
            script = (
                GatewayScript.objects.select_for_update(no_key=True)
                .filter(customer=customer)
                .first()
            )
            if script is not None and script.errors_left > 0:
                script.errors_left -= 1
                script.save(update_fields=["errors_left", "updated_at"])
                outcome = "error"
            elif script is not None and script.declines_left > 0:
                script.declines_left -= 1
                script.save(update_fields=["declines_left", "updated_at"])
                outcome = "declined"
            else:
                charge = GatewayCharge.objects.create(
                    reference=f"ch_{uuid.uuid4().hex[:24]}",
                    idempotency_key=key,
                    customer=customer,
                    amount=amount,
                )
        # The script's countdown is committed before the failure is reported.
        if outcome == "error":
            raise GatewayError(f"test gateway: scripted error for customer {customer}")
        if outcome == "declined":
            raise PaymentDeclined(f"test gateway: card of customer {customer} declined")
        return ChargeResult(charge.reference)


def script_customer(*, customer: str, declines: int = 0, errors: int = 0) -> GatewayScript:
    """Make the test gateway decline the customer's next ``declines`` charges, or fail its
    next ``errors`` calls (replacing any earlier script)."""
    if not (customer or "").strip():
        raise ValidationError({"customer": "is required"})
    for name, value in (("decline", declines), ("error", errors)):
        if value < 0:
            raise ValidationError({name: f"{value} is negative"})
    script, _ = GatewayScript.objects.update_or_create(
        customer=customer, defaults={"declines_left": declines, "errors_left": errors}
    )
    return script
