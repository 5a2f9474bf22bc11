"""Subscription fixtures: subscriptions made through the service, and jobs run in-process."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from scheduling.api import RunContext
from subscriptions import pricing, renewals, services
from subscriptions.models import Subscription, SubscriptionJob, SubscriptionJobStatus


@pytest.fixture(autouse=True)
def one_block(settings: Any) -> None:
    """Every subscription of a test in one block, whatever ids the database hands out (its
    sequences are not rolled back between tests); a test about blocks sets its own size."""
    settings.SUBSCRIPTIONS_BATCH_SIZE = 1_000_000


class LogLines(logging.Handler):
    """The messages one logger wrote, as text."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def subscriptions_log(monkeypatch: pytest.MonkeyPatch) -> LogLines:
    """What the app's own logger wrote during the test.

    ``caplog`` listens on the root logger, which the project's LOGGING keeps the app's logger
    from reaching, and a handler added to the app's logger is dropped when the engine's first
    look at the task registry runs ``django.setup()`` again (Celery's Django fixup), which
    configures logging anew. The logger's ``handle`` survives that.
    """
    logger, lines = logging.getLogger("subscriptions"), LogLines()
    real = logger.handle

    def handle(record: logging.LogRecord) -> None:
        lines.emit(record)
        real(record)

    monkeypatch.setattr(logger, "handle", handle)
    return lines


@pytest.fixture
def make_subscription(now: datetime) -> Callable[..., Subscription]:
    def make(**overrides: Any) -> Subscription:
        options: dict[str, Any] = {
            "customer": "alice",
            "items": [pricing.ItemSpec("COFFEE", 2, Decimal("9.90"))],
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
        status__in=[
            SubscriptionJobStatus.ACTIVE,
            SubscriptionJobStatus.RETRY,
            SubscriptionJobStatus.PROCESSING,
        ],
    )


def run_inline(job: SubscriptionJob, *, at: datetime, attempt: int = 1) -> dict[str, Any]:
    """Run one attempt of the batch ``job`` is in now, in this process, as the engine would."""
    job = SubscriptionJob.objects.get(pk=job.pk)  # where the job is now
    run = RunContext(execution_id=0, job_id=None, scheduled_for=job.action_date, attempt=attempt)
    clock = iter(at + timedelta(milliseconds=n) for n in range(1000))
    return renewals.run_batch(job.batch_id, run=run, clock=lambda: next(clock))
