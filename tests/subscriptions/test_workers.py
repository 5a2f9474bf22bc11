"""Renewals on real ``celery worker`` processes and the scheduler, PostgreSQL and Redis.

Periods are a second long, so a year of renewals takes seconds. Whatever happens (declines,
a worker killed between the charge and the confirmation, a message delivered twice, a cancel
in the middle), every period has at most one order and at most one charge; and a subscription
paid up after a long retry resumes at its next period instead of catching up in a burst.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from scheduling.api import jobs_for_row
from scheduling.models import Execution, ExecutionStatus
from scheduling.rules.registry import EXECUTION_HEADER
from subscriptions import payments, pricing, services
from subscriptions.models import (
    DueBatch,
    Order,
    OrderStatus,
    SkippedPeriods,
    Subscription,
    SubscriptionJob,
    SubscriptionJobStatus,
    SubscriptionStatus,
)
from subscriptions.testgateway.models import GatewayCharge
from tests.conftest import SHORT_LEASE, scheduler_command, wait_for
from tests.polling import logged
from tests.scheduling.test_worker_lifecycle import log_lines, send_message, start_worker
from tests.subscriptions.pausing import pausing_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SLOW = 60.0
SECOND = timedelta(seconds=1)


#: For the processes only (this one runs no scheduler loop): the scheduler looks for new due
#: rows at least every 0.2 s instead of every second. A renewal placed for a period that has
#: already begun (a worker catching up after its start) is due at once, and each such hop
#: would otherwise wait up to a second for the scheduler's next tick.
SCHEDULER_KNOBS = {"SCHEDULING_MAX_SLEEP": "0.2"}



@pytest.fixture
def env(process_env: dict[str, str], settings: Any) -> dict[str, str]:
    """A failed renewal is retried after a second, at most twice; an attempt may take 30 s
    (under the tests' broker visibility timeout). The same here and in the workers; the
    scheduler ticks at least every 0.2 s (``SCHEDULER_KNOBS``)."""
    knobs = {
        "SUBSCRIPTIONS_MAX_RETRIES": "2",
        "SUBSCRIPTIONS_RETRY_DELAY": "1",
        "SUBSCRIPTIONS_TIMEOUT": "30",
        "SUBSCRIPTIONS_BATCH_SIZE": "1000000",  # one block, whatever the ids
    }
    for name, value in knobs.items():
        setattr(settings, name, value)
    return {**process_env, **knobs, **SCHEDULER_KNOBS}


def subscribe(
    customer: str,
    *,
    every: str = "PT1S",
    seconds: int | None = None,
    start: datetime | None = None,
) -> Subscription:
    """A subscription starting at ``start`` (in a second by default); with ``seconds``, it
    ends that long after."""
    start = start or timezone.now() + SECOND
    return services.create_subscription(
        customer=customer,
        items=[pricing.ItemSpec("COFFEE", 1, Decimal("4.50"))],
        interval=every,
        start=start,
        end=None if seconds is None else start + seconds * SECOND,
        now=timezone.now(),
    )


def child_orders(subscription: Subscription) -> list[Order]:
    return list(
        Order.objects.filter(subscription=subscription, parent__isnull=False).order_by(
            "period_start"
        )
    )


def charges(subscription: Subscription) -> list[GatewayCharge]:
    return list(
        GatewayCharge.objects.filter(idempotency_key__startswith=f"subscription:{subscription.pk}:")
    )


def first_job(subscription: Subscription) -> SubscriptionJob:
    return SubscriptionJob.objects.filter(subscription=subscription).order_by("pk").first()


def job_is(job: SubscriptionJob, status: int, **fields: Any) -> Callable[[], Any]:
    def check() -> Any:
        job.refresh_from_db()
        return job.status == status and all(getattr(job, k) == v for k, v in fields.items())

    return check


def status_is(subscription: Subscription, status: str) -> Callable[[], bool]:
    return lambda: Subscription.objects.get(pk=subscription.pk).status == status


def batch_execution(batch: DueBatch) -> Execution:
    """The one execution of the engine job that runs a due batch."""
    (engine_job,) = jobs_for_row(batch)
    return Execution.objects.get(job_id=engine_job.id)


def batch_completed(batch: DueBatch) -> Callable[[], Execution | None]:
    """The batch's execution once its run is recorded completed: the renewals complete inside
    the run, and the worker records the run's own end after its body has returned."""

    def check() -> Execution | None:
        execution = batch_execution(batch)
        return execution if execution.status == ExecutionStatus.COMPLETED else None

    return check


def test_twelve_short_periods_give_twelve_orders_and_a_cancel_midway_stops_the_rest(
    processes: Any, env: dict[str, str]
) -> None:
    year = subscribe("alice", seconds=12)  # twelve periods of PT1S
    stopped = subscribe("dave")
    processes.start(scheduler_command(), env=env, name="scheduler")
    start_worker(processes, env, "renewals", concurrency=2)

    wait_for(lambda: len(child_orders(stopped)) >= 3, timeout=SLOW, message="three renewals")
    cancelled = services.cancel_subscription(
        subscription_id=stopped.pk, at_period_end=False, now=timezone.now()
    )

    wait_for(status_is(year, SubscriptionStatus.EXPIRED), timeout=SLOW, message="expired")
    orders = child_orders(year)
    assert [o.period_number for o in orders] == list(range(12))
    assert all(o.status == OrderStatus.CONFIRMED for o in orders)
    assert len(charges(year)) == 12
    assert len({c.idempotency_key for c in charges(year)}) == 12
    statuses = set(
        SubscriptionJob.objects.filter(subscription=year).values_list("status", flat=True)
    )
    assert statuses == {SubscriptionJobStatus.COMPLETED}
    assert SubscriptionJob.objects.filter(subscription=year, action="Expire").count() == 1

    # The cancelled subscription: by the time the year is over, eleven more periods have
    # passed; none of them got an order or a charge.
    orders = child_orders(stopped)
    assert all(o.period_start <= cancelled.cancelled_at for o in orders), "no later orders"
    assert all(o.status == OrderStatus.CONFIRMED for o in orders)
    assert len(charges(stopped)) == len(orders) <= 5
    assert not SubscriptionJob.objects.filter(
        subscription=stopped,
        status__in=[
            SubscriptionJobStatus.ACTIVE,
            SubscriptionJobStatus.RETRY,
            SubscriptionJobStatus.PROCESSING,
        ],
    ).exists()


def test_declines_are_retried_until_paid_or_failed_past_the_maximum(
    processes: Any, env: dict[str, str]
) -> None:
    paid_late = subscribe("bob", every="P1M")
    never_paid = subscribe("carol", every="P1M")
    payments.script_customer(customer="bob", declines=2)
    payments.script_customer(customer="carol", declines=10)
    # The batch the renewal is due in before anything runs (a fast worker has moved the job
    # on to its first retry's batch within a second of starting).
    job = first_job(paid_late)
    first_batch = job.batch
    processes.start(scheduler_command(), env=env, name="scheduler")
    start_worker(processes, env, "renewals", concurrency=2)

    # Two declines, then the charge goes through: one order, one charge, retry count 2.
    wait_for(
        job_is(job, SubscriptionJobStatus.COMPLETED),
        timeout=SLOW,
        message="bob's renewal completes",
    )
    assert job.retry_count == 2
    assert [o.period_number for o in child_orders(paid_late)] == [0]
    assert len(charges(paid_late)) == 1
    # Each retry ran in a batch of its own, a second after the decline; a decline is the
    # job's failure, not the batch's: every batch's run completed and closed it.
    assert job.batch_id != first_batch.pk
    assert job.action_date >= first_batch.due_at + 2 * SECOND
    for batch in (first_batch, job.batch):
        wait_for(batch_completed(batch), timeout=SLOW, message="the batch's run completes")
        batch.refresh_from_db()
        assert batch.closed_at is not None

    # Declined past the maximum (two retries): failed, flagged, and no order for the period.
    job = first_job(never_paid)
    wait_for(
        job_is(job, SubscriptionJobStatus.FAILED), timeout=SLOW, message="carol's renewal fails"
    )
    assert job.retry_count == 2
    never_paid.refresh_from_db()
    assert never_paid.status == SubscriptionStatus.NEEDS_ATTENTION
    assert "PaymentDeclined" in never_paid.attention_reason
    assert child_orders(never_paid) == [] and charges(never_paid) == []
    assert SubscriptionJob.objects.filter(subscription=never_paid).count() == 1


def test_a_worker_killed_between_charge_and_confirm_resumes_at_confirm_with_one_charge(
    processes: Any, env: dict[str, str]
) -> None:
    """The survivor's run waits for the doomed run's lease to run out: 4 s (``SHORT_LEASE``)."""
    env = {**env, **SHORT_LEASE}
    start = timezone.now() + SECOND
    batch = [subscribe(name, every="P1M", start=start) for name in ("erin", "ezra", "eve")]
    jobs = [first_job(s) for s in batch]
    assert len({j.batch_id for j in jobs}) == 1, "one instant, one block: one batch"
    processes.start(scheduler_command(), env=env, name="scheduler")
    doomed = start_worker(processes, pausing_env(env, "charge"), "doomed", concurrency=1)
    wait_for(
        lambda: "renewal.paused" in processes.log_of(doomed),
        timeout=SLOW,
        message="the batch charged and stopped before confirming",
    )
    for job, subscription in zip(jobs, batch, strict=True):
        job.refresh_from_db()
        assert (job.status, job.parameter) == (SubscriptionJobStatus.PROCESSING, "charge")
        assert len(charges(subscription)) == 1
        assert child_orders(subscription)[0].status == OrderStatus.PENDING
    processes.kill(doomed)  # SIGKILL to the whole worker
    doomed.wait(timeout=10)

    survivor = start_worker(processes, env, "survivor", concurrency=1)
    for job in jobs:
        wait_for(
            job_is(job, SubscriptionJobStatus.COMPLETED),
            timeout=SLOW,
            message="the survivor confirms",
        )
    execution = wait_for(
        batch_completed(jobs[0].batch), timeout=SLOW, message="the survivor's run completes"
    )
    log = processes.log_of(survivor)
    for job, subscription in zip(jobs, batch, strict=True):
        assert log_lines(log, rf"renewal\.resumed job={job.pk} after=charge")
        assert (job.parameter, job.retry_count) == ("confirm", 1)  # the lost attempt is counted
        (order,) = child_orders(subscription)
        (charge,) = charges(subscription)
        assert order.status == OrderStatus.CONFIRMED and order.charge_reference == charge.reference
        # Its record of the charge was checked with the gateway by its key, not trusted.
        assert log_lines(log, rf"renewal\.verified job={job.pk} reference={charge.reference}")
    assert not log_lines(log, r"gateway\.replayed")  # asked, never charged again
    assert (execution.status, execution.retry_count) == (ExecutionStatus.COMPLETED, 1)


def test_the_same_message_delivered_twice_runs_the_steps_once(
    processes: Any, env: dict[str, str]
) -> None:
    subscription = subscribe("frank", every="P1M")
    job = first_job(subscription)
    processes.start(scheduler_command(), env=env, name="scheduler")
    execution = wait_for(
        lambda: Execution.objects.filter(
            job_id=jobs_for_row(job.batch)[0].id, status=ExecutionStatus.QUEUED
        ).first(),
        timeout=SLOW,
        message="the doorbell is published",
    )
    send_message(  # the same doorbell again, before any worker runs
        env,
        execution.task,
        queue="celery",
        task_id=str(execution.task_id),
        headers={EXECUTION_HEADER: execution.pk},
    )
    worker = start_worker(processes, env, "twice", concurrency=2)

    wait_for(
        job_is(job, SubscriptionJobStatus.COMPLETED), timeout=SLOW, message="the renewal completes"
    )
    wait_for(
        lambda: Execution.objects.get(pk=execution.pk).duplicates == 1,
        timeout=SLOW,
        message="the second delivery is absorbed",
    )
    # Logged once the renewal's confirmation has committed, a moment after the job completes.
    log = logged(
        lambda: processes.log_of(worker),
        rf"renewal\.completed job={job.pk} ",
        timeout=SLOW,
        message="the worker logs the renewal completed",
    )
    assert len(log_lines(log, rf"\[{execution.task_id}\] received")) == 2
    assert len(log_lines(log, rf"renewal\.completed job={job.pk} ")) == 1
    assert (job.parameter, job.retry_count) == ("confirm", 0)
    assert len(child_orders(subscription)) == 1 and len(charges(subscription)) == 1
    assert SubscriptionJob.objects.filter(subscription=subscription).count() == 2  # + the next


def test_periods_that_start_while_past_due_are_skipped_not_charged_in_a_burst(
    processes: Any, env: dict[str, str], settings: Any
) -> None:
    """Every two seconds, and a decline retried twelve seconds later: the periods of those
    twelve seconds are skipped and recorded, and the next charge comes at the next period's
    start.

    The retry waits six periods, as a minute of ten-second periods did: what is checked
    depends on that ratio, not on the length. Two-second periods, not one, leave the test
    nearly a period, after it sees the next charge, to check that no third came with it.
    """
    period, delay = 2, 12  # seconds: the retry comes six periods after the decline
    settings.SUBSCRIPTIONS_RETRY_DELAY = str(delay)
    env = {**env, "SUBSCRIPTIONS_RETRY_DELAY": str(delay)}
    subscription = subscribe("grace", every=f"PT{period}S")
    payments.script_customer(customer="grace", declines=1)
    job = first_job(subscription)
    processes.start(scheduler_command(), env=env, name="scheduler")
    start_worker(processes, env, "renewals", concurrency=2)

    wait_for(status_is(subscription, SubscriptionStatus.PAST_DUE), timeout=SLOW, message="past due")
    wait_for(
        job_is(job, SubscriptionJobStatus.COMPLETED), timeout=SLOW + 90, message="the retry pays"
    )
    (paid,) = child_orders(subscription)
    (skipped,) = SkippedPeriods.objects.filter(subscription=subscription)
    resumes = skipped.last_period + 1
    assert skipped.first_period == 1 and resumes >= 7, "six periods' delay: 1 to 6 skipped"
    assert subscription.period_bounds(resumes - 1)[0] <= paid.confirmed_at
    resumed_at = subscription.period_bounds(resumes)[0]
    assert resumed_at > paid.confirmed_at

    wait_for(lambda: len(charges(subscription)) >= 2, timeout=SLOW, message="the next charge")
    assert [o.period_number for o in child_orders(subscription)][:2] == [0, resumes]
    key = services.idempotency_key(subscription.pk, resumed_at)
    (second,) = GatewayCharge.objects.filter(idempotency_key=key)
    assert second.created_at >= resumed_at, "charged at its period's start, not caught up"
    assert len(charges(subscription)) == 2
