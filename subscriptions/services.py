"""Subscription writes: create, place jobs, cancel, expire, record a failure, retry now.

The admin, the command line and the batch runner (``subscriptions.renewals``) all call these
functions, so each rule lives once. Subscription jobs reach the engine through due batches
(``subscriptions.batches``): every job placed here joins the open batch of its action date,
whose one-off engine job runs it with the rest of the batch.

Every write to a job is conditional on its optimistic counter (``SubscriptionJob.change``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from scheduling.api import jobs_for_row, pause
from subscriptions import batches, conf, periods
from subscriptions.models import (
    ENDED,
    FAILING,
    JOB_PENDING,
    JOB_RUNNABLE,
    MAX_ITEMS,
    MAX_PERIOD_AMOUNT,
    RENEWABLE,
    JobAction,
    JobStep,
    NeedsOperator,
    Order,
    OrderLine,
    OrderStatus,
    SkippedPeriods,
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


@dataclass(frozen=True)
class ItemSpec:
    """One item: of a new subscription, as the command line or a caller gives it, or of a
    period as priced (``Priced``)."""

    sku: str
    quantity: int
    unit_price: Decimal


@dataclass(frozen=True)
class Priced:
    """What one period of a subscription costs: the items in force for it, and their sum."""

    amount: Decimal
    lines: tuple[ItemSpec, ...]

    def order_lines(self, order: Order) -> list[OrderLine]:
        """Unsaved lines of ``order``, one per item priced."""
        return [
            OrderLine(order=order, sku=i.sku, quantity=i.quantity, unit_price=i.unit_price)
            for i in self.lines
        ]


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
            check_items_fit(existing=[], adding=rows)
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
        start_billing(subscription=subscription, now=now)
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
        item.applies_from = next_period_for_changes(subscription=subscription, now=now)
        item.full_clean()
        check_items_fit(existing=list(subscription.items.all()), adding=[item])
        item.save()
    logger.info(
        "subscription.item_added subscription=%s sku=%s applies_from=%s",
        subscription.pk,
        item.sku,
        item.applies_from,
    )
    return item


def check_items_fit(
    *, existing: Sequence[SubscriptionItem], adding: Sequence[SubscriptionItem]
) -> None:
    """Refuse items that would give a subscription more than ``MAX_ITEMS`` items, or make a
    period cost more than ``MAX_PERIOD_AMOUNT`` (the command line, the admin's items and
    ``add_item`` all ask here).

    Items are never removed, and each applies from its period on, so the periods to come cost
    the sum of every item: that sum is what must fit an order's amount.
    """
    items = [*existing, *adding]
    if len(items) > MAX_ITEMS:
        raise ValidationError(
            {"item": f"{len(items)} items; a subscription has at most {MAX_ITEMS}"}
        )
    total = sum(
        (i.amount for i in items if i.quantity is not None and i.unit_price is not None),
        Decimal(0),
    )
    if total > MAX_PERIOD_AMOUNT:
        raise ValidationError(
            {
                "item": f"the items come to {total} a period; one period costs at most "
                f"{MAX_PERIOD_AMOUNT:,}"
            }
        )


def start_billing(*, subscription: Subscription, now: datetime) -> SubscriptionJob:
    """The parent order (what the first period costs, with its lines) and the first renewal
    of a saved subscription (also the admin's add).

    The first renewal is for ``Subscription.first_period``: for a start in the past, the
    period that contains the subscription's creation, never the periods before it.
    """
    number = subscription.first_period
    priced = price_periods([(subscription.pk, number)])[(subscription.pk, number)]
    parent = Order.objects.create(
        subscription=subscription,
        amount=priced.amount,
        status=OrderStatus.PLACED,
        created_at=now,
    )
    OrderLine.objects.bulk_create(priced.order_lines(parent))
    start, _ = subscription.period_bounds(number)
    return place_job(
        subscription=subscription,
        action=JobAction.CREATE_CHILD_ORDER,
        action_date=max(start, subscription.starts_at),
        period_number=number,
        now=now,
    )


def price_periods(wanted: Iterable[tuple[int, int]]) -> dict[tuple[int, int], Priced]:
    """What each (subscription id, period number) costs: its items in force for that period
    (``applies_from`` at or before it), with the sum of quantity x unit price, in one query.

    This is the only place an amount is computed; a child order stores it with its lines when
    it is created, and the charge takes the order's amount.
    """
    wanted = set(wanted)
    items: dict[int, list[SubscriptionItem]] = {}
    for item in SubscriptionItem.objects.filter(
        subscription_id__in={pk for pk, _ in wanted}
    ).order_by("pk"):
        items.setdefault(item.subscription_id, []).append(item)
    priced = {}
    for pk, number in wanted:
        lines = tuple(
            ItemSpec(i.sku, i.quantity, i.unit_price)
            for i in items.get(pk, [])
            if i.in_force(number)
        )
        total = sum((line.unit_price * line.quantity for line in lines), Decimal(0))
        priced[(pk, number)] = Priced(total.quantize(Decimal("0.00001")), lines)
    return priced


def next_period_for_changes(*, subscription: Subscription, now: datetime) -> int:
    """The first period a change made to ``subscription``'s items at ``now`` applies to.

    Before billing starts (the subscription is being created), its first period. Once it
    is live, the period after the last one that has begun or has an order: a period under
    way, ordered or charged keeps the items it was priced with.
    """
    first = subscription.first_period
    if not Order.objects.filter(subscription=subscription, parent__isnull=True).exists():
        return first
    last = first - 1
    if subscription.period_bounds(first)[0] <= now:
        last = periods.period_containing(subscription.anchor, subscription.period_interval, now)
    ordered = Order.objects.filter(subscription=subscription, parent__isnull=False).aggregate(
        last=Max("period_number")
    )["last"]
    if ordered is not None:
        last = max(last, ordered)
    return last + 1


def place_job(
    *,
    subscription: Subscription,
    action: str,
    action_date: datetime,
    now: datetime,
    period_number: int | None = None,
) -> SubscriptionJob:
    """Save one subscription job in the open batch of its action date (caller's transaction)."""
    (job,) = place_jobs(
        [
            SubscriptionJob(
                subscription=subscription,
                action=action,
                action_date=action_date,
                custom_integer=period_number,
            )
        ],
        now=now,
    )
    return job


def place_jobs(jobs: Sequence[SubscriptionJob], *, now: datetime) -> list[SubscriptionJob]:
    """Save unsaved jobs, each in the open batch of its action date (caller's transaction)."""
    for job in jobs:
        job.time_placed = job.last_update = now
    batches.assign(jobs, now=now)
    saved = SubscriptionJob.objects.bulk_create(jobs)
    batches.attach(saved, now=now)
    return saved


@dataclass(frozen=True)
class Paid:
    """A renewal just confirmed, for placing what comes after it (``place_next``)."""

    subscription: Subscription
    number: int  # the period it paid for
    next_start: datetime  # the start of the period after it
    was: str  # the subscription's status until this renewal confirmed


def place_next(paid: Sequence[Paid], *, now: datetime) -> list[SubscriptionJob]:
    """After confirmed renewals: for each, the CreateChildOrder of the period after the one
    it paid, or the Expire when that period starts at or after the end date.

    A subscription that was failing (past due, or needing attention) until this renewal does
    not catch up: the periods that started while it failed are skipped and recorded
    (``skip_while_failing``), and it resumes with the first period that starts after ``now``.
    One that was active catches up period by period, as before: nothing refused its money.
    """
    jobs = []
    for renewal in paid:
        subscription = renewal.subscription
        number, start = renewal.number + 1, renewal.next_start
        if renewal.was in FAILING and start <= now:
            number, start = skip_while_failing(renewal, now=now)
        if subscription.ends_at is not None and start >= subscription.ends_at:
            jobs.append(
                SubscriptionJob(
                    subscription=subscription,
                    action=JobAction.EXPIRE,
                    action_date=subscription.ends_at,
                )
            )
        else:
            jobs.append(
                SubscriptionJob(
                    subscription=subscription,
                    action=JobAction.CREATE_CHILD_ORDER,
                    action_date=start,
                    custom_integer=number,
                )
            )
    return place_jobs(jobs, now=now) if jobs else []


def skip_while_failing(renewal: Paid, *, now: datetime) -> tuple[int, datetime]:
    """The period a subscription that was failing resumes with, paid up at ``now``: the first
    that starts after ``now``. The periods from the one after the paid period up to it (those
    before the end date) are recorded as skipped; none gets an order or a charge. Returns the
    resuming period's number and start (caller's transaction).
    """
    subscription = renewal.subscription
    anchor, interval = subscription.anchor, subscription.period_interval
    resumes = periods.period_containing(anchor, interval, now) + 1
    last = resumes - 1
    ends = periods.count_periods(anchor, interval, subscription.ends_at)
    if ends is not None:
        last = min(last, ends - 1)
    first = renewal.number + 1
    if last >= first:
        until = subscription.period_bounds(last)[1]
        if subscription.ends_at is not None:
            until = min(until, subscription.ends_at)
        SkippedPeriods.objects.create(
            subscription=subscription,
            first_period=first,
            last_period=last,
            starts_at=renewal.next_start,
            ends_at=until,
            reason=(
                f"{SubscriptionStatus(renewal.was).label}: period {renewal.number} was paid "
                f"at {now:%Y-%m-%d %H:%M:%S} UTC, after the periods that started meanwhile"
            ),
            created_at=now,
        )
        logger.info(
            "renewal.periods_skipped subscription=%s first=%s last=%s resumes=%s",
            subscription.pk,
            first,
            last,
            resumes,
        )
    return resumes, subscription.period_bounds(resumes)[0]


# --- run: what one job's turn in its batch does, apart from the set-based renewal steps ----


def _lock_subscription(subscription_id: int) -> Subscription:
    return Subscription.objects.select_for_update(no_key=True).get(pk=subscription_id)


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
        job = SubscriptionJob.objects.select_for_update(no_key=True).get(pk=job_id)
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


def _move(job: SubscriptionJob, *, at: datetime, now: datetime, **values: Any) -> None:
    """Change the job (conditionally) and put it in the open batch of ``at``."""
    batch_id = batches.open_batch(at, batches.block_of(job.subscription_id), now=now)
    job.change(now=now, action_date=at, batch_id=batch_id, **values)
    batches.attach([job], now=now)


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


def _pause_engine_jobs(jobs: Sequence[SubscriptionJob], *, reason: str) -> None:
    for job in jobs:
        for engine_job in jobs_for_row(job):
            pause(engine_job, reason=reason)


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
        stopped = stop_jobs(pending, now=now)
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


def retry_job_now(*, job_id: int, now: datetime) -> SubscriptionJob:
    """Run a failed job once more, now (its retry count is kept: one more failure fails it)."""
    job = SubscriptionJob.objects.filter(pk=job_id).first()
    if job is None:
        raise ValidationError({"job": f"no subscription job with id {job_id}"})
    if job.status != SubscriptionJobStatus.FAILED:
        label = SubscriptionJobStatus(job.status).label
        raise ValidationError({"job": f"{job.pk} is {label}; only failed jobs can be retried"})
    with transaction.atomic():
        _move(job, at=now, now=now, status=SubscriptionJobStatus.ACTIVE)
    logger.info("subscription_job.retry_now job=%s", job.pk)
    return job


def retry_subscription_now(*, subscription_id: int, now: datetime) -> int:
    """Retry every failed job of a subscription now; returns how many."""
    subscription = get_subscription(subscription_id)
    failed = subscription.jobs.filter(status=SubscriptionJobStatus.FAILED).values_list(
        "pk", flat=True
    )
    return sum(1 for pk in list(failed) if retry_job_now(job_id=pk, now=now))


def parse_price(raw: str, *, field: str = "price") -> Decimal:
    try:
        value = Decimal(str(raw).strip())
    except InvalidOperation:
        raise ValidationError({field: f"{raw!r} is not a decimal number such as 9.90"}) from None
    if not value.is_finite():
        raise ValidationError({field: f"{raw!r} is not a finite number"})
    return value
