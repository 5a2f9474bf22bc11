"""The subscriptions app's pages and runs under the apps' one rule for times and names
(docs/operations.md, *Times and names*), in a project that runs in New York."""

from __future__ import annotations

import json
import re
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from scheduling.api import instant
from scheduling.models import Execution, Job
from subscriptions.models import DueBatch, Order
from tests.subscriptions.conftest import pending_job, run_inline

pytestmark = pytest.mark.django_db

#: Django's own date-time format ("Nov. 25, 2026, 11:35 a.m."), to the minute, no zone.
DJANGOS_FORMAT = re.compile(r"\b\d{1,2}:\d\d [ap]\.m\.|\bmidnight\b|\bnoon\b")
PLAN = "alice (2 x COFFEE, every month)"


@pytest.fixture(autouse=True)
def in_new_york(settings: Any) -> None:
    settings.TIME_ZONE = "America/New_York"


def batch_run(subscription: Any) -> Execution:
    """An execution of the engine job that runs the subscription's due batch."""
    batch = DueBatch.objects.get(pk=pending_job(subscription).batch_id)
    job = Job.objects.get(task_table="subscriptions.DueBatch", task_row_id=batch.pk)
    return Execution.objects.create(job=job, task=job.task, scheduled_for=batch.due_at)


def test_a_due_batchs_run_is_named_by_its_customers_and_plans(
    admin_client: Any, make_subscription: Any
) -> None:
    run = batch_run(make_subscription())
    assert run.job is not None and run.job.name.startswith("subscriptions.DueBatch:")
    page = admin_client.get(reverse("admin:scheduling_execution_changelist")).content.decode()
    assert f"1 subscription due: {PLAN}" in page
    assert "subscriptions.DueBatch:" not in page
    out = StringIO()
    call_command("executions", "--json", stdout=out)
    [listed] = json.loads(out.getvalue())
    assert listed["title"] == f"1 subscription due: {PLAN}"


def test_a_batch_of_many_names_a_few_and_counts_the_rest(make_subscription: Any) -> None:
    first = make_subscription()
    for customer in ("bob", "carol", "dave"):
        make_subscription(customer=customer)
    batch_run(first)
    out = StringIO()
    call_command("executions", stdout=out)
    [line] = out.getvalue().splitlines()
    assert f"4 subscriptions due: {PLAN}, bob (" in line and " and 1 more " in line, line


def test_a_short_periods_start_and_end_read_to_the_second_in_the_named_zone(
    admin_client: Any, make_subscription: Any, now: Any
) -> None:
    subscription = make_subscription(interval="PT10S")
    run_inline(pending_job(subscription), at=now)
    order = Order.objects.get(subscription=subscription, period_number=0)
    assert (order.period_end - order.period_start).total_seconds() == 10
    url = reverse("admin:subscriptions_subscription_change", args=[subscription.pk])
    page = admin_client.get(url).content.decode()
    start, end = instant(order.period_start), instant(order.period_end)
    assert start != end and start in page and end in page
    assert start.endswith((" EST", " EDT"))
    assert not DJANGOS_FORMAT.search(page), DJANGOS_FORMAT.search(page)


def test_the_subscription_list_cuts_no_customer_and_prints_instants_by_the_rule(
    make_subscription: Any,
) -> None:
    customer = "a customer whose name is far longer than twenty characters"
    subscription = make_subscription(customer=customer)
    out = StringIO()
    call_command("subscriptions", "list", stdout=out)
    header, row = out.getvalue().splitlines()
    assert customer in row
    assert instant(subscription.starts_at) in row
    assert instant(subscription.starts_at).endswith((" EST", " EDT"))
    assert header.index("STATUS") == row.index("active")
