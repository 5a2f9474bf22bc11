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

from typing import Any

from django.utils import timezone

from scheduling.api import RunContext, task_table
from subscriptions import renewals
from subscriptions.models import DueBatch, SubscriptionJob


@task_table(DueBatch, internal=True)
def run_due_batch(row: DueBatch, run: RunContext) -> dict[str, Any]:
    return renewals.run_batch(row.pk, run=run, clock=timezone.now)


@task_table(SubscriptionJob, internal=True)
def run_subscription_job(row: SubscriptionJob, run: RunContext) -> dict[str, Any]:
    return renewals.run_one(row.pk, run=run, clock=timezone.now)
