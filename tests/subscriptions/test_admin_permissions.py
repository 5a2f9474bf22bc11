"""Permissions in the subscriptions admin, and the engine's refusal of hand-made renewal jobs.

Every action that changes a subscription or a subscription job needs the change permission and
is written to the admin log; a view-only staff user changes nothing. Due batches and
subscription jobs are internal task tables: no job made in the jobs admin, by a staff user or
a superuser, may point at one and run customers' renewals when it likes.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from scheduling.api import SYSTEM_OWNER, jobs_for_row
from subscriptions.models import DueBatch, Subscription, SubscriptionJob, SubscriptionJobStatus
from tests.subscriptions.conftest import pending_job

pytestmark = pytest.mark.django_db

SUBSCRIPTIONS = "admin:subscriptions_subscription_changelist"
SUBSCRIPTION_JOBS = "admin:subscriptions_subscriptionjob_changelist"


def staff_client(django_user_model: Any, username: str, permissions: Any) -> tuple[Any, Client]:
    user = django_user_model.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(permissions)
    client = Client()
    client.force_login(user)
    return user, client


def act(client: Client, changelist: str, action: str, *ids: int) -> Any:
    return client.post(reverse(changelist), {"action": action, "_selected_action": list(ids)})


def test_a_view_only_user_cannot_cancel_or_retry_anything(
    django_user_model: Any, make_subscription: Any, now: Any
) -> None:
    viewing = Permission.objects.filter(
        content_type__app_label="subscriptions", codename__startswith="view_"
    )
    _, as_viewer = staff_client(django_user_model, "vera", viewing)
    subscription = make_subscription()
    job = pending_job(subscription)
    job.change(now=now, status=SubscriptionJobStatus.FAILED)

    for action in ("cancel_now", "cancel_at_period_end", "retry_now"):
        act(as_viewer, SUBSCRIPTIONS, action, subscription.pk)
    act(as_viewer, SUBSCRIPTION_JOBS, "retry_now", job.pk)

    subscription.refresh_from_db()
    assert (subscription.status, subscription.cancelled_at) == ("active", None)
    assert SubscriptionJob.objects.get(pk=job.pk).status == SubscriptionJobStatus.FAILED
    assert not LogEntry.objects.exists()
    page = as_viewer.get(reverse(SUBSCRIPTIONS)).content.decode()
    assert 'value="cancel_now"' not in page


def test_cancel_and_retry_by_a_user_who_may_change_are_logged(
    django_user_model: Any, make_subscription: Any, now: Any
) -> None:
    everything = Permission.objects.filter(content_type__app_label="subscriptions")
    clerk, as_clerk = staff_client(django_user_model, "clerk", everything)
    parked = make_subscription(customer="parked")
    job = pending_job(parked)
    job.change(now=now, status=SubscriptionJobStatus.FAILED)
    act(as_clerk, SUBSCRIPTION_JOBS, "retry_now", job.pk)
    leaving = make_subscription(customer="leaving")
    act(as_clerk, SUBSCRIPTIONS, "cancel_now", leaving.pk)

    assert SubscriptionJob.objects.get(pk=job.pk).status == SubscriptionJobStatus.ACTIVE
    assert Subscription.objects.get(pk=leaving.pk).status == "cancelled"
    logged = LogEntry.objects.filter(user=clerk).values_list("object_id", "change_message")
    assert sorted(logged) == sorted(
        [(str(job.pk), "Retried now."), (str(leaving.pk), "Cancelled.")]
    )


def test_no_one_points_a_hand_made_job_at_a_due_batch_or_a_subscription_job(
    django_user_model: Any, admin_client: Client, make_subscription: Any
) -> None:
    job = pending_job(make_subscription())
    batch = DueBatch.objects.get(pk=job.batch_id)
    powerful = Permission.objects.filter(
        content_type__app_label__in=("scheduling", "subscriptions")
    )
    _, as_staff = staff_client(django_user_model, "ops", powerful)
    made_by_code = jobs_for_row(batch)
    assert [j.owner for j in made_by_code] == [SYSTEM_OWNER]  # the app's own job

    for client in (as_staff, admin_client):
        page = client.get("/admin/scheduling/job/add/").content.decode()
        assert "subscriptions.DueBatch" not in page and "subscriptions.SubscriptionJob" not in page
        for label, row in (("DueBatch", batch.pk), ("SubscriptionJob", job.pk)):
            response = client.post(
                "/admin/scheduling/job/add/",
                {
                    "owner": "",
                    "name": f"early {label}",
                    "task": f"table:subscriptions.{label}",
                    "task_row_id": row,
                    "args": "[]",
                    "kwargs": "{}",
                    "interval": "PT1M",
                    "timezone": "UTC",
                    "misfire": "catch_up",
                    "overlap": "forbid",
                    "jitter": "0",
                    "timeout": "300",
                    "max_retries": "0",
                    "queue": "celery",
                },
            )
            assert response.status_code == 200
            assert "task" in response.context["adminform"].form.errors
    assert jobs_for_row(batch) == made_by_code
    assert jobs_for_row(job) == []
