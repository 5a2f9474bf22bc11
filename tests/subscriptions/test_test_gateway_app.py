"""The test gateway is an app of its own (``subscriptions.testgateway``): a host installs it
only where it wants it, a database that had its rows keeps them, and a host that names it
without installing it is told so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from subscriptions import checks, conf, payments
from subscriptions.testgateway.gateway import TestGateway
from subscriptions.testgateway.models import GatewayCharge, GatewayDecline, GatewayScript

pytestmark = pytest.mark.specification  # the migrations on every database

ROOT = Path(__file__).resolve().parents[2]

#: The last migration of subscriptions that held the test gateway's models.
BEFORE = ("subscriptions", "0009_mysql_partial_uniques")


def migrate_to(*targets: tuple[str, str | None]) -> Any:
    """Migrate to ``targets``; the project state there (its models)."""
    executor = MigrationExecutor(connection)
    executor.migrate(list(targets))
    return executor.loader.project_state(list(targets)).apps


def migrate_to_the_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    ContentType.objects.clear_cache()


@pytest.mark.django_db(transaction=True)
def test_a_database_from_before_the_move_keeps_its_scripts_declines_and_grants(
    django_user_model: Any,
) -> None:
    old = migrate_to(BEFORE)
    try:
        OldScript = old.get_model("subscriptions", "GatewayScript")
        OldDecline = old.get_model("subscriptions", "GatewayDecline")
        OldCharge = old.get_model("subscriptions", "GatewayCharge")
        OldScript.objects.create(customer="grace@example.com", declines_left=10)
        OldDecline.objects.create(
            idempotency_key="subscription:1:period:p0",
            customer="grace@example.com",
            amount=Decimal("29.40"),
            reason="test gateway: card of customer grace@example.com declined",
        )
        OldCharge.objects.create(
            reference="ch_before", idempotency_key="k0", customer="ada", amount=Decimal(5)
        )
        clerk = django_user_model.objects.create_user("clerk", is_staff=True)
        script_type = ContentType.objects.get(app_label="subscriptions", model="gatewayscript")
        clerk.user_permissions.add(
            Permission.objects.get(content_type=script_type, codename="change_gatewayscript")
        )
    finally:
        migrate_to_the_latest()

    (script,) = GatewayScript.objects.all()
    assert (script.customer, script.declines_left) == ("grace@example.com", 10)
    (decline,) = GatewayDecline.objects.all()
    assert decline.amount == Decimal("29.40")
    assert GatewayCharge.objects.get().reference == "ch_before"
    # The script is read as before: the customer's next charge is declined.
    with pytest.raises(payments.PaymentDeclined):
        TestGateway().charge(customer="grace@example.com", amount=Decimal(1), idempotency_key="k1")
    assert GatewayScript.objects.get().declines_left == 9
    clerk = django_user_model.objects.get(username="clerk")
    assert clerk.has_perm("subscriptions_testgateway.change_gatewayscript")


@pytest.mark.django_db(transaction=True)
def test_the_app_makes_the_tables_a_host_dropped_before_adding_it() -> None:
    # A host that never added the app, and dropped the tables it left.
    MigrationExecutor(connection).migrate([("subscriptions_testgateway", None)])
    try:
        with connection.schema_editor() as editor:
            for model in (GatewayCharge, GatewayDecline, GatewayScript):
                editor.delete_model(model)
        assert "subscriptions_gatewayscript" not in connection.introspection.table_names()
    finally:
        migrate_to_the_latest()
    assert {
        "subscriptions_gatewaycharge",
        "subscriptions_gatewaydecline",
        "subscriptions_gatewayscript",
    } <= set(connection.introspection.table_names())
    taken = TestGateway().charge(customer="ada", amount=Decimal(2), idempotency_key="k")
    assert GatewayCharge.objects.get().reference == taken.reference


@pytest.mark.parametrize("path", ["", conf.DEFAULT_GATEWAY, "subscriptions.payments.TestGateway"])
def test_every_name_of_the_test_gateway_is_its_class_and_warned_at_deploy_time(
    settings: Any, path: str
) -> None:
    settings.SUBSCRIPTIONS_GATEWAY = path
    assert payments.gateway_class() is TestGateway
    assert checks.check_gateway_class() == []
    assert [m.id for m in checks.check_gateway()] == ["subscriptions.W001"]


@pytest.mark.parametrize("path", ["", "subscriptions.payments.TestGateway"])
def test_naming_the_test_gateway_without_its_app_is_a_check_error(
    settings: Any, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    settings.SUBSCRIPTIONS_GATEWAY = path
    monkeypatch.setattr(payments, "has_test_gateway", lambda: False)
    (error,) = checks.check_gateway_class()
    assert error.id == "subscriptions.E008"
    assert "'subscriptions.testgateway' is not in INSTALLED_APPS" in error.msg
    assert conf.DEFAULT_GATEWAY in error.msg
    with pytest.raises(payments.TestGatewayNotInstalled):
        payments.gateway()


def test_a_host_without_the_app_has_no_test_gateway_pages_and_is_told_at_check(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings_without_test_gateway",
        # Settings and the admin's registry alone: a database of its own that is never made
        # (the MySQL backend's checks would connect to the configured one).
        "DATABASE_URL": f"sqlite:///{tmp_path}/host.sqlite3",
    }
    env.pop("SUBSCRIPTIONS_GATEWAY", None)
    listed = (
        "from django.contrib import admin; print(*(m._meta.label for m in admin.site._registry))"
    )

    def manage(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    checked = manage("check")
    assert checked.returncode == 1
    assert "(subscriptions.E008) SUBSCRIPTIONS_GATEWAY is the test gateway" in checked.stderr
    assert "Traceback" not in checked.stderr
    with_a_gateway = {"SUBSCRIPTIONS_GATEWAY": "tests.card_gateway.CardGateway"}
    assert manage("check", **with_a_gateway).returncode == 0
    pages = manage("shell", "-c", listed, **with_a_gateway)
    assert "subscriptions.Subscription" in pages.stdout.split()
    assert "Gateway" not in pages.stdout
    scripted = manage("subscriptions", "gateway", "script", "bob", "--decline", "1")
    assert scripted.returncode == 1
    assert "'subscriptions.testgateway' is not in INSTALLED_APPS" in scripted.stderr
