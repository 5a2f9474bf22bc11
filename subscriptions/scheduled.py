"""The subscriptions app's scheduled work: due batches, and (from before them) single jobs.

Every subscription job joins the open batch of its action date (``subscriptions.batches``),
and each batch has one one-off engine job at that instant. The engine claims it when due,
rings the doorbell, guards against duplicate messages, keeps the run alive, reaps it if its
worker dies and retries it; the runner runs the batch (``subscriptions.renewals``).

Jobs placed before due batches existed each have an engine job of their own that points at
the subscription job's row; ``SubscriptionJob`` stays a task table so those still run, one
by one, through the same steps.

Both tables are internal: only this app's code makes their jobs. A job made by hand (in the
admin, or by an API call for an owner) that pointed at a batch or a subscription job would run
customers' renewals whenever it said, so the engine refuses it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import Count, F, QuerySet, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from scheduling.api import RunContext, describe_interval, task_table
from subscriptions import renewals
from subscriptions.models import DueBatch, JobAction, Subscription, SubscriptionJob

#: How many of a batch's subscriptions its description names; the rest are counted.
NAMED_PER_BATCH = 3
#: A subscription job's action in words.
ACTION_WORDS = {
    JobAction.CREATE_CHILD_ORDER: "renewal",
    JobAction.CANCEL: "cancellation",
    JobAction.EXPIRE: "expiry",
}


def plan(subscription: Subscription) -> str:
    """A subscription's customer and plan: "alice (2 x COF, every month)". Its items come
    from ``prefetch_related("items")``."""
    items = ", ".join(f"{i.quantity} x {i.sku}" for i in subscription.items.all()) or "no items"
    return f"{subscription.customer} ({items}, {describe_interval(subscription.interval)})"


def describe_jobs(rows: QuerySet[SubscriptionJob]) -> dict[int, str]:
    """A subscription job, as the engine's lists name its run: its action and the
    subscription's customer and plan ("renewal of alice (2 x COF, every month)")."""
    found = rows.select_related("subscription").prefetch_related("subscription__items")
    return {
        job.pk: f"{ACTION_WORDS.get(job.action, job.action)} of {plan(job.subscription)}"
        for job in found
    }


def describe_batches(rows: QuerySet[DueBatch]) -> dict[int, str]:
    """A due batch, as the engine's lists name its run: the subscriptions due in it, by
    customer and plan, the first ``NAMED_PER_BATCH`` named ("14 subscriptions due: alice
    (…), bob (…), carol (…) and 11 more"). Three queries for any number of batches."""
    ids = list(rows.values_list("pk", flat=True))
    counts = dict(
        SubscriptionJob.objects.filter(batch_id__in=ids)
        .order_by()
        .values_list("batch_id")
        .annotate(n=Count("pk"))
    )
    first = (
        SubscriptionJob.objects.filter(batch_id__in=ids)
        .annotate(
            place=Window(RowNumber(), partition_by=F("batch_id"), order_by=F("scheduled_id").asc())
        )
        .filter(place__lte=NAMED_PER_BATCH)
        .select_related("subscription")
        .prefetch_related("subscription__items")
        .order_by("batch_id", "scheduled_id")
    )
    named: dict[int, list[str]] = defaultdict(list)
    for job in first:
        named[job.batch_id].append(plan(job.subscription))
    words = {}
    for pk in ids:
        total = counts.get(pk, 0)
        if not total:
            words[pk] = f"due batch {pk} (no renewals)"
            continue
        rest = total - len(named[pk])
        more = f" and {rest} more" if rest else ""
        counted = "1 subscription" if total == 1 else f"{total} subscriptions"
        words[pk] = f"{counted} due: {', '.join(named[pk])}{more}"
    return words


@task_table(DueBatch, internal=True, describe=describe_batches)
def run_due_batch(row: DueBatch, run: RunContext) -> dict[str, Any]:
    return renewals.run_batch(row.pk, run=run, clock=timezone.now)


@task_table(SubscriptionJob, internal=True, describe=describe_jobs)
def run_subscription_job(row: SubscriptionJob, run: RunContext) -> dict[str, Any]:
    return renewals.run_one(row.pk, run=run, clock=timezone.now)
