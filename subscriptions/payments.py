"""The payment gateway interface, and how ``SUBSCRIPTIONS_GATEWAY`` finds the class.

A gateway takes money once per idempotency key: a second ``charge`` with a key it has seen
returns the first charge's reference (``replayed=True``) and takes nothing, as Stripe's
idempotent requests do. That is what makes a retried or duplicated renewal safe even when the
worker died after the money moved and before the renewal could write that down.

A gateway also answers what happened under a key (``find_charge``): charged (with the
reference, customer and amount), declined, or not charged. A renewal that resumes past its
charge step asks it rather than trusting its own record, so money follows the gateway: a step
or a reference written behind the app's back confirms nothing the gateway did not take.

The test gateway, with its tables and admin pages, is an app of its own that a host installs
only where it wants it (``subscriptions.testgateway``). ``subscriptions.payments.TestGateway``,
its class's path before it moved, still names it: the name is looked up when asked for
(``__getattr__``), so importing this module never needs that app.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from subscriptions import conf
from subscriptions.models import NeedsOperator, one_line


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


class TestGatewayNotInstalled(ImproperlyConfigured):
    """``SUBSCRIPTIONS_GATEWAY`` names the test gateway, whose app is not installed."""

    __test__ = False  # not a pytest test class


def has_test_gateway() -> bool:
    """Whether the host installed the test gateway's app (``subscriptions.testgateway``)."""
    return apps.is_installed(conf.TEST_GATEWAY_APP)


def require_test_gateway(what: str) -> None:
    """Refuse ``what``, which needs the test gateway, with what to change when its app is not
    installed (rather than with the app registry's error about its models)."""
    if not has_test_gateway():
        raise TestGatewayNotInstalled(
            f"{what}, but its app {conf.TEST_GATEWAY_APP!r} is not in INSTALLED_APPS: add it "
            "where the test gateway is wanted (a demo, tests), or set SUBSCRIPTIONS_GATEWAY to "
            "your payment gateway (docs/install.md)"
        )


def gateway_class() -> type[Gateway]:
    """The class ``SUBSCRIPTIONS_GATEWAY`` names, provided it is a gateway: a class with a
    ``charge`` and a ``find_charge`` method. ``manage.py check`` asks this too."""
    try:
        path = conf.gateway_path()
    except ImproperlyConfigured as exc:
        raise GatewayNotFound(str(exc)) from None
    if path == conf.DEFAULT_GATEWAY:
        require_test_gateway(f"SUBSCRIPTIONS_GATEWAY is the test gateway ({path}, the default)")
    elif path in conf.TEST_GATEWAYS:
        require_test_gateway(
            f"SUBSCRIPTIONS_GATEWAY names the test gateway ({path}, now {conf.DEFAULT_GATEWAY})"
        )
    try:
        found = import_string(path)
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


def __getattr__(name: str) -> Any:
    """``TestGateway`` and ``script_customer``, from the test gateway's app, where they lived
    before it was one: ``subscriptions.payments.TestGateway`` in a setting still works."""
    if name in ("TestGateway", "script_customer"):
        require_test_gateway(
            f"subscriptions.payments.{name} is the test gateway's, now "
            f"subscriptions.testgateway.gateway.{name}"
        )
        from subscriptions.testgateway import gateway as test_gateway

        return getattr(test_gateway, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
