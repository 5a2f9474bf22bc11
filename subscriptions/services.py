"""Subscription writes: create, renew (CreateChildOrder), cancel, expire, retry now.

The admin, the command line and the engine's runner (``subscriptions.scheduled``) all call
these functions, so each rule lives once. Subscription jobs are run by the engine: each
SubscriptionJob row gets one one-off engine job at its action date (``scheduling.api``), and
the engine's claim, duplicate-message guard, heartbeat, reaper and retry rows drive it.

A renewal runs as four steps, and ``parameter`` holds the last one that succeeded:

1. ``price`` the items and 2. ``create_order`` for the period: one transaction that also moves
   the job to PROCESSING, after re-reading the subscription under a row lock (a renewal that
   starts after a cancel committed does nothing);
3. ``charge`` through the gateway with the idempotency key of (subscription, period), then
   record the step: a retry after a crash between the two replays the key and takes nothing;
4. ``confirm`` the order, complete the job and place the next one (or the Expire), in one
   transaction.

Every write to a job is conditional on its optimistic counter (``SubscriptionJob.change``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import F, Max, Subquery, Sum

from scheduling.api import (
    Once,
    PermanentError,
    Policies,
    RunContext,
    jobs_for_row,
    pause,
    run_now,
    schedule_row,
)
from subscriptions import conf, payments
from subscriptions.models import (
    ENDED,
    JOB_PENDING,
    JOB_RUNNABLE,
    RENEWABLE,
    JobAction,
    JobStatus,
    Order,
    OrderStatus,
    Subscription,
    SubscriptionItem,
    SubscriptionJob,
    SubscriptionStatus,
)

logger = logging.getLogger("subscriptions")

#: The steps of a CreateChildOrder run, in order; ``parameter`` holds the last one done.
STEPS = ("price", "create_order", "charge", "confirm")
#: ``parameter`` of a job stopped by a cancel before it ran.
CANCELLED = "cancelled"
#: The engine may retry a few more times than the subscription's own limit, so that the
#: subscription job's retry count (which raises ``PermanentError`` past its maximum) decides.
ENGINE_RETRY_MARGIN = 3


@dataclass(frozen=True)
class ItemSpec:
    """One item of a new subscription, as the command line or a caller gives it."""

    sku: str
    quantity: int
    unit_price: Decimal


def _unflushed_commit() -> None:
    """Let the current transaction commit without waiting for the WAL flush (PostgreSQL).

    Safe for a renewal's own steps: the attempt's completion, which the engine commits
    synchronously afterwards, flushes the log up to and including them (PostgreSQL writes it
    in order), so they are durable before the occurrence counts as done. A database crash
    before that loses only steps the retry redoes anyway: the order by its unique period, the
    charge by its idempotency key, which the gateway committed durably on its side.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")


def _done(parameter: str, step: str) -> bool:
    return parameter in STEPS and STEPS.index(parameter) >= STEPS.index(step)


def idempotency_key(subscription_id: int, period_start: datetime) -> str:
    """The charge's key: one per (subscription, period), whatever job or attempt charges it."""
    return f"subscription:{subscription_id}:period:{period_start.isoformat()}"


def _prefixed(exc: ValidationError, prefix: str) -> ValidationError:
    return ValidationError({f"{prefix}{k}": v for k, v in exc.message_dict.items()})


# --- create ---------------------------------------------------------------------------------


def create_subscription(
    *,
    customer: str,
    items: Sequence[ItemSpec],
    interval: str,
    start: datetime | None,
    end: datetime | None,
    now: datetime,
) -> Subscription:
    """Validate everything, then save the subscription, its items, the parent order and the
    first CreateChildOrder (at the start) in one transaction; nothing is saved on bad input."""
    starts_at = start or now
    subscription = Subscription(
        customer=(customer or "").strip(),
        interval=(interval or "").strip().upper(),
        anchor=starts_at,
        starts_at=starts_at,
        ends_at=end,
        created_at=now,
    )
    errors: dict[str, list[str]] = {}
    try:
        subscription.full_clean()
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if not items:
        errors["item"] = ["at least one item is required"]
    rows = []
    for spec in items:
        item = SubscriptionItem(
            subscription=subscription,
            sku=(spec.sku or "").strip(),
            quantity=spec.quantity,
            unit_price=spec.unit_price,
        )
        try:
            item.full_clean(exclude=["subscription"])
        except ValidationError as exc:
            for field, messages in exc.message_dict.items():
                errors.setdefault(field, []).extend(messages)
        rows.append(item)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        subscription.save()
        for item in rows:
            item.subscription = subscription
        SubscriptionItem.objects.bulk_create(rows)
        start_billing(subscription=subscription, now=now)
    logger.info(
        "subscription.created subscription=%s customer=%s interval=%s",
        subscription.pk,
        subscription.customer,
        subscription.interval,
    )
    return subscription


