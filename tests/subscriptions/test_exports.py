"""``subscriptions orders``: the orders listed newest first, or exported whole (``--jsonl``).

The listing shows at most ``--limit`` orders (100), newest first; the export every order of
the window (``--since`` included, ``--until`` not, on the time an order was placed), oldest
first by that time and id, one JSON object a line with the fields of ``--json`` and its lines,
a page at a time, with no cap; the filters combine; a bad instant is refused naming its option.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from scheduling.commandline import exports
from subscriptions.models import Order, OrderLine, OrderStatus, Subscription

pytestmark = [pytest.mark.django_db, pytest.mark.specification]

START = datetime(2026, 11, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def subscriptions(*args: str) -> str:
    out = StringIO()
    call_command("subscriptions", *args, stdout=out)
    return out.getvalue()


def exported(*args: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in subscriptions("orders", *args, "--jsonl").splitlines()]


def child_orders(subscription: Subscription, *days: int, status: str = "confirmed") -> list[int]:
    """Child orders of ``subscription`` placed ``days`` after START, one line each."""
    parent = Order.objects.get(subscription=subscription, parent=None)
    made = []
    for day in days:
        order = Order.objects.create(
            subscription=subscription,
            parent=parent,
            period_number=day + 2,
            period_start=START + day * DAY,
            period_end=START + (day + 1) * DAY,
            amount=Decimal("19.80"),
            status=status,
            created_at=START + day * DAY,
        )
        OrderLine.objects.create(order=order, sku="COFFEE", quantity=2, unit_price=Decimal("9.90"))
        made.append(order.pk)
    return made


@pytest.fixture
def two_customers(make_subscription: Callable[..., Subscription]) -> dict[str, Any]:
    """Alice's orders every day of November and a pending one; Bob's on three days.
    Both parent orders were placed before November."""
    alice = make_subscription(customer="alice", now=START - DAY, start=START - DAY)
    bob = make_subscription(customer="bob", now=START - DAY, start=START - DAY)
    return {
        "alice": alice,
        "bob": bob,
        "alice_orders": child_orders(alice, *range(30)),
        "alice_pending": child_orders(alice, 30, status=OrderStatus.PENDING),
        "bob_orders": child_orders(bob, 0, 10, 29),
    }


def test_orders_export_every_order_oldest_first_a_page_at_a_time(
    two_customers: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exports, "PAGE_SIZE", 4)
    rows = exported()
    assert len(rows) == 2 + 30 + 1 + 3  # two parents, then every child
    assert [(r["created_at"], r["id"]) for r in rows] == sorted(
        (r["created_at"], r["id"]) for r in rows
    )
    assert rows[-1]["status"] == "pending"
    assert rows[-1]["lines"] == [{"sku": "COFFEE", "quantity": 2, "unit_price": "9.90000"}]


def test_the_listing_and_the_export_give_the_same_objects(two_customers: dict[str, Any]) -> None:
    listed = json.loads(subscriptions("orders", "--json"))
    assert len(listed) == 36
    assert exported() == list(reversed(listed))
    assert len(json.loads(subscriptions("orders", "--json", "--limit", "5"))) == 5
    text = subscriptions("orders", "--limit", "2").splitlines()
    assert text[0].split() == [
        "ID", "SUBSCRIPTION", "KIND", "PERIOD", "FROM", "AMOUNT", "STATUS", "PLACED",
    ]
    assert "pending" in text[1]


def test_a_month_of_orders_is_november_in_the_projects_zone(
    two_customers: dict[str, Any], settings: Any
) -> None:
    settings.TIME_ZONE = "UTC"
    november = exported("--since", "2026-11-01", "--until", "2026-12-01")
    assert {r["id"] for r in november} == set(
        two_customers["alice_orders"] + two_customers["bob_orders"]
    )
    december = exported("--since", "2026-12-01")
    assert [r["id"] for r in december] == two_customers["alice_pending"]


def test_the_window_combines_with_subscription_status_and_limit(
    two_customers: dict[str, Any],
) -> None:
    bob = str(two_customers["bob"].pk)
    window = ("--since", (START + 10 * DAY).isoformat(), "--until", (START + 29 * DAY).isoformat())
    assert [r["id"] for r in exported(*window, "--subscription", bob)] == [
        two_customers["bob_orders"][1]
    ]
    alice = str(two_customers["alice"].pk)
    assert [r["id"] for r in exported(*window, "--limit", "3", "--subscription", alice)] == (
        two_customers["alice_orders"][10:13]
    )
    assert [r["id"] for r in exported("--status", "pending")] == two_customers["alice_pending"]
    listed = json.loads(subscriptions("orders", *window, "--subscription", bob, "--json"))
    assert [r["id"] for r in listed] == [two_customers["bob_orders"][1]]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--since", "soon"), "since (--since): 'soon' is not an ISO-8601 date-time"),
        (("--until", "2026-13-01"), "until (--until): '2026-13-01' is not a date in the calendar"),
        (
            ("--since", "2026-12-01T00:00Z", "--until", "2026-12-01T00:00Z"),
            "until (--until): 2026-12-01T00:00:00+00:00 is not after --since",
        ),
        (("--jsonl", "--json"), "--jsonl: not allowed with --json"),
        (("--status", "lost"), "--status: invalid choice: 'lost'"),
    ],
)
def test_bad_options_are_refused_naming_the_option(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError) as caught:
        subscriptions("orders", *args)
    assert str(caught.value).startswith(message)
