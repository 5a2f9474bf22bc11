"""Subscription writes: create, add items, cancel, expire, record a failure, retry now.

The admin, the command line and the batch runner (``subscriptions.renewals``) all call these
functions, so each rule lives once. What a period costs and which items may be added are
``subscriptions.pricing``'s; where a job goes, and what follows a paid renewal, are
``subscriptions.placing``'s: every job placed joins the open due batch of its action date
(``subscriptions.batches``), whose one-off engine job runs it with the rest of the batch.

Every write to a job is conditional on its optimistic counter (``SubscriptionJob.change``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from scheduling.api import jobs_for_row, pause, row_locks
from subscriptions import batches, conf, placing, pricing
from subscriptions.models import (
    ENDED,
    JOB_PENDING,
    JOB_RUNNABLE,
    RENEWABLE,
    JobAction,
    JobStep,
    NeedsOperator,
    Order,
    OrderLine,
    OrderStatus,
    Subscription,
    SubscriptionItem,
    SubscriptionJob,
    SubscriptionJobStatus,
    SubscriptionStatus,
    UnhandledAction,
    one_line,
    step_done,
)

logger = logging.getLogger("subscriptions")

#: What a Cancel or an Expire job does: the subscription statuses it acts on, and the status
#: it leaves. An action that is neither these nor CreateChildOrder has no handler, and a job
#: with it fails at once (``UnhandledAction``), never silently ending a subscription.
ENDINGS: dict[str, tuple[tuple[str, ...], SubscriptionStatus]] = {
    JobAction.CANCEL: ((SubscriptionStatus.PENDING_CANCEL,), SubscriptionStatus.CANCELLED),
    JobAction.EXPIRE: ((*RENEWABLE, SubscriptionStatus.PENDING_CANCEL), SubscriptionStatus.EXPIRED),
}


done = step_done


def idempotency_key(subscription_id: int, period_start: datetime) -> str:
    """The charge's key: one per (subscription, period), whatever job or attempt charges it."""
    return f"subscription:{subscription_id}:period:{period_start.isoformat()}"


def _prefixed(exc: ValidationError, prefix: str) -> ValidationError:
    return ValidationError({f"{prefix}{k}": v for k, v in exc.message_dict.items()})


# --- create ---------------------------------------------------------------------------------


def create_subscription(
    *,
    customer: str,
    items: Sequence[pricing.ItemSpec],
    interval: str,
    start: datetime | None,
    end: datetime | None,
    now: datetime,
    by: Any = None,
) -> Subscription:
    """Validate everything, then save the subscription, its items, the parent order and the
    first CreateChildOrder (at the start) in one transaction; nothing is saved on bad input.
    ``by`` is who asks (a user, or ``scheduling.api.command_line_actor``), named by the audit
    trail of an engine job its first renewal's batch makes (``system`` when None)."""
    starts_at = start or now
    subscription = Subscription(
        customer=(customer or "").strip(),
        interval=(interval or "").strip().upper(),
        anchor=starts_at,
        starts_at=starts_at,
        ends_at=end,
        created_at=now,
    )
    errors: dict[str, list[Any]] = {}
    try:
        subscription.full_clean()
    except ValidationError as exc:
        # Kept as errors, not texts (as the items' below).
        for field, messages in exc.error_dict.items():
            errors.setdefault(field, []).extend(messages)
    if not items:
        errors["item"] = ["at least one item is required"]
    rows: list[SubscriptionItem] = []
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
            # Kept as errors, not texts: a reason Django's validator and the model's rule both
            # give is then said once, in the model's words (``scheduling.api.error_line``).
            for field, messages in exc.error_dict.items():
                errors.setdefault(field, []).extend(messages)
        rows.append(item)
    if not errors:
        try:
            pricing.check_items_fit(existing=[], adding=rows)
        except ValidationError as exc:
            errors.update(exc.error_dict)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        subscription.save()
        for item in rows:
            item.subscription = subscription
            item.applies_from = subscription.first_period
        SubscriptionItem.objects.bulk_create(rows)
        start_billing(subscription=subscription, now=now, by=by)
    logger.info(
        "subscription.created subscription=%s customer=%s interval=%s",
        subscription.pk,
        subscription.customer,
        subscription.interval,
    )
    return subscription