def start_billing(*, subscription: Subscription, now: datetime) -> SubscriptionJob:
    """The parent order and the first renewal of a saved subscription (also the admin's add)."""
    Order.objects.create(
        subscription=subscription,
        amount=price(subscription),
        status=OrderStatus.PLACED,
        created_at=now,
    )
    number = subscription.first_period
    start, _ = subscription.period_bounds(number)
    return place_job(
        subscription=subscription,
        action=JobAction.CREATE_CHILD_ORDER,
        action_date=max(start, subscription.starts_at),
        period_number=number,
        now=now,
    )


def price(subscription: Subscription) -> Decimal:
    """What one period costs: the sum of quantity x unit price over the items."""
    total = SubscriptionItem.objects.filter(subscription=subscription).aggregate(
        total=Sum(F("quantity") * F("unit_price"))
    )["total"]
    return Decimal(total or 0).quantize(Decimal("0.00001"))


def policies(action: str) -> Policies:
    """The engine policies of a subscription job of ``action``: its retries and their delay."""
    delay = conf.retry_delay(action)
    return Policies(
        max_retries=conf.max_retries(action) + ENGINE_RETRY_MARGIN,
        retry_backoff=delay,
        retry_backoff_max=delay,
        timeout=conf.timeout(),
        note=f"subscriptions: {action}",
    )


def place_job(
    *,
    subscription: Subscription,
    action: str,
    action_date: datetime,
    now: datetime,
    period_number: int | None = None,
) -> SubscriptionJob:
    """Save a subscription job and its engine one-off at ``action_date`` (caller's transaction)."""
    job = SubscriptionJob.objects.create(
        subscription=subscription,
        action=action,
        action_date=action_date,
        time_placed=now,
        last_update=now,
        custom_integer=period_number,
    )
    schedule_row(
        job,
        timing=Once(at=action_date),
        policies=policies(action),
        name=f"subscriptions.SubscriptionJob:{job.pk}",
        now=now,
    )
    return job


# --- run ------------------------------------------------------------------------------------


def run_job(*, job: SubscriptionJob, run: RunContext, clock: Any) -> dict[str, Any]:
    """Run one attempt of a subscription job (the engine's runner calls this).

    A failure moves the job to RETRY (retry count + 1) and re-raises, so the engine retries
    the attempt after the action's delay; past the maximum the job is FAILED, the subscription
    needs attention, and ``PermanentError`` tells the engine to stop.
    """
    runner = {
        JobAction.CREATE_CHILD_ORDER: _create_child_order,
        JobAction.CANCEL: _end_subscription,
        JobAction.EXPIRE: _end_subscription,
    }[JobAction(job.action)]
    try:
        return runner(job, run=run, clock=clock)
    except PermanentError:
        raise
    except Exception as exc:
        _record_failure(job.pk, exc, now=clock())
        raise


def _begin(job: SubscriptionJob, *, attempt: int) -> dict[str, Any] | None:
    """The values that move a job to PROCESSING, or None when this run must do nothing.

    A job already PROCESSING on a first attempt belongs to another engine execution; on a
    later attempt it is this execution's own earlier attempt, which died (killed worker):
    that attempt counts as a failed one.
    """
    if job.status == JobStatus.PROCESSING and attempt <= 1:
        return None
    if job.status not in (JobStatus.ACTIVE, JobStatus.RETRY, JobStatus.PROCESSING):
        return None
    lost = job.status == JobStatus.PROCESSING
    if lost:
        logger.warning("renewal.lost_attempt job=%s parameter=%s", job.pk, job.parameter)
    return {"status": JobStatus.PROCESSING, "retry_count": job.retry_count + int(lost)}


def _lock_subscription(subscription_id: int) -> Subscription:
    return Subscription.objects.select_for_update(no_key=True).get(pk=subscription_id)


