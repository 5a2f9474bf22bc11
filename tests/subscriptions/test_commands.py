"""``manage.py subscriptions`` as a specification: output, ``--json``, one-line errors.

Bad input is refused with one line naming the field and the option, and nothing is saved.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from scheduling.models import Job
from subscriptions.models import (
    Order,
    Subscription,
    SubscriptionItem,
    SubscriptionJob,
)
from subscriptions.testgateway.models import GatewayCharge, GatewayScript
from tests.conftest import ROOT, database_url
from tests.subscriptions.conftest import pending_job, run_inline

pytestmark = pytest.mark.django_db

ADD = ("subscriptions", "add", "--customer", "alice", "--item", "COFFEE", "--quantity", "2")
VALID = ("--price", "9.90", "--every", "P1M", "--start", "2030-01-31T09:00:00Z")


def call(*argv: str) -> str:
    out = StringIO()
    call_command(*argv, stdout=out, stderr=StringIO())
    return out.getvalue()


def call_json(*argv: str) -> Any:
    out = call(*argv, "--json")
    assert out.count("\n") == 1, out  # one JSON value
    return json.loads(out)


def counts() -> tuple[int, ...]:
    return tuple(
        m.objects.count()
        for m in (Subscription, SubscriptionItem, Order, SubscriptionJob, Job, GatewayScript)
    )


def refused(*argv: str) -> str:
    before = counts()
    with pytest.raises(CommandError) as caught:
        call(*argv)
    assert counts() == before, "nothing is saved"
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_add_prints_the_new_subscription_with_its_id_and_first_job() -> None:
    data = call_json(*ADD, *VALID, "--end", "2031-01-31T09:00:00Z")
    subscription = Subscription.objects.get(pk=data["id"])
    assert (data["customer"], data["status"], data["interval"]) == ("alice", "active", "P1M")
    assert data["items"] == [{"sku": "COFFEE", "quantity": 2, "unit_price": "9.90000"}]
    (job,) = data["jobs"]
    assert job["action"] == "CreateChildOrder" and job["status"] == 0
    assert job["action_date"] == "2030-01-31T09:00:00+00:00"
    assert subscription.ends_at.isoformat() == "2031-01-31T09:00:00+00:00"
    assert "of alice: active, every P1M from 2030-01-31 09:00:00 UTC" in call(*ADD, *VALID)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("--every", "PT0S"), "interval (--every): 'PT0S' is zero"),
        (("--every", "-P1M"), "interval (--every): '-P1M' is not an ISO-8601 duration"),
        (("--quantity", "-1"), "quantity (--quantity): -1 is not a positive number"),
        (("--quantity", "0"), "quantity (--quantity): 0 is not a positive number"),
        (("--quantity", "two"), "quantity (--quantity): 'two' is not a whole number"),
        (("--price", "-0.01"), "unit_price (--price): -0.01 is negative"),
        (("--price", "abc"), "price (--price): 'abc' is not a decimal number"),
        (("--start", "2030-01-31T09:00"), "start: '2030-01-31T09:00' has no offset"),
        (("--end", "2030-01-01T00:00Z"), "ends_at (--end): 2030-01-01T00:00:00+00:00 is not after"),
        (
            ("--end", "2030-01-31T09:00:00Z"),
            "ends_at (--end): 2030-01-31T09:00:00+00:00 is not after",
        ),
        (("--customer", " "), "customer (--customer): This field cannot be blank."),
        (
            ("--every", "P99999999D"),
            "interval (--every): 'P99999999D' ends the first period after the year 9999",
        ),
        (("--quantity", "1000001"), "quantity (--quantity): 1000001 is more than 1,000,000"),
        (("--quantity", "99999999999"), "quantity (--quantity): 99999999999 is more than"),
    ],
)
def test_bad_input_is_refused_naming_the_field(change: tuple[str, str], expected: str) -> None:
    options = dict(zip(VALID[::2], VALID[1::2], strict=True))
    argv = list(ADD)
    if change[0] in ("--quantity", "--customer"):
        argv[argv.index(change[0]) + 1] = change[1]
    else:
        options[change[0]] = change[1]
    flat = [f"{option}={value}" for option, value in options.items()]
    assert expected in refused(*argv, *flat)


def test_every_bad_field_is_named_at_once() -> None:
    message = refused(
        "subscriptions", "add", "--customer", "bob", "--item", "X", "--quantity", "-1",
        "--price", "-2", "--every", "PT0S", "--start", "2030-01-01T00:00Z",
    )  # fmt: skip
    for field in ("interval (--every)", "quantity (--quantity)", "unit_price (--price)"):
        assert field in message


def test_unknown_subscriptions_are_refused_everywhere() -> None:
    for argv in (
        ("subscriptions", "show", "404"),
        ("subscriptions", "cancel", "404"),
        ("subscriptions", "jobs", "--subscription", "404"),
        ("subscriptions", "charges", "--subscription", "404"),
        ("subscriptions", "cancel", "x"),
    ):
        assert "subscription: no subscription with id" in refused(*argv)


def test_show_has_status_orders_jobs_with_the_seed_fields_and_charges(
    make_subscription, now
) -> None:
    subscription = make_subscription()
    run_inline(pending_job(subscription), at=now)
    data = call_json("subscriptions", "show", str(subscription.pk))
    assert data["status"] == "active"
    assert [o["kind"] for o in data["orders"]] == ["parent", "child"]
    assert data["orders"][1]["status"] == "confirmed"
    done, following = data["jobs"]
    assert set(done) >= {
        "scheduled_id", "action_date", "subscription_id", "action", "time_placed",
        "last_update", "status", "parameter", "field1", "field2", "field3", "retry_count",
        "opt_counter",
    }  # fmt: skip
    assert (done["status"], done["status_name"], done["parameter"]) == (3, "completed", "confirm")
    assert (following["status"], following["field1"]) == (0, 1)
    (charge,) = data["charges"]
    assert charge["reference"] == done["field3"] == data["orders"][1]["charge_reference"]


def test_list_jobs_and_charges_filter(make_subscription, now) -> None:
    first = make_subscription()
    second = make_subscription(customer="bob", start=now + timedelta(hours=1))
    run_inline(pending_job(first), at=now)
    assert [s["id"] for s in call_json("subscriptions", "list")] == [first.pk, second.pk]
    jobs = call_json("subscriptions", "jobs", "--subscription", str(first.pk))
    assert [j["status"] for j in jobs] == [3, 0]
    active = call_json("subscriptions", "jobs", "--status", "0")
    assert {j["subscription_id"] for j in active} == {first.pk, second.pk}
    assert "status (--status): 9 is not one of 0 (active)" in refused(
        "subscriptions", "jobs", "--status", "9"
    )
    assert len(call_json("subscriptions", "charges")) == 1
    assert call_json("subscriptions", "charges", "--subscription", str(second.pk)) == []


def test_cancel_now_and_at_period_end(make_subscription, now) -> None:
    paid, unpaid = make_subscription(), make_subscription(customer="bob")
    run_inline(pending_job(paid), at=now)
    assert call_json("subscriptions", "cancel", str(paid.pk), "--at-period-end")["status"] == (
        "pending_cancel"
    )
    assert call("subscriptions", "cancel", str(unpaid.pk)).strip() == (
        f"subscription {unpaid.pk}: cancelled"
    )
    assert "is already cancelled" in refused("subscriptions", "cancel", str(unpaid.pk))


def test_gateway_script_declines_or_errors_for_one_customer() -> None:
    data = call_json("subscriptions", "gateway", "script", "carol", "--decline", "2")
    assert data == {"customer": "carol", "declines_left": 2, "errors_left": 0}
    assert "fail the next 3 calls" in call(
        "subscriptions", "gateway", "script", "carol", "--error", "3"
    )
    assert "decline (--decline): -1 is negative" in refused(
        "subscriptions", "gateway", "script", "carol", "--decline", "-1"
    )
    assert not GatewayCharge.objects.exists()


def test_a_shell_sees_one_error_line_and_a_failing_exit_code() -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", *ADD, "--price", "-1", "--every", "P1M"],
        cwd=ROOT,
        env={**__import__("os").environ, "DATABASE_URL": database_url()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == "CommandError: unit_price (--price): -1 is negative"
    assert "Traceback" not in result.stderr


def test_the_largest_quantity_is_taken() -> None:
    argv = list(ADD)
    argv[argv.index("--quantity") + 1] = "1000000"
    assert call_json(*argv, *VALID)["items"][0]["quantity"] == 1_000_000


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("subscriptions", "add", "--customer", "c"), "--item, --quantity, --price, --every: are"),
        (("subscriptions", "renew"), "ACTION: invalid choice: 'renew'"),
        (("subscriptions", "cancel"), "id: is required"),
        (("subscriptions", "gateway", "script", "c"), "--decline: one of --decline, --error is"),
        (("subscriptions", "add", *ADD[2:], "--price"), "--price: expected a value"),
    ],
)
def test_options_that_cannot_be_read_are_one_line_naming_the_option(
    argv: tuple[str, ...], expected: str
) -> None:
    assert refused(*argv).startswith(expected)


def test_a_shell_sees_option_errors_as_one_line_without_the_usage() -> None:
    for argv, line in (
        (("subscriptions", "add", "--customer", "c"),
         "manage.py subscriptions add: error: --item, --quantity, --price, --every: are required"),
        (("subscriptions", "jobs", "--subscription"),
         "manage.py subscriptions jobs: error: --subscription: expected a value (for one that "
         "starts with '-', write --subscription=VALUE)"),
    ):  # fmt: skip
        result = subprocess.run(
            [sys.executable, "manage.py", *argv],
            cwd=ROOT,
            env={**__import__("os").environ, "DATABASE_URL": database_url()},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2, argv
        assert (result.stdout, result.stderr.strip()) == ("", line)


def test_help_names_every_action() -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "subscriptions", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    for action in ("add", "cancel", "show", "list", "jobs", "charges", "gateway"):
        assert action in result.stdout


@pytest.mark.parametrize(
    "window",
    [
        ("--start", "2030-01-31T09:00"),
        ("--start", "next monday"),
        ("--end", "2020-01-01T00:00Z"),
    ],
    ids=" ".join,
)
def test_start_and_end_are_refused_as_jobs_add_refuses_them(
    window: tuple[str, ...], admin_user: Any
) -> None:
    with pytest.raises(CommandError) as caught:
        call_command(
            "jobs", "add", "same", "--task", "scheduling.diagnostics.noop", "--every", "PT1H",
            *window, stdout=StringIO(),
        )
    message = refused(*ADD, "--price", "9.90", "--every", "P1M", *window)
    assert message == str(caught.value)