def add_item(*, item: SubscriptionItem, now: datetime) -> SubscriptionItem:
    """Save a new item of a saved subscription; it applies from the subscription's next period
    (``next_period_for_changes``), so no period already begun, ordered or charged changes.

    Under the subscription's row lock, which a renewal takes before it prices: either the
    renewal priced its period first (and the item applies from the one after), or it waits
    for this commit and prices the period this item does not belong to without it.
    """
    with transaction.atomic():
        subscription = _lock_subscription(item.subscription_id)
        item.subscription = subscription
        item.applies_from = pricing.next_period_for_changes(subscription=subscription, now=now)
        item.full_clean()
        pricing.check_items_fit(existing=list(subscription.items.all()), adding=[item])
        item.save()
    logger.info(
        "subscription.item_added subscription=%s sku=%s applies_from=%s",
        subscription.pk,
        item.sku,
        item.applies_from,
    )
    return item


def start_billing(*, subscription: Subscription, now: datetime, by: Any = None) -> SubscriptionJob:
    """The parent order (what the first period costs, with its lines) and the first renewal
    of a saved subscription (also the admin's add).

    The first renewal is for ``Subscription.first_period``: for a start in the past, the
    period that contains the subscription's creation, never the periods before it.
    """
    number = subscription.first_period
    priced = pricing.price_periods([(subscription.pk, number)])[(subscription.pk, number)]
    parent = Order.objects.create(
        subscription=subscription,
        amount=priced.amount,
        status=OrderStatus.PLACED,
        created_at=now,
    )
    OrderLine.objects.bulk_create(priced.order_lines(parent))
    start, _ = subscription.period_bounds(number)
    return placing.place_job(
        subscription=subscription,
        action=JobAction.CREATE_CHILD_ORDER,
        action_date=max(start, subscription.starts_at),
        period_number=number,
        now=now,
        by=by,
    )


# --- run: what one job's turn in its batch does, apart from the set-based renewal steps ----


def _lock_subscription(subscription_id: int) -> Subscription:
    return Subscription.objects.select_for_update(**row_locks(no_key=True)).get(pk=subscription_id)


def end_subscription(job: SubscriptionJob, *, clock: Callable[[], datetime]) -> str:
    """Run a Cancel (a pending cancel at its period end) or an Expire (at the end date);
    returns what happened, in a word."""
    with transaction.atomic(durable=True):
        subscription = _lock_subscription(job.subscription_id)
        job = SubscriptionJob.objects.get(pk=job.pk)  # again, under the subscription's lock
        if job.status not in JOB_RUNNABLE:
            return "skipped"
        now = clock()
        if job.action not in ENDINGS:
            raise UnhandledAction(f"no handler for action {job.action!r} of job {job.pk}")
        expected, new_status = ENDINGS[job.action]
        if subscription.status not in expected:
            stop_jobs([job], now=now)
            return "skipped"
        others = list(
            SubscriptionJob.objects.filter(
                subscription=subscription, status__in=JOB_PENDING
            ).exclude(pk=job.pk)
        )
        stopped = stop_jobs(others, now=now)
        subscription.status = new_status
        subscription.cancelled_at = now if new_status == SubscriptionStatus.CANCELLED else None
        subscription.save(update_fields=["status", "cancelled_at", "updated_at"])
        job.change(now=now, status=SubscriptionJobStatus.COMPLETED, parameter=JobStep.DONE)
    _pause_engine_jobs(stopped, reason=f"subscription {subscription.pk} {new_status}")
    logger.info("subscription.%s subscription=%s job=%s", new_status, subscription.pk, job.pk)
    return str(new_status)