def _create_child_order(job: SubscriptionJob, *, run: RunContext, clock: Any) -> dict[str, Any]:
    number = int(job.custom_integer or 0)
    # Steps 1 and 2: price, create the order (and begin) in one transaction.
    with transaction.atomic(durable=True):
        _unflushed_commit()
        subscription = _lock_subscription(job.subscription_id)
        # Read again under the subscription's lock: a cancel that committed after the engine
        # read the row is seen here, and nothing is done.
        job = SubscriptionJob.objects.get(pk=job.pk)
        begin = _begin(job, attempt=run.attempt)
        if begin is None:
            return {"skipped": f"job is {JobStatus(job.status).label}"}
        now = clock()
        if subscription.status not in RENEWABLE and not _done(job.parameter, "charge"):
            _stop_jobs([job], now=now)
            logger.info(
                "renewal.skipped job=%s subscription=%s status=%s",
                job.pk,
                subscription.pk,
                subscription.status,
            )
            return {"skipped": f"subscription is {subscription.status}"}
        start, end = subscription.period_bounds(number)
        if job.parameter:
            logger.info("renewal.resumed job=%s after=%s", job.pk, job.parameter)
        if not _done(job.parameter, "create_order"):
            amount = price(subscription)
            order = Order.objects.filter(subscription=subscription, period_start=start).first()
            if order is None:
                Order.objects.create(
                    subscription=subscription,
                    parent_id=Subquery(
                        Order.objects.filter(
                            subscription=subscription, parent__isnull=True
                        ).values_list("pk", flat=True)[:1]
                    ),
                    period_number=number,
                    period_start=start,
                    period_end=end,
                    amount=amount,
                    status=OrderStatus.PENDING,
                    created_at=now,
                )
            elif order.status == OrderStatus.CONFIRMED:
                # Paid already (by another job for the same period): only finish up.
                begin.update(parameter="charge", custom_text=order.charge_reference)
            begin.setdefault("parameter", "create_order")
            begin["custom_decimal"] = amount
        job.change(now=now, **begin)
    _pause_if_asked(job, "create_order")

    # Step 3: the charge, outside any transaction; the key makes a replay free.
    if not _done(job.parameter, "charge"):
        result = payments.gateway().charge(
            customer=subscription.customer,
            amount=job.custom_decimal or Decimal(0),
            idempotency_key=idempotency_key(subscription.pk, start),
        )
        with transaction.atomic(durable=True):
            _unflushed_commit()
            job.change(now=clock(), parameter="charge", custom_text=result.reference)
        _pause_if_asked(job, "charge")

    # Step 4: confirm, complete, and place what comes next.
    with transaction.atomic(durable=True):
        _unflushed_commit()
        subscription = _lock_subscription(job.subscription_id)
        now = clock()
        Order.objects.filter(
            subscription=subscription, period_start=start, status=OrderStatus.PENDING
        ).update(status=OrderStatus.CONFIRMED, confirmed_at=now, charge_reference=job.custom_text)
        job.change(now=now, status=JobStatus.COMPLETED, parameter="confirm")
        if subscription.status == SubscriptionStatus.NEEDS_ATTENTION:
            Subscription.objects.filter(pk=subscription.pk).update(
                status=SubscriptionStatus.ACTIVE, attention_reason=""
            )
            subscription.status = SubscriptionStatus.ACTIVE
        following = None
        if subscription.status == SubscriptionStatus.ACTIVE:
            following = _place_next(subscription, number + 1, now=now)
    logger.info(
        "renewal.completed job=%s subscription=%s period=%s next=%s",
        job.pk,
        subscription.pk,
        number,
        following.pk if following else "-",
    )
    return {"order_period": number, "charge": job.custom_text}


def _place_next(subscription: Subscription, number: int, *, now: datetime) -> SubscriptionJob:
    start, _ = subscription.period_bounds(number)
    if subscription.ends_at is not None and start >= subscription.ends_at:
        return place_job(
            subscription=subscription,
            action=JobAction.EXPIRE,
            action_date=subscription.ends_at,
            now=now,
        )
    return place_job(
        subscription=subscription,
        action=JobAction.CREATE_CHILD_ORDER,
        action_date=start,
        period_number=number,
        now=now,
    )


def _pause_if_asked(job: SubscriptionJob, step: str) -> None:
    """Test-only: stop after ``step`` until the process is killed (``conf.pause_after_step``)."""
    if conf.pause_after_step() != step:
        return
    logger.warning("renewal.paused job=%s after=%s", job.pk, step)
    while True:
        time.sleep(1)


