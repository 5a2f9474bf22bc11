"""The payment gateway interface, and the test gateway shipped with the project.

A gateway takes money once per idempotency key: a second ``charge`` with a key it has seen
returns the first charge's reference (``replayed=True``) and takes nothing, as Stripe's
idempotent requests do. That is what makes a retried or duplicated renewal safe even when the
worker died after the money moved and before the renewal could write that down.

A gateway also answers what happened under a key (``find_charge``): charged (with the
reference, customer and amount), declined, or not charged. A renewal that resumes past its
charge step asks it rather than trusting its own record, so money follows the gateway: a step
or a reference written behind the app's back confirms nothing the gateway did not take.

The test gateway keeps its own tables (``GatewayCharge``: every accepted charge;
``GatewayDecline``: every declined one; ``GatewayScript``: per customer, decline the next N
charges or fail the next N calls) and commits on its own, outside the caller's transaction,
as a remote service would.
"""

from __future__ import annotations

import enum
import logging
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.module_loading import import_string

from subscriptions import conf, ledger
from subscriptions.models import (
    GatewayCharge,
    GatewayDecline,
    GatewayScript,
    NeedsOperator,
    one_line,
)

logger = logging.getLogger("subscriptions")


class PaymentDeclined(Exception):
    """The gateway refused the charge (card declined); a later retry may succeed."""


class GatewayError(Exception):
    """The gateway could not be reached or answered with an error; nothing was charged."""


class ChargeMismatch(NeedsOperator):
    """The gateway took money under a period's key, but not that period's amount from that
    customer: no retry mends it, an operator looks (the job fails, the order stays unpaid)."""


@dataclass(frozen=True)
class ChargeResult:
    reference: str
    replayed: bool = False


class ChargeState(enum.StrEnum):
    """What a gateway says happened under an idempotency key (``Gateway.find_charge``)."""

    CHARGED = "charged"  # the money was taken: reference, customer and amount say how much
    DECLINED = "declined"  # the last charge under the key was declined; nothing was taken
    NOT_CHARGED = "not_charged"  # nothing under the key: no charge was made, or it never arrived


@dataclass(frozen=True)
class ChargeLookup:
    """A gateway's answer about one idempotency key."""

    state: ChargeState
    reference: str = ""
    customer: str = ""
    amount: Decimal | None = None
    reason: str = ""  # a decline: the gateway's reply

    def confirms(self, *, customer: str, amount: Decimal, key: str) -> bool:
        """Whether this answer proves ``amount`` was taken from ``customer`` under ``key``:
        True when charged, False when nothing was taken. A charge for another amount or
        customer proves nothing and is refused (``ChargeMismatch``)."""
        if self.state != ChargeState.CHARGED:
            return False
        if self.amount != amount or self.customer != customer:
            raise ChargeMismatch(
                f"the gateway charged {self.amount} to {self.customer} under {key!r} "
                f"({self.reference}); the order is for {amount} from {customer}"
            )
        return True


class Gateway(Protocol):
    def charge(self, *, customer: str, amount: Decimal, idempotency_key: str) -> ChargeResult:
        """Take ``amount`` from ``customer`` once per ``idempotency_key``; raise
        ``PaymentDeclined`` or ``GatewayError`` when nothing was taken."""
        ...

    def find_charge(self, *, idempotency_key: str) -> ChargeLookup:
        """What happened under ``idempotency_key``: charged, declined or not charged. Takes
        nothing; raise ``GatewayError`` when the gateway cannot answer."""
        ...


#: What a gateway class must offer (``Gateway``).
GATEWAY_METHODS = ("charge", "find_charge")


class GatewayNotFound(ImproperlyConfigured):
    """``SUBSCRIPTIONS_GATEWAY`` names nothing that can be imported."""


class NotAGateway(ImproperlyConfigured):
    """``SUBSCRIPTIONS_GATEWAY`` names something that is not a gateway class."""


def gateway_class() -> type[Gateway]:
    """The class ``SUBSCRIPTIONS_GATEWAY`` names, provided it is a gateway: a class with a
    ``charge`` and a ``find_charge`` method. ``manage.py check`` asks this too."""
    try:
        path = conf.gateway_path()
        found = import_string(path)
    except ImproperlyConfigured as exc:
        raise GatewayNotFound(str(exc)) from None
    except Exception as exc:  # ImportError, or whatever the module raised while importing
        reason = one_line(f"{type(exc).__name__}: {exc}", limit=200)
        raise GatewayNotFound(
            f"SUBSCRIPTIONS_GATEWAY: {path!r} cannot be imported ({reason}); it must be the "
            f"dotted path of a gateway class, such as {conf.DEFAULT_GATEWAY}"
        ) from None
    missing = [name for name in GATEWAY_METHODS if not callable(getattr(found, name, None))]
    if not isinstance(found, type) or missing:
        lacks = (
            f"it has no {' and no '.join(missing)} method"
            if isinstance(found, type)
            else f"not a class but a {type(found).__name__}"
        )
        raise NotAGateway(
            f"SUBSCRIPTIONS_GATEWAY: {path!r} is not a gateway class ({lacks}); a gateway has "
            f"{' and '.join(f'{name}()' for name in GATEWAY_METHODS)} (docs/subscriptions.md)"
        )
    return found


def gateway() -> Gateway:
    """The configured gateway (``SUBSCRIPTIONS_GATEWAY``)."""
    return gateway_class()()


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