def record_failure(job_id: int, exc: BaseException, *, now: datetime) -> str:
    """A failed attempt of one job: RETRY with retry count + 1, placed again after the
    action's delay, its subscription ``past_due`` with the error; or FAILED past the maximum
    (at once for what no retry mends, ``NeedsOperator``: an action no code handles, a charge
    the gateway took for another amount), with its subscription flagged as needing
    attention. The error is kept on the job (``last_error``) and on the subscription
    (``attention_reason``). Returns "retry", "failed", or "finished" (done meanwhile:
    nothing to record)."""
    subscription_id = SubscriptionJob.objects.values_list("subscription_id", flat=True).get(
        pk=job_id
    )
    with transaction.atomic(durable=True):
        # The subscription's lock first, as cancel and every run take them.
        _lock_subscription(subscription_id)
        job = SubscriptionJob.objects.select_for_update(**row_locks(no_key=True)).get(pk=job_id)
        if job.status not in JOB_RUNNABLE:
            return "finished"  # cancelled, or completed by another run, meanwhile
        error = describe_error(exc)
        retryable = not isinstance(exc, NeedsOperator)
        if retryable and job.retry_count < conf.max_retries(job.action):
            later = now + timedelta(seconds=conf.retry_delay(job.action))
            _move(
                job,
                at=later,
                now=now,
                status=SubscriptionJobStatus.RETRY,
                retry_count=job.retry_count + 1,
                last_error=error,
            )
            reason = (
                f"{error} ({job.action} job {job.pk} is retried ({job.retry_count} of "
                f"{conf.max_retries(job.action)}) at {later:%Y-%m-%d %H:%M:%S} UTC)"
            )
            Subscription.objects.filter(pk=job.subscription_id, status__in=RENEWABLE).exclude(
                status=SubscriptionStatus.NEEDS_ATTENTION
            ).update(status=SubscriptionStatus.PAST_DUE, attention_reason=_reason(reason))
            outcome = "retry"
        else:
            values: dict[str, Any] = {"status": SubscriptionJobStatus.FAILED, "last_error": error}
            if job.action == JobAction.CREATE_CHILD_ORDER and not done(
                job.parameter, JobStep.CHARGE
            ):
                # Nothing was paid: the period has no order, and a retry-now starts over.
                _delete_unpaid_order(job)
                if job.parameter:
                    values["parameter"] = JobStep.PRICE
            job.change(now=now, **values)
            reason = f"{job.action} job {job.pk} failed after {job.retry_count} retries: {error}"
            Subscription.objects.filter(pk=job.subscription_id, status__in=RENEWABLE).update(
                status=SubscriptionStatus.NEEDS_ATTENTION, attention_reason=_reason(reason)
            )
            outcome = "failed"
    if outcome == "failed":
        logger.error("renewal.failed job=%s retries=%s error=%s", job_id, job.retry_count, error)
    else:
        logger.warning(
            "renewal.retry job=%s retry_count=%s error=%s", job_id, job.retry_count, error
        )
    return outcome


#: The longest error kept on a job or a subscription.
MAX_REASON = 1000


def describe_error(exc: BaseException) -> str:
    """An attempt's error as it is kept and shown: its kind and its message (a decline says
    the gateway's reply), as one line of at most ``MAX_REASON`` characters, whatever the
    message held (a database error's several lines, a gateway's control characters)."""
    return one_line(f"{type(exc).__name__}: {exc}", limit=MAX_REASON)


def _reason(text: str) -> str:
    return one_line(text, limit=MAX_REASON)


def _move(
    job: SubscriptionJob, *, at: datetime, now: datetime, by: Any = None, **values: Any
) -> None:
    """Change the job (conditionally) and put it in the open batch of ``at`` (one ``by``
    opens, if none is open: ``batches.open_batch``)."""
    batch_id = batches.open_batch(at, batches.block_of(job.subscription_id), now=now, by=by)
    job.change(now=now, action_date=at, batch_id=batch_id, **values)
    batches.attach([job], now=now, by=by)


def _delete_unpaid_order(job: SubscriptionJob) -> None:
    if job.custom_integer is None:
        return
    Order.objects.filter(
        subscription_id=job.subscription_id,
        parent__isnull=False,
        period_number=job.custom_integer,
        status=OrderStatus.PENDING,
    ).delete()


def stop_jobs(jobs: Sequence[SubscriptionJob], *, now: datetime) -> list[SubscriptionJob]:
    """Cancel jobs that have not charged: COMPLETED with ``parameter`` "cancelled", and their
    unpaid orders deleted. A job that has charged is left to confirm what was paid."""
    stopped = []
    for job in jobs:
        if done(job.parameter, JobStep.CHARGE):
            continue
        if job.action == JobAction.CREATE_CHILD_ORDER:
            _delete_unpaid_order(job)
        job.change(now=now, status=SubscriptionJobStatus.COMPLETED, parameter=JobStep.CANCELLED)
        stopped.append(job)
    return stopped


def _pause_engine_jobs(jobs: Sequence[SubscriptionJob], *, reason: str, by: Any = None) -> None:
    """Pause the engine jobs that run ``jobs``, each pause in its trail by ``by``."""
    for job in jobs:
        for engine_job in jobs_for_row(job):
            pause(engine_job, reason=reason, by=by)


# --- operators ------------------------------------------------------------------------------


