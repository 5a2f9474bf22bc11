"""Money reads with the currency's decimals, the same in the admin and on the command line.

Prices and amounts are stored with five decimals, and every one of them once read like
``9.90000``; the parent order of a new subscription read ``period=None``.
"""

from __future__ import annotations

from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from subscriptions import checks
from subscriptions.models import Order, Subscription
from subscriptions.money import format_money

ADD = ("subscriptions", "add", "--customer", "alice", "--item", "COFFEE", "--quantity", "2")
VALID = ("--price", "9.90", "--every", "P1M", "--start", "2030-01-31T09:00:00Z")


def call(*argv: str) -> str:
    out = StringIO()
    call_command(*argv, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("9.90000", "9.90"),
        ("19.80000", "19.80"),
        ("10", "10.00"),
        ("0.00000", "0.00"),
        ("0.00125", "0.00125"),  # digits past the currency's are kept, never rounded away
        ("100.12340", "100.1234"),
    ],
)
def test_an_amount_shows_the_currency_s_decimals_and_no_fewer_than_it_has(
    stored: str, shown: str
) -> None:
    assert format_money(Decimal(stored)) == shown


def test_a_currency_without_minor_units_shows_whole_amounts(settings: Any) -> None:
    settings.SUBSCRIPTIONS_CURRENCY_DECIMALS = 0
    assert format_money(Decimal("1200.00000")) == "1200"
    assert format_money(Decimal("12.50000")) == "12.5"


@pytest.mark.parametrize("value", [-1, 5, "two", 2.5])
def test_decimals_out_of_range_are_refused_by_the_system_checks(settings: Any, value: Any) -> None:
    settings.SUBSCRIPTIONS_CURRENCY_DECIMALS = value
    [error] = [e for e in checks.check_settings() if e.id == "subscriptions.E007"]
    assert error.msg == (
        f"SUBSCRIPTIONS_CURRENCY_DECIMALS: {value!r} is not a whole number from 0 to 4"
    )


@pytest.mark.django_db
def test_add_prints_prices_with_two_decimals_and_no_period_for_the_parent_order() -> None:
    text = call(*ADD, *VALID)
    assert "  item 2 x COFFEE at 9.90\n" in text
    assert "None" not in text and "9.90000" not in text
    subscription = Subscription.objects.get()
    parent = Order.objects.get(subscription=subscription, parent__isnull=True)
    assert parent.period_number is None
    assert f"  order {parent.pk} parent 19.80 placed\n" in text


@pytest.mark.django_db
def test_the_admin_lists_amounts_with_the_currency_s_decimals(admin_client: Client) -> None:
    call(*ADD, *VALID)
    page = admin_client.get("/admin/subscriptions/order/").content.decode()
    assert "19.80" in page and "19.80000" not in page