def _end_subscription(job: SubscriptionJob, *, run: RunContext, clock: Any) -> dict[str, Any]:
    """Cancel (a pending cancel at its period end) or Expire (at the end date)."""
    with transaction.atomic(durable=True):
        subscription = _lock_subscription(job.subscription_id)
        job = SubscriptionJob.objects.get(pk=job.pk)
        begin = _begin(job, attempt=run.attempt)
        if begin is None:
            return {"skipped": f"job is {JobStatus(job.status).label}"}
        now = clock()
        if job.action == JobAction.CANCEL:
            expected: tuple[str, ...] = (SubscriptionStatus.PENDING_CANCEL,)
            new_status = SubscriptionStatus.CANCELLED
        else:
            expected = (*RENEWABLE, SubscriptionStatus.PENDING_CANCEL)
            new_status = SubscriptionStatus.EXPIRED
        if subscription.status not in expected:
            _stop_jobs([job], now=now)
            return {"skipped": f"subscription is {subscription.status}"}
        others = list(
            SubscriptionJob.objects.filter(
                subscription=subscription, status__in=JOB_PENDING
            ).exclude(pk=job.pk)
        )
        stopped = _stop_jobs(others, now=now)
        subscription.status = new_status
        subscription.cancelled_at = now if new_status == SubscriptionStatus.CANCELLED else None
        subscription.save(update_fields=["status", "cancelled_at", "updated_at"])
        job.change(now=now, status=JobStatus.COMPLETED, parameter="done")
    _pause_engine_jobs(stopped, reason=f"subscription {subscription.pk} {new_status}")
    logger.info("subscription.%s subscription=%s job=%s", new_status, subscription.pk, job.pk)
    return {"subscription": new_status}


def _record_failure(job_id: int, exc: BaseException, *, now: datetime) -> None:
    """RETRY with retry count + 1, or FAILED past the maximum (then raise ``PermanentError``)."""
    failed = False
    with transaction.atomic(durable=True):
        job = SubscriptionJob.objects.select_related("subscription").get(pk=job_id)
        if job.status not in JOB_RUNNABLE:
            return  # finished meanwhile (cancelled, or completed by another run)
        maximum = conf.max_retries(job.action)
        error = f"{type(exc).__name__}: {exc}"
        if job.retry_count < maximum:
            job.change(now=now, status=JobStatus.RETRY, retry_count=job.retry_count + 1)
        else:
            failed = True
            values: dict[str, Any] = {"status": JobStatus.FAILED}
            if job.action == JobAction.CREATE_CHILD_ORDER and not _done(job.parameter, "charge"):
                # Nothing was paid: the period has no order, and a retry-now starts over.
                _delete_unpaid_order(job)
                if job.parameter:
                    values["parameter"] = "price"
            job.change(now=now, **values)
            reason = f"{job.action} job {job.pk} failed after {job.retry_count} retries: {error}"[
                :1000
            ]
            Subscription.objects.filter(pk=job.subscription_id, status__in=RENEWABLE).update(
                status=SubscriptionStatus.NEEDS_ATTENTION, attention_reason=reason
            )
    if failed:
        logger.error("renewal.failed job=%s retries=%s error=%s", job_id, job.retry_count, error)
        raise PermanentError(error) from exc
    logger.warning("renewal.retry job=%s retry_count=%s error=%s", job_id, job.retry_count, error)


def _delete_unpaid_order(job: SubscriptionJob) -> None:
    if job.custom_integer is None:
        return
    start, _ = job.subscription.period_bounds(job.custom_integer)
    Order.objects.filter(
        subscription_id=job.subscription_id, period_start=start, status=OrderStatus.PENDING
    ).delete()


def _stop_jobs(jobs: Sequence[SubscriptionJob], *, now: datetime) -> list[SubscriptionJob]:
    """Cancel jobs that have not charged: COMPLETED with ``parameter`` "cancelled", and their
    unpaid orders deleted. A job that has charged is left to confirm what was paid."""
    stopped = []
    for job in jobs:
        if _done(job.parameter, "charge"):
            continue
        if job.action == JobAction.CREATE_CHILD_ORDER:
            _delete_unpaid_order(job)
        job.change(now=now, status=JobStatus.COMPLETED, parameter=CANCELLED)
        stopped.append(job)
    return stopped


