"""What the subscriptions' admin does to engine jobs is on their audit trail by the signed-in
user through the admin door, as the engine's own pages record theirs, not as ``system``.

The admin reaches the engine in two ways: a change that places a subscription job opens a
due batch when none is open at its instant, and that makes the batch's engine job (adding a
subscription, cancelling at the period's end, retrying failed jobs); a cancel pauses the
engine jobs that run the subscription jobs it stops (those made before due batches existed,
which point at the subscription job's row).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from scheduling.api import Once, schedule_row
from scheduling.models import JobChange
from subscriptions.models import Subscription, SubscriptionJob, SubscriptionJobStatus
from tests.subscriptions.conftest import pending_job, run_inline

pytestmark = pytest.mark.django_db

SUBSCRIPTIONS = "admin:subscriptions_subscription_changelist"
SUBSCRIPTION_JOBS = "admin:subscriptions_subscriptionjob_changelist"


@pytest.fixture
def as_clerk(django_user_model: Any) -> Client:
    """A staff user with every permission of the subscriptions app and none of the engine's."""
    clerk = django_user_model.objects.create_user("clerk", password="pw", is_staff=True)
    clerk.user_permissions.set(Permission.objects.filter(content_type__app_label="subscriptions"))
    client = Client()
    client.force_login(clerk)
    return client


def changes_after(mark: int) -> list[tuple[str, str, str]]:
    """The trail's rows written after row ``mark``, as (action, who, source)."""
    return list(
        JobChange.objects.filter(pk__gt=mark).order_by("pk").values_list("action", "who", "source")
    )


def last_change() -> int:
    return JobChange.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def act(client: Client, changelist: str, action: str, pk: int) -> None:
    response = client.post(reverse(changelist), {"action": action, "_selected_action": [pk]})
    assert response.status_code == 302


def run_by_row(job: SubscriptionJob, now: datetime) -> None:
    """An engine job that runs this subscription job's row, as jobs did before due batches."""
    schedule_row(job, timing=Once(at=job.action_date, allow_past=True), now=now)


def test_adding_a_subscription_records_its_first_batch_s_job_as_made_by_the_user(
    as_clerk: Client,
) -> None:
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
    }
    mark = last_change()
    response = as_clerk.post(reverse("admin:subscriptions_subscription_add"), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Subscription.objects.filter(customer="dora").exists()
    assert changes_after(mark) == [("created", "clerk", "admin")]


def test_cancelling_now_records_each_paused_job_by_the_user(
    as_clerk: Client,
    make_subscription: Callable[..., Subscription],
    now: datetime,
    django_capture_on_commit_callbacks: Any,
) -> None:
    subscription = make_subscription()
    run_by_row(pending_job(subscription), now)
    mark = last_change()
    with django_capture_on_commit_callbacks(execute=True):
        act(as_clerk, SUBSCRIPTIONS, "cancel_now", subscription.pk)
    assert Subscription.objects.get(pk=subscription.pk).status == "cancelled"
    assert changes_after(mark) == [("paused", "clerk", "admin")]


def test_cancelling_at_period_end_records_the_pause_and_the_cancel_s_batch_by_the_user(
    as_clerk: Client,
    make_subscription: Callable[..., Subscription],
    now: datetime,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    subscription = make_subscription()
    run_inline(pending_job(subscription), at=now)  # period 1 paid; period 2's renewal placed
    run_by_row(pending_job(subscription), now)
    # The Cancel falls at period 2's start: in a block of its own, it opens a batch (and an
    # engine job) of its own rather than joining the batch of the renewal it replaces.
    settings.SUBSCRIPTIONS_BATCH_SIZE = 1
    mark = last_change()
    with django_capture_on_commit_callbacks(execute=True):
        act(as_clerk, SUBSCRIPTIONS, "cancel_at_period_end", subscription.pk)
    assert Subscription.objects.get(pk=subscription.pk).status == "pending_cancel"
    assert sorted(changes_after(mark)) == [
        ("created", "clerk", "admin"),
        ("paused", "clerk", "admin"),
    ]


@pytest.mark.parametrize(
    ("changelist", "row"),
    [(SUBSCRIPTIONS, "subscription"), (SUBSCRIPTION_JOBS, "job")],
)
def test_retrying_failed_jobs_now_records_the_batch_it_opens_as_made_by_the_user(
    as_clerk: Client,
    make_subscription: Callable[..., Subscription],
    now: datetime,
    changelist: str,
    row: str,
) -> None:
    subscription = make_subscription()
    job = pending_job(subscription)
    job.change(now=now, status=SubscriptionJobStatus.FAILED)
    mark = last_change()
    act(as_clerk, changelist, "retry_now", subscription.pk if row == "subscription" else job.pk)
    assert SubscriptionJob.objects.get(pk=job.pk).status == SubscriptionJobStatus.ACTIVE
    assert changes_after(mark) == [("created", "clerk", "admin")]
