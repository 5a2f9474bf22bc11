"""``manage.py check --deploy`` warns while renewals would charge through the test gateway,
which takes no money (the default)."""

from __future__ import annotations

from typing import Any

from django.core.checks import run_checks

from subscriptions import checks


def test_the_test_gateway_is_warned_at_deploy_time(settings: Any) -> None:
    settings.SUBSCRIPTIONS_GATEWAY = ""
    assert [m.id for m in checks.check_gateway()] == ["subscriptions.W001"]
    assert "subscriptions.W001" not in {m.id for m in run_checks()}
    assert "subscriptions.W001" in {m.id for m in run_checks(include_deployment_checks=True)}


def test_a_real_gateway_passes(settings: Any) -> None:
    settings.SUBSCRIPTIONS_GATEWAY = "billing.gateways.StripeGateway"
    assert checks.check_gateway() == []
