"""The subscriptions app's knobs, read lazily from settings (never at import time).

``SUBSCRIPTIONS_MAX_RETRIES`` and ``SUBSCRIPTIONS_RETRY_DELAY`` (seconds) hold one value for
every action, or per-action values: a dict in settings, or ``"3"`` / ``"CreateChildOrder=5,
Expire=2"`` from the environment of the same name (``config/settings.py``). An action not named
takes the ``*`` entry, else the default below.

Every setting has a type and a range, stated once here (``RANGES``) and in docs/install.md's
settings table. A value outside it stops the process with the setting's name and the range
(``ImproperlyConfigured``), and ``manage.py check`` reports it before anything runs
(``subscriptions.checks``).
"""

from __future__ import annotations

import math
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from subscriptions.models import JobAction

DEFAULT_MAX_RETRIES = 3
DEFAULT_RETRY_DELAY = 600.0
DEFAULT_TIMEOUT = 120
#: The test gateway's app, and its class: the gateway when the setting names none.
TEST_GATEWAY_APP = "subscriptions.testgateway"
DEFAULT_GATEWAY = "subscriptions.testgateway.gateway.TestGateway"
#: Every path that names the test gateway: its own, and the one from before it was an app.
TEST_GATEWAYS = (DEFAULT_GATEWAY, "subscriptions.payments.TestGateway")
DEFAULT_BATCH_SIZE = 200
DEFAULT_CURRENCY_DECIMALS = 2

#: Each numeric setting's accepted range, both ends included.
RANGES: dict[str, tuple[int, int]] = {
    # More retries than this only repeat a charge the card has refused for weeks.
    "SUBSCRIPTIONS_MAX_RETRIES": (0, 100),
    # Up to 30 days between attempts; 0 retries in the batch's next run.
    "SUBSCRIPTIONS_RETRY_DELAY": (0, 30 * 86_400),
    # One run of a batch: a second to a day.
    "SUBSCRIPTIONS_TIMEOUT": (1, 86_400),
    # Subscriptions per block; the tests put every subscription in one block of a million.
    "SUBSCRIPTIONS_BATCH_SIZE": (1, 1_000_000),
    # Decimals of the currency amounts are shown in: 0 (yen) to 4; prices keep 5 stored.
    "SUBSCRIPTIONS_CURRENCY_DECIMALS": (0, 4),
}
#: The steps a renewal can be told to stop after (a test-only hook); "" stops nowhere.
#: The keys of a per-action setting: the actions, and ``*`` for the rest.
ACTION_KEYS = (*JobAction.values, "*")

_WHOLE = re.compile(r"[+-]?\d{1,18}")


def accepted(name: str) -> str:
    """What ``name`` accepts, in words, as errors and docs/install.md say it."""
    low, high = RANGES[name]
    kind = "seconds" if name == "SUBSCRIPTIONS_RETRY_DELAY" else "a whole number"
    text = f"{kind} from {low:,} to {high:,}"
    if name in ("SUBSCRIPTIONS_MAX_RETRIES", "SUBSCRIPTIONS_RETRY_DELAY"):
        text += (
            ", or Action=value pairs separated by commas (a dict in settings) for "
            f"{', '.join(ACTION_KEYS)}"
        )
    return text


def _refuse(name: str, raw: Any, *, why: str = "") -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{name}: {why or f'{raw!r} is not {accepted(name)}'}")


def _whole(name: str, raw: Any) -> int:
    """``raw`` as a whole number in ``name``'s range: an int, or text of one (from the
    environment); never a bool or a float."""
    low, high = RANGES[name]
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise _refuse(name, raw)
    text = str(raw).strip()
    if not _WHOLE.fullmatch(text) or not low <= int(text) <= high:
        raise _refuse(name, raw)
    return int(text)


def _seconds(name: str, raw: Any) -> float:
    """``raw`` as a finite number of seconds in ``name``'s range."""
    low, high = RANGES[name]
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise _refuse(name, raw)
    try:
        value = float(str(raw).strip()) if isinstance(raw, str) else float(raw)
    except ValueError:
        raise _refuse(name, raw) from None
    if not math.isfinite(value) or not low <= value <= high:
        raise _refuse(name, raw)
    return value