def get_subscription(subscription_id: Any) -> Subscription:
    shown = str(subscription_id)
    if not shown.isascii() or not shown.lstrip("-").isdigit():
        shown = repr(subscription_id)  # whatever was typed, on one line
    try:
        return Subscription.objects.get(pk=int(subscription_id))
    except (Subscription.DoesNotExist, TypeError, ValueError, OverflowError):
        raise ValidationError({"subscription": f"no subscription with id {shown}"}) from None


def cancel_subscription(
    *, subscription_id: int, at_period_end: bool, now: datetime, by: Any = None
) -> Subscription:
    """End a subscription now, or at the end of the current period (pending cancel).

    "The current period" is the last one with an order (paid, or being paid by a renewal
    already under way); with none ending in the future, the cancel takes effect now.

    Its future jobs are cancelled in the same transaction, under the subscription's row lock,
    so a renewal either committed its order before the cancel or finds it and does nothing.
    ``by`` is who asks: the engine jobs it pauses, and one it makes for a pending cancel's
    batch, name them in their audit trail (``system`` when None).
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
        stopped = stop_jobs(pending, now=now)
        paid_until = Order.objects.filter(
            subscription=subscription, parent__isnull=False
        ).aggregate(end=Max("period_end"))["end"]
        if subscription.ends_at is not None and paid_until is not None:
            paid_until = min(paid_until, subscription.ends_at)
        if at_period_end and paid_until is not None and paid_until > now:
            placing.place_job(
                subscription=subscription,
                action=JobAction.CANCEL,
                action_date=paid_until,
                now=now,
                by=by,
            )
            subscription.status = SubscriptionStatus.PENDING_CANCEL
        else:
            subscription.status = SubscriptionStatus.CANCELLED
            subscription.cancelled_at = now
        subscription.save(update_fields=["status", "cancelled_at", "updated_at"])
        transaction.on_commit(
            lambda: _pause_engine_jobs(
                stopped, reason=f"subscription {subscription_id} cancelled", by=by
            )
        )
    logger.info(
        "subscription.cancel subscription=%s at_period_end=%s jobs_cancelled=%s",
        subscription.pk,
        at_period_end,
        len(stopped),
    )
    return subscription


def edit_job(*, job: SubscriptionJob, values: dict[str, Any], now: datetime) -> SubscriptionJob:
    """An operator's edit of a job read with its optimistic counter: only the fields
    ``SubscriptionJob.operator_fields`` names, validated, written conditionally on that
    counter (``StaleJob`` when the job moved on since it was read).

    A renewal's step, period and charge reference are never edited by hand: money depends on
    each (``models.OPERATOR_FIELDS`` says why), so they are refused here, whoever asks.
    """
    allowed = job.operator_fields()
    refused = sorted(set(values) - set(allowed))
    if refused:
        raise ValidationError(
            {
                name: f"is not edited by hand on a {job.action} job (editable: "
                f"{', '.join(allowed) or 'nothing'})"
                for name in refused
            }
        )
    for name, value in values.items():
        setattr(job, name, value)
    others = [f.name for f in SubscriptionJob._meta.fields if f.name not in values]
    job.full_clean(exclude=others, validate_unique=False, validate_constraints=False)
    job.change(now=now, **values)
    logger.info("subscription_job.edited job=%s fields=%s", job.pk, ",".join(sorted(values)))
    return job


def retry_job_now(*, job_id: int, now: datetime, by: Any = None) -> SubscriptionJob:
    """Run a failed job once more, now (its retry count is kept: one more failure fails it).
    ``by`` is who asks, named by the audit trail of the engine job of a batch this opens
    (``system`` when None)."""
    job = SubscriptionJob.objects.filter(pk=job_id).first()
    if job is None:
        raise ValidationError({"job": f"no subscription job with id {job_id}"})
    if job.status != SubscriptionJobStatus.FAILED:
        label = SubscriptionJobStatus(job.status).label
        raise ValidationError({"job": f"{job.pk} is {label}; only failed jobs can be retried"})
    with transaction.atomic():
        _move(job, at=now, now=now, by=by, status=SubscriptionJobStatus.ACTIVE)
    logger.info("subscription_job.retry_now job=%s", job.pk)
    return job


def retry_subscription_now(*, subscription_id: int, now: datetime, by: Any = None) -> int:
    """Retry every failed job of a subscription now; returns how many (``retry_job_now``'s
    ``by``)."""
    subscription = get_subscription(subscription_id)
    failed = subscription.jobs.filter(status=SubscriptionJobStatus.FAILED).values_list(
        "pk", flat=True
    )
    return sum(1 for pk in list(failed) if retry_job_now(job_id=pk, now=now, by=by))
