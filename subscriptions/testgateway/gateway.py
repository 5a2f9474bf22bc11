"""The test gateway: a gateway backed by its own tables, scriptable per customer.

It keeps every accepted charge (``GatewayCharge``) and every declined one (``GatewayDecline``),
and declines a customer's next N charges or fails its next N calls as ``GatewayScript`` says.
It commits on its own, outside the caller's transaction, as a remote service would, and takes
no money: ``manage.py check --deploy`` warns while ``SUBSCRIPTIONS_GATEWAY`` names it
(``subscriptions.W001``).
"""

from __future__ import annotations

import logging
import uuid
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from subscriptions.payments import (
    ChargeLookup,
    ChargeResult,
    ChargeState,
    GatewayError,
    PaymentDeclined,
)
from subscriptions.testgateway import ledger
from subscriptions.testgateway.models import GatewayCharge, GatewayDecline, GatewayScript

logger = logging.getLogger("subscriptions")


class TestGateway:
    """A gateway backed by its own tables, scriptable per customer (see the module docstring)."""

    __test__ = False  # not a pytest test class

    def charge(self, *, customer: str, amount: Decimal, idempotency_key: str) -> ChargeResult:
        try:
            return self._charge(customer=customer, amount=amount, key=idempotency_key)
        except IntegrityError:
            # The same key raced in from another process and won: replay its charge.
            return self._charge(customer=customer, amount=amount, key=idempotency_key)

    def find_charge(self, *, idempotency_key: str) -> ChargeLookup:
        """From its own records: the accepted charge of the key, else its latest decline."""
        charge = GatewayCharge.objects.filter(idempotency_key=idempotency_key).first()
        if charge is not None:
            return ChargeLookup(
                ChargeState.CHARGED,
                reference=charge.reference,
                customer=charge.customer,
                amount=charge.amount,
            )
        declined = (
            GatewayDecline.objects.filter(idempotency_key=idempotency_key)
            .order_by("-created_at", "-pk")
            .first()
        )
        if declined is not None:
            return ChargeLookup(
                ChargeState.DECLINED,
                customer=declined.customer,
                amount=declined.amount,
                reason=declined.reason,
            )
        return ChargeLookup(ChargeState.NOT_CHARGED)

    def _charge(self, *, customer: str, amount: Decimal, key: str) -> ChargeResult:
        outcome = ""
        with transaction.atomic(durable=True):
            found = ledger.test_gateway_charge(
                key=key,
                customer=customer,
                amount=amount,
                reference=_reference(),
                now=timezone.now(),
            )
            if found.inserted is not None:
                return ChargeResult(found.inserted)
            if found.seen_reference is not None:
                return _replayed(
                    key,
                    found.seen_reference,
                    str(found.seen_customer),
                    Decimal(str(found.seen_amount)),
                    customer,
                    amount,
                )
            if found.errors_left or found.declines_left:
                outcome = "error" if found.errors_left else "declined"
                field = "errors_left" if found.errors_left else "declines_left"
                GatewayScript.objects.filter(customer=customer).update(
                    **{field: F(field) - 1}, updated_at=timezone.now()
                )
                if outcome == "declined":
                    _record_decline(customer=customer, amount=amount, key=key)
        if not outcome:
            raise IntegrityError(f"idempotency key {key!r} was inserted meanwhile")
        raise _failure(outcome, customer)


def _record_decline(*, customer: str, amount: Decimal, key: str) -> None:
    GatewayDecline.objects.create(
        idempotency_key=key,
        customer=customer,
        amount=amount,
        reason=str(_failure("declined", customer))[:255],
    )


def _reference() -> str:
    return f"ch_{uuid.uuid4().hex[:24]}"


def _replayed(
    key: str,
    reference: str,
    seen_customer: str,
    seen_amount: Decimal,
    customer: str,
    amount: Decimal,
) -> ChargeResult:
    """The first charge of ``key`` again, provided it was for the same amount and customer."""
    if seen_amount != amount or seen_customer != customer:
        raise GatewayError(
            f"idempotency key {key!r} was used for {seen_amount} from "
            f"{seen_customer}; refused for {amount} from {customer}"
        )
    logger.info("gateway.replayed key=%s reference=%s", key, reference)
    return ChargeResult(reference, replayed=True)


def _failure(outcome: str, customer: str) -> Exception:
    """The exception that reports a scripted failure."""
    if outcome == "error":
        return GatewayError(f"test gateway: scripted error for customer {customer}")
    return PaymentDeclined(f"test gateway: card of customer {customer} declined")


def script_customer(*, customer: str, declines: int = 0, errors: int = 0) -> GatewayScript:
    """Make the test gateway decline the customer's next ``declines`` charges, or fail its
    next ``errors`` calls (replacing any earlier script)."""
    if not (customer or "").strip():
        raise ValidationError({"customer": "is required"})
    wanted = GatewayScript(customer=customer, declines_left=declines, errors_left=errors)
    try:
        # The model's rules (the admin's too); the row is then written by its customer.
        wanted.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        names = {"declines_left": "decline", "errors_left": "error"}
        raise ValidationError(
            {names.get(field, field): messages for field, messages in exc.error_dict.items()}
        ) from None
    script, _ = GatewayScript.objects.update_or_create(
        customer=customer, defaults={"declines_left": declines, "errors_left": errors}
    )
    return script
