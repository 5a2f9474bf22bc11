"""A renewal that keeps failing is visible while it is retried: the subscription is
``past_due`` with the gateway's reply, the job keeps its last error, and the batch's run
reports the failed renewal to the engine, which counts it. An action no code handles is an
error, never a silent expire."""

from __future__ import annotations

import json
from datetime import datetime
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from scheduling.api import RunContext
from subscriptions import payments, renewals
from subscriptions.models import (
    JobAction,
    JobStep,
    Subscription,
    SubscriptionJob,
    SubscriptionJobStatus,
    SubscriptionStatus,
    step_done,
)
from tests.subscriptions.conftest import pending_job, run_inline

pytestmark = [pytest.mark.django_db]


class Reports:
    """A run context that remembers what the run reported, as the engine would record it."""

    def __init__(self, at: datetime) -> None:
        self.reported: list[tuple[int, str]] = []
        self.run = RunContext(
            execution_id=0,
            job_id=None,
            scheduled_for=at,
            attempt=1,
            _report=lambda _id, count, detail: self.reported.append((count, detail)),
        )


@override_settings(SUBSCRIPTIONS_MAX_RETRIES="3")
def test_a_declined_renewal_is_past_due_with_the_gateways_reply_while_it_is_retried(
    make_subscription: Any, now: datetime
) -> None:
    subscription = make_subscription()
    payments.script_customer(customer="alice", declines=1)
    job = pending_job(subscription)
    reports = Reports(job.action_date)

    assert renewals.run_batch(job.batch_id, run=reports.run, clock=lambda: now) == {"retry": 1}

    subscription.refresh_from_db()
    job.refresh_from_db()
    assert subscription.status == SubscriptionStatus.PAST_DUE
    assert "PaymentDeclined" in subscription.attention_reason
    assert "retried (1 of 3)" in subscription.attention_reason
    assert job.status == SubscriptionJobStatus.RETRY and job.last_error.startswith(
        "PaymentDeclined"
    )
    ((count, detail),) = reports.reported
    assert count == 1 and f"subscription {subscription.pk}" in detail and "retry" in detail

    out = StringIO()
    call_command("subscriptions", "show", str(subscription.pk), "--json", stdout=out)
    shown = json.loads(out.getvalue())
    assert shown["status"] == "past_due" and "PaymentDeclined" in shown["last_error"]
    assert shown["jobs"][0]["last_error"].startswith("PaymentDeclined")

    # The retry succeeds: the subscription is paid up again, and nothing is reported.
    assert run_inline(job, at=job.action_date) == {"renewed": 1}
    subscription.refresh_from_db()
    assert subscription.status == SubscriptionStatus.ACTIVE and not subscription.attention_reason


@override_settings(SUBSCRIPTIONS_MAX_RETRIES="CreateChildOrder=1")
def test_past_due_becomes_needs_attention_when_the_retries_are_spent(
    make_subscription: Any, now: datetime
) -> None:
    subscription = make_subscription()
    payments.script_customer(customer="alice", declines=5)
    job = pending_job(subscription)
    assert run_inline(job, at=now) == {"retry": 1}
    assert Subscription.objects.get(pk=subscription.pk).status == SubscriptionStatus.PAST_DUE
    assert run_inline(job, at=now) == {"failed": 1}
    subscription.refresh_from_db()
    assert subscription.status == SubscriptionStatus.NEEDS_ATTENTION
    assert "PaymentDeclined" in subscription.attention_reason


def test_a_job_with_an_action_no_code_handles_fails_at_once_and_ends_nothing(
    make_subscription: Any, now: datetime
) -> None:
    # Written behind the model's back, as a newer release's rows might be (the check
    # constraint dropped for this test's transaction only).
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {SubscriptionJob._meta.db_table} "
            "DROP CONSTRAINT subscriptionjob_action_valid"
        )
    subscription = make_subscription()
    job = pending_job(subscription)
    SubscriptionJob.objects.filter(pk=job.pk).update(action="Pause")
    reports = Reports(job.action_date)
    assert renewals.run_batch(job.batch_id, run=reports.run, clock=lambda: now) == {"failed": 1}
    job.refresh_from_db()
    subscription.refresh_from_db()
    assert job.status == SubscriptionJobStatus.FAILED and "UnhandledAction" in job.last_error
    assert subscription.status == SubscriptionStatus.NEEDS_ATTENTION  # not expired
    assert reports.reported and "UnhandledAction" in reports.reported[0][1]


def test_the_steps_of_a_renewal_are_one_enum_in_order() -> None:
    assert [s.value for s in JobStep][1:5] == ["price", "create_order", "charge", "confirm"]
    assert step_done("confirm", JobStep.CHARGE) and not step_done("price", JobStep.CHARGE)
    assert not step_done(JobStep.CANCELLED, JobStep.PRICE)
    assert set(JobAction.values) == {"CreateChildOrder", "Cancel", "Expire"}
