"""Deploy checks (``manage.py check --deploy``): what production subscriptions must not keep
from their defaults.

| id | level | what |
| --- | --- | --- |
| subscriptions.W001 | warning | ``SUBSCRIPTIONS_GATEWAY`` is the test gateway |
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Warning, register

from subscriptions import conf


@register("subscriptions", deploy=True)
def check_gateway(**_: Any) -> list[CheckMessage]:
    """The default gateway records charges and takes no money: renewals would "succeed" and
    orders be confirmed unpaid."""
    if conf.gateway_path() != conf.DEFAULT_GATEWAY:
        return []
    return [
        Warning(
            f"SUBSCRIPTIONS_GATEWAY is the test gateway ({conf.DEFAULT_GATEWAY}), which records "
            "every charge without taking any money.",
            hint="Set SUBSCRIPTIONS_GATEWAY to your payment gateway; see docs/subscriptions.md.",
            id="subscriptions.W001",
        )
    ]
