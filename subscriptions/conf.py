"""The subscriptions app's knobs, read lazily from settings (never at import time).

``SUBSCRIPTIONS_MAX_RETRIES`` and ``SUBSCRIPTIONS_RETRY_DELAY`` (seconds) hold one value for
every action, or per-action values: a dict in settings, or ``"3"`` / ``"CreateChildOrder=5,
Expire=2"`` from the environment of the same name (``config/settings.py``). An action not named
takes the ``*`` entry, else the default below. Malformed values stop the process with the
setting's name, as every other setting does.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

DEFAULT_MAX_RETRIES = 3
DEFAULT_RETRY_DELAY = 600.0
DEFAULT_TIMEOUT = 120
DEFAULT_GATEWAY = "subscriptions.payments.TestGateway"
DEFAULT_BATCH_SIZE = 200


def _per_action(name: str, raw: Any) -> dict[str, str]:
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    text = str(raw).strip()
    if not text:
        return {}
    if "=" not in text:
        return {"*": text}
    values: dict[str, str] = {}
    for part in text.split(","):
        action, sep, value = part.partition("=")
        if not sep or not action.strip() or not value.strip():
            raise ImproperlyConfigured(
                f"{name}: expected a number or Action=number pairs separated by commas, got {raw!r}"
            )
        values[action.strip()] = value.strip()
    return values


def _number(name: str, action: str, kind: type, default: Any) -> Any:
    values = _per_action(name, getattr(settings, name, ""))
    raw = values.get(action, values.get("*"))
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: {raw!r} is not a {kind.__name__}") from None
    if value < 0:
        raise ImproperlyConfigured(f"{name}: {raw!r} is negative")
    return value


def max_retries(action: str) -> int:
    """Retries after the first attempt before a job of ``action`` fails (status 2)."""
    return int(_number("SUBSCRIPTIONS_MAX_RETRIES", action, int, DEFAULT_MAX_RETRIES))


def retry_delay(action: str) -> float:
    """Seconds between a failed attempt of ``action`` and its retry."""
    return float(_number("SUBSCRIPTIONS_RETRY_DELAY", action, float, DEFAULT_RETRY_DELAY))


def timeout() -> int:
    """Seconds one attempt of a subscription job may run before the engine stops it."""
    raw = getattr(settings, "SUBSCRIPTIONS_TIMEOUT", DEFAULT_TIMEOUT)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ImproperlyConfigured(f"SUBSCRIPTIONS_TIMEOUT: {raw!r} is not an int") from None
    if value <= 0:
        raise ImproperlyConfigured(f"SUBSCRIPTIONS_TIMEOUT: {raw!r} is not positive")
    return value


def batch_size() -> int:
    """Subscriptions per block: the most subscriptions whose jobs share one due batch.

    Larger batches spend fewer engine executions and statements per renewal; smaller ones
    spread a flood over more workers sooner and shorten the work one killed attempt redoes.
    """
    raw = getattr(settings, "SUBSCRIPTIONS_BATCH_SIZE", DEFAULT_BATCH_SIZE)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ImproperlyConfigured(f"SUBSCRIPTIONS_BATCH_SIZE: {raw!r} is not an int") from None
    if value <= 0:
        raise ImproperlyConfigured(f"SUBSCRIPTIONS_BATCH_SIZE: {raw!r} is not positive")
    return value


def gateway_path() -> str:
    """Dotted path of the payment gateway class."""
    return str(getattr(settings, "SUBSCRIPTIONS_GATEWAY", "") or DEFAULT_GATEWAY)


def pause_after_step() -> str:
    """Test-only hook: the step after which a run stops and waits to be killed ("" = never)."""
    return str(getattr(settings, "SUBSCRIPTIONS_PAUSE_AFTER_STEP", "") or "")
