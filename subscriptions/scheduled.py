"""The subscriptions app's scheduled work: every SubscriptionJob row is a task-table row.

Each row gets one one-off engine job at its action date (``services.place_job``); the engine
claims it when due, rings the doorbell, guards against duplicate messages, keeps the attempt
alive, reaps it if its worker dies and retries it after the action's delay. The runner only
runs the row's action.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from scheduling.api import RunContext, task_table
from subscriptions.models import SubscriptionJob
from subscriptions.services import run_job


@task_table(SubscriptionJob)
def run_subscription_job(row: SubscriptionJob, run: RunContext) -> dict[str, Any]:
    return run_job(job=row, run=run, clock=timezone.now)
