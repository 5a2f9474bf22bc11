"""System checks: every ``SUBSCRIPTIONS_*`` setting has the type and range it needs
(``manage.py check``, and every command that checks before it runs), and what production
subscriptions must not keep from their defaults (``manage.py check --deploy``).

| id | level | what |
| --- | --- | --- |
| subscriptions.E001 | error | ``SUBSCRIPTIONS_MAX_RETRIES``: not 0 to 100 (or per action) |
| subscriptions.E002 | error | ``SUBSCRIPTIONS_RETRY_DELAY``: not 0 to 2,592,000 s (or per action) |
| subscriptions.E003 | error | ``SUBSCRIPTIONS_TIMEOUT``: not a whole 1 to 86,400 |
| subscriptions.E004 | error | ``SUBSCRIPTIONS_BATCH_SIZE``: not a whole 1 to 1,000,000 |
| subscriptions.E005 | error | ``SUBSCRIPTIONS_GATEWAY``: cannot be imported |
| subscriptions.E006 | error | ``SUBSCRIPTIONS_GATEWAY``: not a class with charge, find_charge |
| subscriptions.E007 | error | ``SUBSCRIPTIONS_CURRENCY_DECIMALS``: not a whole 0 to 4 |
| subscriptions.E008 | error | ``SUBSCRIPTIONS_GATEWAY``: the test gateway, its app not installed |
| subscriptions.W001 | warning, ``--deploy`` only | ``SUBSCRIPTIONS_GATEWAY`` is the test gateway |

The rules are the accessors' own (``subscriptions.conf``, ``payments.gateway_class``): a value
the check passes is one the app reads without error, and one it refuses would stop the app
with the same words when first read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured

from subscriptions import conf, payments

#: Each setting's check id, and the reader that raises when the setting is out of range.
READERS: tuple[tuple[str, Callable[[], Any]], ...] = (
    ("subscriptions.E001", conf.max_retries_by_action),  # SUBSCRIPTIONS_MAX_RETRIES
    ("subscriptions.E002", conf.retry_delays_by_action),  # SUBSCRIPTIONS_RETRY_DELAY
    ("subscriptions.E003", conf.timeout),  # SUBSCRIPTIONS_TIMEOUT
    ("subscriptions.E004", conf.batch_size),  # SUBSCRIPTIONS_BATCH_SIZE
    ("subscriptions.E007", conf.currency_decimals),  # SUBSCRIPTIONS_CURRENCY_DECIMALS
)
HINT = "See the SUBSCRIPTIONS_* settings in docs/install.md for each setting's range."
TEST_GATEWAY_HINT = (
    f'Add "{conf.TEST_GATEWAY_APP}" to INSTALLED_APPS, or set SUBSCRIPTIONS_GATEWAY to your '
    "payment gateway; see docs/install.md."
)


@register("subscriptions")
def check_settings(**_: Any) -> list[CheckMessage]:
    """Each setting read as the app reads it; one error per setting out of its range."""
    errors: list[CheckMessage] = []
    for check_id, read in READERS:
        try:
            read()
        except ImproperlyConfigured as exc:
            errors.append(Error(str(exc), hint=HINT, id=check_id))
    return errors


@register("subscriptions")
def check_gateway_class(**_: Any) -> list[CheckMessage]:
    """The gateway is imported when a renewal first charges: a path that names nothing, or
    names something that cannot charge and answer for a key, would fail every renewal. So
    would the test gateway (the default) in a host that did not install its app."""
    try:
        payments.gateway_class()
    except payments.TestGatewayNotInstalled as exc:
        return [Error(str(exc), hint=TEST_GATEWAY_HINT, id="subscriptions.E008")]
    except payments.GatewayNotFound as exc:
        return [Error(str(exc), hint=HINT, id="subscriptions.E005")]
    except payments.NotAGateway as exc:
        return [Error(str(exc), hint=HINT, id="subscriptions.E006")]
    return []


@register("subscriptions", deploy=True)
def check_gateway(**_: Any) -> list[CheckMessage]:
    """The default gateway records charges and takes no money: renewals would "succeed" and
    orders be confirmed unpaid."""
    try:
        path = conf.gateway_path()
    except ImproperlyConfigured:
        return []  # subscriptions.E005 says so
    if path not in conf.TEST_GATEWAYS:
        return []
    return [
        Warning(
            f"SUBSCRIPTIONS_GATEWAY is the test gateway ({conf.DEFAULT_GATEWAY}), which records "
            "every charge without taking any money.",
            hint="Set SUBSCRIPTIONS_GATEWAY to your payment gateway; see docs/subscriptions.md.",
            id="subscriptions.W001",
        )
    ]
