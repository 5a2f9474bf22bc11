"""Ledgers are append-only from the admin for everyone, and money never follows a form.

Orders and the gateway's charges (and the test gateway's declines) are read by every user who
may view them and written by nobody: no add, change or delete page answers, GET or POST, and
no delete action is offered, for a staff user with every permission and for a superuser
alike. A subscription is never deleted (its orders would go with it). A renewal's step, period
and charge reference are not editable by anyone: a renewal's page is a view; only a Cancel's
or an Expire's own number and note are an operator's to edit (``models.OPERATOR_FIELDS``).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from subscriptions import payments, services
from subscriptions.models import (
    JobStep,
    Order,
    Subscription,
    SubscriptionJob,
    SubscriptionJobStatus,
)
from subscriptions.testgateway.models import GatewayCharge, GatewayDecline
from tests.subscriptions.conftest import pending_job, run_inline

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["superuser", "staff with every permission"])
def operator(request: pytest.FixtureRequest, django_user_model: Any) -> Client:
    if request.param == "superuser":
        user = django_user_model.objects.create_superuser("root", password="pw")
    else:
        user = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
        user.user_permissions.set(Permission.objects.all())
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def ledger(make_subscription: Any, now: Any) -> dict[str, Any]:
    """A subscription with a paid period (its child order and the gateway's charge), and one
    whose card was declined."""
    subscription = make_subscription()
    make_subscription(customer="bob")
    payments.script_customer(customer="bob", declines=1)
    assert run_inline(pending_job(subscription), at=now) == {"renewed": 1, "retry": 1}
    return {
        "subscription": subscription,
        "order": Order.objects.get(subscription=subscription, period_number=0),
        "testgateway_gatewaycharge": GatewayCharge.objects.get(),
        "testgateway_gatewaydecline": GatewayDecline.objects.get(),
    }


def url(name: str, view: str, *args: Any) -> str:
    """An admin page of the subscriptions apps: ``name`` is ``order``, or the test gateway's
    ``testgateway_gatewaycharge`` (its app's label is ``subscriptions_testgateway``)."""
    return reverse(f"admin:subscriptions_{name}_{view}", args=args)


@pytest.mark.parametrize(
    "name", ["order", "testgateway_gatewaycharge", "testgateway_gatewaydecline"]
)
def test_ledger_rows_are_read_by_everyone_and_written_by_no_one(
    operator: Client, ledger: dict[str, Any], name: str
) -> None:
    row = ledger[name]
    model = type(row)
    before = list(model.objects.order_by("pk").values())

    listed = operator.get(url(name, "changelist"))
    assert listed.status_code == 200
    assert url(name, "change", row.pk) in listed.content.decode()
    assert 'value="delete_selected"' not in listed.content.decode()
    page = operator.get(url(name, "change", row.pk))
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()

    assert operator.get(url(name, "add")).status_code == 403
    assert operator.post(url(name, "add"), {"amount": "1", "customer": "x"}).status_code == 403
    changed = {"amount": "0.01", "status": "confirmed", "charge_reference": "forged"}
    assert operator.post(url(name, "change", row.pk), changed).status_code == 403
    assert operator.get(url(name, "delete", row.pk)).status_code == 403
    assert operator.post(url(name, "delete", row.pk), {"post": "yes"}).status_code == 403
    operator.post(
        url(name, "changelist"),
        {"action": "delete_selected", "_selected_action": [row.pk], "post": "yes"},
    )

    assert list(model.objects.order_by("pk").values()) == before
    assert not LogEntry.objects.exists()


def test_no_one_deletes_a_subscription_and_with_it_its_orders(
    operator: Client, ledger: dict[str, Any]
) -> None:
    subscription = ledger["subscription"]
    orders = Order.objects.filter(subscription=subscription).count()
    assert operator.get(url("subscription", "delete", subscription.pk)).status_code == 403
    response = operator.post(url("subscription", "delete", subscription.pk), {"post": "yes"})
    assert response.status_code == 403
    listed = operator.get(url("subscription", "changelist")).content.decode()
    assert 'value="delete_selected"' not in listed and 'value="cancel_now"' in listed
    operator.post(
        url("subscription", "changelist"),
        {"action": "delete_selected", "_selected_action": [subscription.pk], "post": "yes"},
    )
    assert Subscription.objects.filter(pk=subscription.pk).exists()
    assert Order.objects.filter(subscription=subscription).count() == orders


def test_a_renewals_step_period_and_charge_reference_are_not_editable_by_anyone(
    operator: Client, make_subscription: Any, now: Any, settings: Any
) -> None:
    """The forgery that was possible: a retrying renewal's step set to ``charge`` with a
    made-up reference, so that the retry confirmed its order without a charge."""
    settings.SUBSCRIPTIONS_MAX_RETRIES = "3"
    subscription = make_subscription()
    payments.script_customer(customer="alice", declines=1)
    job = pending_job(subscription)
    run_inline(job, at=now)
    job.refresh_from_db()
    assert (job.status, job.parameter) == (SubscriptionJobStatus.RETRY, JobStep.CREATE_ORDER)
    before = SubscriptionJob.objects.filter(pk=job.pk).values().get()

    page = operator.get(url("subscriptionjob", "change", job.pk)).content.decode()
    assert 'name="_save"' not in page and 'name="parameter"' not in page
    assert 'name="custom_text"' not in page and 'name="custom_integer"' not in page
    forged = {
        "parameter": "charge",
        "custom_text": "ch_made_up",
        "custom_integer": "0",
        "opt_counter": str(job.opt_counter),
    }
    assert operator.post(url("subscriptionjob", "change", job.pk), forged).status_code == 403
    assert operator.post(url("subscriptionjob", "delete", job.pk), {"post": "yes"}).status_code == (
        403
    )
    assert SubscriptionJob.objects.filter(pk=job.pk).values().get() == before

    # The retry charges through the gateway and confirms with the gateway's reference.
    assert run_inline(job, at=job.action_date) == {"renewed": 1}
    (charge,) = GatewayCharge.objects.all()
    order = Order.objects.get(subscription=subscription, period_number=0)
    assert (order.status, order.charge_reference, charge.amount) == (
        "confirmed",
        charge.reference,
        Decimal("19.8"),
    )


def test_the_service_refuses_a_renewals_fields_whoever_calls_it(
    make_subscription: Any, now: Any
) -> None:
    job = pending_job(make_subscription())
    with pytest.raises(ValidationError) as refused:
        services.edit_job(job=job, values={"parameter": "charge", "custom_text": "x"}, now=now)
    assert refused.value.message_dict == {
        "custom_text": ["is not edited by hand on a CreateChildOrder job (editable: nothing)"],
        "parameter": ["is not edited by hand on a CreateChildOrder job (editable: nothing)"],
    }
    assert SubscriptionJob.objects.get(pk=job.pk).opt_counter == job.opt_counter


def test_a_cancel_jobs_number_and_note_are_the_operators_and_stay_plain_text(
    operator: Client, make_subscription: Any, now: Any
) -> None:
    subscription = make_subscription()
    run_inline(pending_job(subscription), at=now)
    services.cancel_subscription(subscription_id=subscription.pk, at_period_end=True, now=now)
    job = pending_job(subscription)
    assert job.operator_fields() == ("custom_integer", "custom_text")
    page = operator.get(url("subscriptionjob", "change", job.pk)).content.decode()
    assert 'name="custom_text"' in page and 'name="parameter"' not in page

    edit = url("subscriptionjob", "change", job.pk)
    form = {"custom_integer": "", "custom_text": "call\x1b[2Jthe customer", "opt_counter": "0"}
    refused = operator.post(edit, form)
    assert refused.status_code == 200
    assert "holds the control character U+001B at position 5" in refused.content.decode()
    huge = operator.post(edit, {**form, "custom_text": "ok", "custom_integer": "9" * 20})
    assert huge.status_code == 200 and "Ensure this value is less than or equal to" in (
        huge.content.decode()
    )
    forged = {**form, "custom_text": "call the customer", "parameter": "done", "status": "3"}
    assert operator.post(edit, forged).status_code == 302
    job.refresh_from_db()
    assert (job.custom_text, job.parameter, job.status) == (
        "call the customer",
        JobStep.NONE,
        SubscriptionJobStatus.ACTIVE,
    )