def _pause_engine_jobs(jobs: Sequence[SubscriptionJob], *, reason: str) -> None:
    for job in jobs:
        for engine_job in jobs_for_row(job):
            pause(engine_job, reason=reason)


# --- operators ------------------------------------------------------------------------------


def get_subscription(subscription_id: Any) -> Subscription:
    try:
        return Subscription.objects.get(pk=int(subscription_id))
    except (Subscription.DoesNotExist, TypeError, ValueError):
        raise ValidationError(
            {"subscription": f"no subscription with id {subscription_id}"}
        ) from None


def cancel_subscription(
    *, subscription_id: int, at_period_end: bool, now: datetime
) -> Subscription:
    """End a subscription now, or at the end of the current period (pending cancel).

    "The current period" is the last one with an order (paid, or being paid by a renewal
    already under way); with none ending in the future, the cancel takes effect now.

    Its future jobs are cancelled in the same transaction, under the subscription's row lock,
    so a renewal either committed its order before the cancel or finds it and does nothing.
    """
    get_subscription(subscription_id)
    with transaction.atomic():
        subscription = _lock_subscription(subscription_id)
        if subscription.status in ENDED:
            raise ValidationError(
                {"subscription": f"{subscription.pk} is already {subscription.status}"}
            )
        if at_period_end and subscription.status == SubscriptionStatus.PENDING_CANCEL:
            raise ValidationError({"subscription": f"{subscription.pk} is already pending cancel"})
        pending = list(
            SubscriptionJob.objects.filter(subscription=subscription, status__in=JOB_PENDING)
        )
        stopped = _stop_jobs(pending, now=now)
        paid_until = Order.objects.filter(
            subscription=subscription, parent__isnull=False
        ).aggregate(end=Max("period_end"))["end"]
        if subscription.ends_at is not None and paid_until is not None:
            paid_until = min(paid_until, subscription.ends_at)
        if at_period_end and paid_until is not None and paid_until > now:
            place_job(
                subscription=subscription,
                action=JobAction.CANCEL,
                action_date=paid_until,
                now=now,
            )
            subscription.status = SubscriptionStatus.PENDING_CANCEL
        else:
            subscription.status = SubscriptionStatus.CANCELLED
            subscription.cancelled_at = now
        subscription.save(update_fields=["status", "cancelled_at", "updated_at"])
        transaction.on_commit(
            lambda: _pause_engine_jobs(stopped, reason=f"subscription {subscription_id} cancelled")
        )
    logger.info(
        "subscription.cancel subscription=%s at_period_end=%s jobs_cancelled=%s",
        subscription.pk,
        at_period_end,
        len(stopped),
    )
    return subscription


def retry_job_now(*, job_id: int, now: datetime) -> SubscriptionJob:
    """Run a failed job once more, now (its retry count is kept: one more failure fails it)."""
    job = SubscriptionJob.objects.filter(pk=job_id).first()
    if job is None:
        raise ValidationError({"job": f"no subscription job with id {job_id}"})
    if job.status != JobStatus.FAILED:
        raise ValidationError(
            {"job": f"{job.pk} is {JobStatus(job.status).label}; only failed jobs can be retried"}
        )
    with transaction.atomic():
        job.change(now=now, status=JobStatus.ACTIVE)
        engine_jobs = jobs_for_row(job)
        if engine_jobs:
            transaction.on_commit(lambda: run_now(engine_jobs[-1]))
        else:
            schedule_row(job, timing=Once(at=now), policies=policies(job.action), now=now)
    logger.info("subscription_job.retry_now job=%s", job.pk)
    return job


def retry_subscription_now(*, subscription_id: int, now: datetime) -> int:
    """Retry every failed job of a subscription now; returns how many."""
    subscription = get_subscription(subscription_id)
    failed = subscription.jobs.filter(status=JobStatus.FAILED).values_list("pk", flat=True)
    return sum(1 for pk in list(failed) if retry_job_now(job_id=pk, now=now))


def parse_price(raw: str, *, field: str = "price") -> Decimal:
    try:
        value = Decimal(str(raw).strip())
    except InvalidOperation:
        raise ValidationError({field: f"{raw!r} is not a decimal number such as 9.90"}) from None
    if not value.is_finite():
        raise ValidationError({field: f"{raw!r} is not a finite number"})
    return value
