"""Subscription fixtures: subscriptions made through the service, and jobs run in-process."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from scheduling.api import RunContext
from subscriptions import renewals, services
from subscriptions.models import JobStatus, Subscription, SubscriptionJob


@pytest.fixture(autouse=True)
def one_block(settings: Any) -> None:
    """Every subscription of a test in one block, whatever ids the database hands out (its
    sequences are not rolled back between tests); a test about blocks sets its own size."""
    settings.SUBSCRIPTIONS_BATCH_SIZE = 1_000_000


@pytest.fixture
def make_subscription(now: datetime) -> Callable[..., Subscription]:
    def make(**overrides: Any) -> Subscription:
        options: dict[str, Any] = {
            "customer": "alice",
            "items": [services.ItemSpec("COFFEE", 2, Decimal("9.90"))],
            "interval": "P1M",
            "start": now,
            "end": None,
            "now": now,
        }
        options.update(overrides)
        return services.create_subscription(**options)

    return make


def pending_job(subscription: Subscription) -> SubscriptionJob:
    """The subscription's one job that has not finished."""
    return SubscriptionJob.objects.get(
        subscription=subscription,
        status__in=[JobStatus.ACTIVE, JobStatus.RETRY, JobStatus.PROCESSING],
    )


def run_inline(job: SubscriptionJob, *, at: datetime, attempt: int = 1) -> dict[str, Any]:
    """Run one attempt of the batch ``job`` is in now, in this process, as the engine would."""
    job = SubscriptionJob.objects.get(pk=job.pk)  # where the job is now
    run = RunContext(execution_id=0, job_id=None, scheduled_for=job.action_date, attempt=attempt)
    clock = iter(at + timedelta(milliseconds=n) for n in range(1000))
    return renewals.run_batch(job.batch_id, run=run, clock=lambda: next(clock))