def _per_action(name: str, raw: Any) -> dict[str, Any]:
    """A per-action setting as {action or "*": raw value}; one value is {"*": it}."""
    if isinstance(raw, dict):
        values = dict(raw)
    elif isinstance(raw, str) and "=" in raw:
        values = {}
        for part in raw.split(","):
            action, sep, value = part.partition("=")
            if not sep or not action.strip() or not value.strip():
                raise _refuse(name, raw)
            values[action.strip()] = value.strip()
    elif raw is None or (isinstance(raw, str) and not raw.strip()):
        values = {}
    else:
        values = {"*": raw}
    for action in values:
        if action not in ACTION_KEYS:
            raise _refuse(
                name,
                raw,
                why=f"{action!r} is not an action; the keys are {', '.join(ACTION_KEYS)}",
            )
    return values


def _by_action(name: str, read: Any, default: Any) -> dict[str, Any]:
    """Every action's value of a per-action setting, each read and checked with ``read``."""
    setting = getattr(settings, name, None)
    pairs = isinstance(setting, dict) or (isinstance(setting, str) and "=" in setting)
    values = _per_action(name, setting)
    checked = {}
    for action, raw in values.items():
        try:
            checked[action] = read(name, raw)
        except ImproperlyConfigured:
            if not pairs:
                raise
            raise _refuse(name, raw, why=f"{action}: {raw!r} is not {accepted(name)}") from None
    fallback = checked.get("*", default)
    return {action: checked.get(action, fallback) for action in JobAction.values}


def max_retries_by_action() -> dict[str, int]:
    """Retries after the first attempt before a job fails (status 2), per action."""
    return _by_action("SUBSCRIPTIONS_MAX_RETRIES", _whole, DEFAULT_MAX_RETRIES)


def retry_delays_by_action() -> dict[str, float]:
    """Seconds between a failed attempt and its retry, per action."""
    return _by_action("SUBSCRIPTIONS_RETRY_DELAY", _seconds, DEFAULT_RETRY_DELAY)


def max_retries(action: str) -> int:
    """Retries after the first attempt before a job of ``action`` fails (status 2)."""
    return int(max_retries_by_action().get(action, DEFAULT_MAX_RETRIES))


def retry_delay(action: str) -> float:
    """Seconds between a failed attempt of ``action`` and its retry."""
    return float(retry_delays_by_action().get(action, DEFAULT_RETRY_DELAY))


def timeout() -> int:
    """Seconds one attempt of a subscription job may run before the engine stops it."""
    raw = getattr(settings, "SUBSCRIPTIONS_TIMEOUT", None)
    return _whole("SUBSCRIPTIONS_TIMEOUT", DEFAULT_TIMEOUT if raw is None else raw)


def batch_size() -> int:
    """Subscriptions per block: the most subscriptions whose jobs share one due batch.

    Larger batches spend fewer engine executions and statements per renewal; smaller ones
    spread a flood over more workers sooner and shorten the work one killed attempt redoes.
    """
    raw = getattr(settings, "SUBSCRIPTIONS_BATCH_SIZE", None)
    return _whole("SUBSCRIPTIONS_BATCH_SIZE", DEFAULT_BATCH_SIZE if raw is None else raw)


def currency_decimals() -> int:
    """Decimals an amount is shown with (``money.format_money``): the currency's minor unit."""
    raw = getattr(settings, "SUBSCRIPTIONS_CURRENCY_DECIMALS", None)
    return _whole(
        "SUBSCRIPTIONS_CURRENCY_DECIMALS", DEFAULT_CURRENCY_DECIMALS if raw is None else raw
    )


def gateway_path() -> str:
    """Dotted path of the payment gateway class (``payments.gateway_class`` imports it)."""
    raw = getattr(settings, "SUBSCRIPTIONS_GATEWAY", None)
    if raw is None or raw == "":
        return DEFAULT_GATEWAY
    if not isinstance(raw, str) or not raw.strip():
        raise ImproperlyConfigured(
            f"SUBSCRIPTIONS_GATEWAY: {raw!r} is not a dotted path to a gateway class, such as "
            f"{DEFAULT_GATEWAY}"
        )
    return raw.strip()
