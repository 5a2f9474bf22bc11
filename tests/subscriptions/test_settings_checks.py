"""Every ``SUBSCRIPTIONS_*`` setting is checked for type and range by ``manage.py check``: a
value out of range is one error, with its own id, naming the setting and the range it
accepts, before anything runs; and the app, reading the same value at run time, stops with
the same words. docs/install.md's settings table states each range.
"""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured

from subscriptions import conf, payments
from tests.conftest import ROOT


class ChargesOnly:
    """A gateway from before ``find_charge``: it cannot say what happened under a key."""

    def charge(self, *, customer: str, amount: Decimal, idempotency_key: str) -> Any:
        raise NotImplementedError


def ours() -> list[Any]:
    return [m for m in run_checks() if m.id and m.id.startswith("subscriptions.")]


@pytest.mark.parametrize(
    ("name", "value", "check_id", "said"),
    [
        ("MAX_RETRIES", "x", "E001", "'x' is not a whole number from 0 to 100, or Action=value"),
        ("MAX_RETRIES", -1, "E001", "-1 is not a whole number from 0 to 100"),
        ("MAX_RETRIES", 101, "E001", "101 is not a whole number from 0 to 100"),
        ("MAX_RETRIES", True, "E001", "True is not a whole number from 0 to 100"),
        ("MAX_RETRIES", 2.5, "E001", "2.5 is not a whole number from 0 to 100"),
        ("MAX_RETRIES", "CreateChildOrder=x", "E001", "CreateChildOrder: 'x' is not a whole"),
        ("MAX_RETRIES", "CreateChildOrder=", "E001", "'CreateChildOrder=' is not a whole"),
        ("MAX_RETRIES", "Renew=3", "E001", "'Renew' is not an action; the keys are"),
        ("MAX_RETRIES", {"Expire": 1000}, "E001", "Expire: 1000 is not a whole number"),
        ("RETRY_DELAY", "nan", "E002", "'nan' is not seconds from 0 to 2,592,000"),
        ("RETRY_DELAY", "inf", "E002", "'inf' is not seconds from 0 to 2,592,000"),
        ("RETRY_DELAY", -1, "E002", "-1 is not seconds from 0 to 2,592,000"),
        ("RETRY_DELAY", 2_592_001, "E002", "2592001 is not seconds from 0 to 2,592,000"),
        ("RETRY_DELAY", "*=1e300", "E002", "*: '1e300' is not seconds from 0 to 2,592,000"),
        ("TIMEOUT", 0, "E003", "0 is not a whole number from 1 to 86,400"),
        ("TIMEOUT", 86_401, "E003", "86401 is not a whole number from 1 to 86,400"),
        ("TIMEOUT", "two minutes", "E003", "'two minutes' is not a whole number from 1 to"),
        ("BATCH_SIZE", 0, "E004", "0 is not a whole number from 1 to 1,000,000"),
        ("BATCH_SIZE", 1_000_001, "E004", "1000001 is not a whole number from 1 to 1,000,000"),
        ("BATCH_SIZE", 2.5, "E004", "2.5 is not a whole number from 1 to 1,000,000"),
        ("GATEWAY", "nope.Gateway", "E005", "'nope.Gateway' cannot be imported"),
        ("GATEWAY", 5, "E005", "5 is not a dotted path to a gateway class"),
        ("GATEWAY", "subscriptions.models.Subscription", "E006", "no charge and no find_charge"),
        ("GATEWAY", f"{__name__}.ChargesOnly", "E006", "(it has no find_charge method)"),
        ("GATEWAY", "subscriptions.payments.gateway", "E006", "is not a gateway class (not a"),
    ],
)
def test_a_setting_out_of_range_is_one_error_naming_it_and_its_range(
    settings: Any, name: str, value: Any, check_id: str, said: str
) -> None:
    setattr(settings, f"SUBSCRIPTIONS_{name}", value)
    (error,) = ours()
    assert error.id == f"subscriptions.{check_id}"
    assert error.msg.startswith(f"SUBSCRIPTIONS_{name}: ")
    assert said in error.msg
    assert "docs/install.md" in error.hint


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MAX_RETRIES", "3"),
        ("MAX_RETRIES", 0),
        ("MAX_RETRIES", "CreateChildOrder=5,*=2"),
        ("MAX_RETRIES", {"Expire": 2, "*": 100}),
        ("RETRY_DELAY", "0"),
        ("RETRY_DELAY", 1.5),
        ("RETRY_DELAY", "Expire=2592000"),
        ("TIMEOUT", "30"),
        ("BATCH_SIZE", "1000000"),
        ("BATCH_SIZE", 1),
        ("GATEWAY", ""),
        ("GATEWAY", "subscriptions.payments.TestGateway"),
    ],
)
def test_values_in_range_pass(settings: Any, name: str, value: Any) -> None:
    setattr(settings, f"SUBSCRIPTIONS_{name}", value)
    assert ours() == []


def test_the_defaults_pass(settings: Any) -> None:
    for name in ("MAX_RETRIES", "RETRY_DELAY", "TIMEOUT", "BATCH_SIZE", "GATEWAY"):
        delattr(settings, f"SUBSCRIPTIONS_{name}")
    assert ours() == []
    assert (conf.max_retries("Expire"), conf.retry_delay("Cancel")) == (3, 600.0)
    assert (conf.timeout(), conf.batch_size()) == (120, 200)


def test_the_app_reading_a_value_out_of_range_stops_with_the_same_words(settings: Any) -> None:
    settings.SUBSCRIPTIONS_MAX_RETRIES = "CreateChildOrder=many"
    (error,) = ours()
    with pytest.raises(ImproperlyConfigured) as read:
        conf.max_retries("CreateChildOrder")
    assert str(read.value) == error.msg
    settings.SUBSCRIPTIONS_GATEWAY = "nope.Gateway"
    with pytest.raises(payments.GatewayNotFound, match=r"'nope\.Gateway' cannot be imported"):
        payments.gateway()


def test_manage_py_check_fails_on_a_gateway_that_cannot_be_imported() -> None:
    """As found: ``SUBSCRIPTIONS_GATEWAY="nope.Gateway"`` passed ``manage.py check``."""
    env = {**os.environ, "SUBSCRIPTIONS_GATEWAY": "nope.Gateway"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "(subscriptions.E005) SUBSCRIPTIONS_GATEWAY: 'nope.Gateway' cannot be imported" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr


def test_install_md_states_each_settings_range() -> None:
    guide = (ROOT / "docs" / "install.md").read_text()
    rows = {
        line.split("|")[1].strip(" `"): line
        for line in guide.splitlines()
        if line.startswith("| `SUBSCRIPTIONS_")
    }
    for name in conf.RANGES:
        low, high = conf.RANGES[name]
        assert f"{low:,} to {high:,}" in rows[name], name
    assert "SUBSCRIPTIONS_GATEWAY" in rows
