"""Hostile or careless input harms no one: every out-of-range number, date, size or encoding
typed into the subscriptions admin or ``manage.py subscriptions`` is refused, naming the field
and the reason, as a form error on the page or one line from the command. Nothing is saved,
no page answers 500, no command prints a traceback, and nothing stored can later break a
batch's run for the other subscriptions in it.

The rules live on the models and in the services (``Subscription.clean``,
``SubscriptionItem.clean``, ``pricing.check_items_fit``, ``periods.parse_interval``,
``validate_plain_text``), so the admin and the command refuse alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from subscriptions import services
from subscriptions.models import (
    MAX_ITEMS,
    MAX_PERIOD_NUMBER,
    Order,
    Subscription,
    SubscriptionItem,
    SubscriptionJob,
    SubscriptionJobStatus,
    SubscriptionStatus,
)
from subscriptions.testgateway.models import GatewayScript
from tests.conftest import ROOT, database_url
from tests.subscriptions.conftest import pending_job, run_inline

pytestmark = pytest.mark.django_db

ADD_PAGE = "admin:subscriptions_subscription_add"
ADD = ("subscriptions", "add", "--customer", "alice", "--item", "COFFEE", "--quantity", "2")
VALID = ("--price", "9.90", "--every", "P1M", "--start", "2030-01-31T09:00:00Z")


@pytest.fixture
def clerk(django_user_model: Any) -> Client:
    """A staff user who may do everything in the subscriptions app and its test gateway's,
    logged in."""
    user = django_user_model.objects.create_user("clerk", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label__in=("subscriptions", "subscriptions_testgateway")
        )
    )
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def add_form(**changes: str) -> dict[str, str]:
    form = {
        "customer": "dora",
        "interval": "P1M",
        "starts_at_0": "2030-01-31",
        "starts_at_1": "09:00:00",
        "items-TOTAL_FORMS": "1",
        "items-INITIAL_FORMS": "0",
        "items-MIN_NUM_FORMS": "1",
        "items-MAX_NUM_FORMS": "1000",
        "items-0-sku": "TEA",
        "items-0-quantity": "3",
        "items-0-unit_price": "2.50",
        "orders-TOTAL_FORMS": "0",
        "orders-INITIAL_FORMS": "0",
        "jobs-TOTAL_FORMS": "0",
        "jobs-INITIAL_FORMS": "0",
        "skipped-TOTAL_FORMS": "0",
        "skipped-INITIAL_FORMS": "0",
    }
    form.update(changes)
    return form


def second_item(sku: str, quantity: str, price: str) -> dict[str, str]:
    return {
        "items-TOTAL_FORMS": "2",
        "items-1-sku": sku,
        "items-1-quantity": quantity,
        "items-1-unit_price": price,
    }


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"items-0-quantity": "99999999999999999999"}, "is more than 1,000,000 items"),
        ({"items-0-quantity": "-5"}, "-5 is not a positive number of items"),
        ({"items-0-unit_price": "1e30"}, "no more than 20 digits"),
        ({"items-0-unit_price": "-0.01"}, "-0.01 is negative"),
        ({"items-0-unit_price": "NaN"}, "Enter a number."),
        (
            {"items-0-quantity": "1000000", "items-0-unit_price": "999999999999999"},
            "one period costs at most 1,000,000,000",
        ),
        (
            {
                "items-0-quantity": "1000000",
                "items-0-unit_price": "999",
                **second_item("B", "1000000", "999"),
            },
            "the items come to 1998000000 a period; one period costs at most",
        ),
        ({"interval": "P9999999999D"}, "&#x27;P9999999999D&#x27; ends the first period after"),
        (
            {"interval": "PT99999999999999999999S"},
            "&#x27;PT99999999999999999999S&#x27; ends the first period after the year 9999",
        ),
        ({"interval": "PT0.000001S"}, "is shorter than a second; a period lasts at least PT1S"),
        (
            {"starts_at_0": "9999-12-31", "starts_at_1": "23:59:59"},
            "leaves no whole period of P1M before the year 9999 ends",
        ),
        (
            {"starts_at_0": "0001-01-01", "starts_at_1": "00:00:00", "interval": "PT1S"},
            "periods of PT1S back; a subscription has at most 2,000,000,000 periods",
        ),
        ({"starts_at_0": "10000-01-01"}, "Enter a valid date."),
        ({"customer": "x" * 101}, "Ensure this value has at most 100 characters"),
        ({"customer": "al\x00ice"}, "Null characters are not allowed."),
        ({"customer": "al\x07ice"}, "holds the control character U+0007 at position 3"),
        ({"customer": "\u202eecila"}, "holds the control character U+202E at position 1"),
        ({"items-0-sku": "TEA\x1b[31m"}, "holds the control character U+001B at position 4"),
        ({"items-0-sku": "TEA\nCOFFEE"}, "holds the control character U+000A at position 4"),
    ],
)
def test_the_add_page_refuses_each_out_of_range_value_on_the_form(
    clerk: Client, changes: dict[str, str], expected: str
) -> None:
    response = clerk.post(reverse(ADD_PAGE), add_form(**changes))
    assert response.status_code == 200, response.content.decode()[:2000]
    page = response.content.decode()
    assert expected in page or escape(expected) in page
    assert not Subscription.objects.exists() and not Order.objects.exists()


def test_items_added_to_a_live_subscription_are_bounded_on_the_page(
    clerk: Client, make_subscription: Any
) -> None:
    subscription = make_subscription()
    (item,) = subscription.items.all()
    form = {
        "items-TOTAL_FORMS": "2",
        "items-INITIAL_FORMS": "1",
        "items-MIN_NUM_FORMS": "1",
        "items-MAX_NUM_FORMS": "1000",
        "items-0-id": str(item.pk),
        "items-0-subscription": str(subscription.pk),
        "items-1-sku": "GOLD",
        "items-1-quantity": "1000000",
        "items-1-unit_price": "1000",
        "orders-TOTAL_FORMS": "0",
        "orders-INITIAL_FORMS": "0",
        "jobs-TOTAL_FORMS": "0",
        "jobs-INITIAL_FORMS": "0",
        "skipped-TOTAL_FORMS": "0",
        "skipped-INITIAL_FORMS": "0",
    }
    url = reverse("admin:subscriptions_subscription_change", args=[subscription.pk])
    response = clerk.post(url, form)
    assert response.status_code == 200
    assert "one period costs at most 1,000,000,000" in response.content.decode()
    assert subscription.items.count() == 1


def test_a_subscription_has_at_most_a_hundred_items(make_subscription: Any, now: Any) -> None:
    subscription = make_subscription()
    SubscriptionItem.objects.bulk_create(
        SubscriptionItem(subscription=subscription, sku=f"S{n}", quantity=1, unit_price=1)
        for n in range(MAX_ITEMS - 1)
    )
    one_more = SubscriptionItem(subscription=subscription, sku="X", quantity=1, unit_price=1)
    with pytest.raises(ValidationError, match="101 items; a subscription has at most 100"):
        services.add_item(item=one_more, now=now)
    assert subscription.items.count() == MAX_ITEMS


# --- the command ------------------------------------------------------------------------------


def call(*argv: str) -> str:
    out = StringIO()
    call_command(*argv, stdout=out, stderr=StringIO())
    return out.getvalue()


def refused(*argv: str) -> str:
    before = (Subscription.objects.count(), GatewayScript.objects.count())
    with pytest.raises(CommandError) as caught:
        call(*argv)
    assert (Subscription.objects.count(), GatewayScript.objects.count()) == before
    message = str(caught.value)
    assert "\n" not in message and "\x00" not in message
    return message


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--price", "999999999999999", "unit_price (--price): 2 x 999999999999999 comes to"),
        ("--price", "1e-30", "unit_price (--price): Ensure that there are no more than 20 digits"),
        ("--every", "P9999999999D", "interval (--every): 'P9999999999D' ends the first period"),
        (
            "--every",
            "PT99999999999999999999S",
            "interval (--every): 'PT99999999999999999999S' ends the first period after the year",
        ),
        ("--every", "P" + "9" * 5000 + "D", "interval (--every): is 5002 characters long; an"),
        ("--every", "PT0.000001S", "interval (--every): 'PT0.000001S' is shorter than a second"),
        (
            "--start",
            "9999-12-31T23:59:59Z",
            "starts_at (--start): 9999-12-31T23:59:59+00:00 leaves no whole period of P1M",
        ),
        (
            "--start",
            "9999-12-31T23:59:59-01:00",
            "start: '9999-12-31T23:59:59-01:00' falls outside the years 1 to 9999",
        ),
        (
            "--end",
            "0001-01-01T00:00:00+01:00",
            "end: '0001-01-01T00:00:00+01:00' falls outside the years 1 to 9999",
        ),
        ("--customer", "a\x00b", "customer (--customer): holds the control character U+0000 at"),
        ("--customer", "a\udcffb", "customer (--customer): holds the control character U+DCFF at"),
        ("--customer", "a\tb", "customer (--customer): holds the control character U+0009 at"),
        ("--item", "a\x00b", "sku (--item): holds the control character U+0000 at position 2"),
        ("--item", "\u2066a", "sku (--item): holds the control character U+2066 at position 1"),
    ],
)
def test_add_refuses_each_out_of_range_value_in_one_line(
    option: str, value: str, expected: str
) -> None:
    argv = [*ADD, *VALID]
    if option in argv:
        argv[argv.index(option) + 1] = value
    else:
        argv.append(f"{option}={value}")
    assert refused(*argv).startswith(expected)


def test_a_start_so_far_back_that_the_period_numbers_overflow_is_refused() -> None:
    argv = [*ADD, *VALID]
    argv[argv.index("--every") + 1] = "PT1S"
    argv[argv.index("--start") + 1] = "0001-01-01T00:00:00Z"
    message = refused(*argv)
    assert message.startswith("starts_at (--start): 0001-01-01T00:00:00+00:00 lies ")
    assert "periods of PT1S back; a subscription has at most 2,000,000,000 periods" in message


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("--decline", "99999999999"), "decline (--decline): 99999999999 is more than 10,000"),
        (("--error", "-1"), "error (--error): -1 is negative"),
    ],
)
def test_gateway_script_counts_are_bounded(argv: tuple[str, str], expected: str) -> None:
    assert refused("subscriptions", "gateway", "script", "carol", *argv).startswith(expected)


@pytest.mark.parametrize(
    ("customer", "expected"),
    [
        ("a\x00", "holds the control character U+0000 at position 2"),
        ("a\udcff", "holds the control character U+DCFF at position 2"),
        ("a\x07", "holds the control character U+0007 at position 2"),
        ("x" * 1000, "Ensure this value has at most 100 characters (it has 1000)."),
    ],
)
def test_gateway_script_customers_are_plain_names(customer: str, expected: str) -> None:
    message = refused("subscriptions", "gateway", "script", customer, "--decline", "1")
    assert message.startswith(f"customer (--customer): {expected}")


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("99999999999999999999", "99999999999999999999"),
        ("\x00", "'\\x00'"),
        ("1\n2", "'1\\n2'"),
    ],
)
def test_an_id_that_names_no_subscription_is_shown_on_one_line(raw: str, shown: str) -> None:
    for action in ("show", "cancel"):
        message = refused("subscriptions", action, raw)
        assert message == f"subscription: no subscription with id {shown}"


def test_a_shell_that_passes_bytes_that_are_not_utf8_sees_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", *ADD[:2], "--customer", b"caf\xe9", *ADD[4:], *VALID],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "CommandError: customer (--customer): holds the control character U+DCE9 at position 4;"
        " names and notes are one line of plain text"
    )


# --- what is stored stays harmless --------------------------------------------------------------


def test_a_date_drill_down_out_of_range_shows_the_list_unfiltered(clerk: Client) -> None:
    url = reverse("admin:subscriptions_duebatch_changelist")
    for params in (
        {"due_at__year": "99999999999999999999"},
        {"due_at__year": "2030", "due_at__month": "99999999999999999999"},
    ):
        response = clerk.get(url, params)
        assert response.status_code == 302 and response.url.endswith("?e=1")


@pytest.mark.parametrize(
    ("name", "action"),
    [
        ("subscription", "cancel_now"),
        ("subscriptionjob", "retry_now"),
        ("testgateway_gatewayscript", "delete_selected"),
    ],
)
def test_a_list_action_on_a_selection_that_is_not_ids_changes_nothing(
    clerk: Client, make_subscription: Any, name: str, action: str
) -> None:
    subscription = make_subscription()
    GatewayScript.objects.create(customer="alice", declines_left=1)
    url = reverse(f"admin:subscriptions_{name}_changelist")
    response = clerk.post(
        url, {"action": action, "_selected_action": [str(subscription.pk), "1.5", "abc"]}
    )
    assert response.status_code == 302
    shown = clerk.get(response.url).content.decode()
    assert "The selection holds values that are not ids; nothing was done." in shown
    assert Subscription.objects.get(pk=subscription.pk).status == SubscriptionStatus.ACTIVE
    assert GatewayScript.objects.count() == 1


def test_a_renewal_past_the_last_period_number_fails_alone(
    make_subscription: Any, now: Any, settings: Any
) -> None:
    settings.SUBSCRIPTIONS_MAX_RETRIES = "0"
    fine, last = make_subscription(customer="fine"), make_subscription(customer="last")
    pending_job(last).change(now=now, custom_integer=MAX_PERIOD_NUMBER)
    assert run_inline(pending_job(fine), at=now) == {"renewed": 1, "failed": 1}
    last.refresh_from_db()
    assert last.status == SubscriptionStatus.NEEDS_ATTENTION
    assert "2000000001 is past the last one, 2,000,000,000" in last.attention_reason


def test_an_error_is_kept_as_one_bounded_line(make_subscription: Any, now: Any) -> None:
    subscription = make_subscription()
    job = pending_job(subscription)
    noisy = RuntimeError("the gateway said:\n\x1b[31mno\x1b[0m\t" + "x" * 5000)
    assert services.record_failure(job.pk, noisy, now=now) == "retry"
    job.refresh_from_db()
    subscription.refresh_from_db()
    assert job.status == SubscriptionJobStatus.RETRY
    assert job.last_error.startswith("RuntimeError: the gateway said: [31mno [0m xxx")
    assert len(job.last_error) == 1000 and job.last_error.endswith("…")
    for text in (job.last_error, subscription.attention_reason):
        assert not any(ord(c) < 32 for c in text)


def test_existing_rows_are_untouched_by_a_refused_item(make_subscription: Any, now: Any) -> None:
    subscription = make_subscription()
    big = SubscriptionItem(
        subscription=subscription, sku="GOLD", quantity=1, unit_price=Decimal("999999999.99")
    )
    with pytest.raises(ValidationError, match="one period costs at most 1,000,000,000"):
        services.add_item(item=big, now=now)
    assert [i.sku for i in subscription.items.all()] == ["COFFEE"]
    assert SubscriptionJob.objects.filter(subscription=subscription).count() == 1
