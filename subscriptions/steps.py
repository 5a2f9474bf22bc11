"""The four steps of a due batch's renewals, for all of them at once: ``begin`` (1. ``price``
and 2. ``create_order``), ``charge`` (3.) and ``confirm`` (4.), with the conditional writes they
share. ``subscriptions.renewals`` runs them in order for each chunk of a batch and says why
they are shaped so; this module holds what each step does.

Every write to a job is conditional on the optimistic counter last read: the rows are
locked, their counters compared with the values this run wrote or read, and a job that
someone else changed meanwhile goes to the run's ``failed`` list with the reason, to be
retried later like a failed attempt.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from celery.exceptions import SoftTimeLimitExceeded
from django.db import transaction

from scheduling.api import row_locks
from subscriptions import ledger, payments, placing, pricing, services
from subscriptions.models import (
    ENDED,
    FAILING,
    JOB_RUNNABLE,
    MAX_PERIOD_NUMBER,
    RENEWABLE,
    JobStep,
    Order,
    OrderLine,
    OrderStatus,
    StaleJob,
    Subscription,
    SubscriptionJob,
    SubscriptionJobStatus,
    SubscriptionStatus,
    next_counter,
)
from subscriptions.periods import PeriodError
from subscriptions.services import done, idempotency_key

logger = logging.getLogger("subscriptions")

#: Charges made between two reads of the subscriptions' statuses (a cancel's reach).
CHARGE_GROUP = 50
Clock = Callable[[], datetime]
#: Jobs that failed in a run, with why; each is recorded (retry or fail) when the run ends.
Failures = list[tuple[SubscriptionJob, BaseException]]


@dataclass
class Renewal:
    """One CreateChildOrder job of the run, with its subscription and period."""

    job: SubscriptionJob
    subscription: Subscription
    number: int
    start: datetime
    end: datetime
    next_start: datetime
    already_paid: bool = False  # another job paid this period: finish up, place nothing
    amount: Decimal = Decimal(0)  # what the period's order records: what the charge takes


def begin(
    chunk: Sequence[SubscriptionJob],
    *,
    clock: Clock,
    failed: Failures,
    tally: Counter[str],
) -> list[Renewal]:
    """Steps 1 and 2 for the chunk, in one transaction (``subscriptions.renewals`` says how)."""
    with transaction.atomic(durable=True):
        ledger.unflushed_commit()
        subscriptions = _lock_subscriptions(j.subscription_id for j in chunk)
        # Read again under the subscriptions' locks: a cancel that committed after the chunk
        # was read is seen here.
        fresh = list(
            SubscriptionJob.objects.select_for_update(**row_locks(no_key=True))
            .filter(pk__in=[j.pk for j in chunk], status__in=JOB_RUNNABLE)
            .order_by("pk")
        )
        tally["skipped"] += len(chunk) - len(fresh)  # finished meanwhile (a cancel)
        now = clock()
        renewals: list[Renewal] = []
        stop: list[SubscriptionJob] = []
        periods: set[tuple[int, int]] = set()
        for job in fresh:
            subscription = subscriptions[job.subscription_id]
            charged = done(job.parameter, JobStep.CHARGE)
            if subscription.status not in RENEWABLE and not charged:
                stop.append(job)
                continue
            number = int(job.custom_integer or 0)
            if (subscription.pk, number) in periods:
                # Two jobs for one period: the second waits for a later run, which finds the
                # period paid and only finishes up.
                continue
            if job.status == SubscriptionJobStatus.PROCESSING:
                # Its last run died in the middle: that counts as a failed attempt. It is not
                # failed here even past the maximum: the gateway may have taken the money
                # just before the run died, and only the charge's replay can tell.
                logger.warning("renewal.lost_attempt job=%s parameter=%s", job.pk, job.parameter)
                job.retry_count += 1
            try:
                if number + 1 > MAX_PERIOD_NUMBER:
                    raise PeriodError(
                        "period", f"{number + 1} is past the last one, {MAX_PERIOD_NUMBER:,}"
                    )
                start, end = subscription.period_bounds(number)
                following, _ = subscription.period_bounds(number + 1)
            except SoftTimeLimitExceeded:
                raise
            except Exception as exc:  # a row no renewal can plan fails alone
                failed.append((job, exc))
                continue
            periods.add((subscription.pk, number))
            renewals.append(Renewal(job, subscription, number, start, end, following))
        _stop(stop, now=now, tally=tally)
        if not renewals:
            return []
        _create_orders(renewals, now=now)
        _write([r.job for r in renewals], now=now)
    return renewals


def _stop(jobs: Sequence[SubscriptionJob], *, now: datetime, tally: Counter[str]) -> None:
    """Stop jobs whose subscription ended before they charged, as a cancel would have."""
    if not jobs:
        return
    stopped = services.stop_jobs(jobs, now=now)
    tally["skipped"] += len(stopped)
    logger.info("renewal.skipped jobs=%s", ",".join(str(j.pk) for j in stopped))


def _lock_subscriptions(ids: Iterable[int]) -> dict[int, Subscription]:
    rows = Subscription.objects.select_for_update(**row_locks(no_key=True)).filter(pk__in=set(ids))
    return {s.pk: s for s in rows.order_by("pk")}


def _create_orders(renewals: Sequence[Renewal], *, now: datetime) -> None:
    """Make sure each renewal's period has its order, and take the amount from it; move each
    job to PROCESSING.

    A missing order is priced from the items in force for its period and inserted with its
    lines; an existing one keeps its amount (a resumed job charges what its order says).
    ``custom_decimal`` gets a copy of the amount for the record, and is never read back.
    """
    ids = {r.subscription.pk for r in renewals}
    existing = {
        (o.subscription_id, o.period_start): o
        for o in Order.objects.filter(
            subscription_id__in=ids, period_start__in={r.start for r in renewals}
        )
    }
    parents = dict(
        Order.objects.filter(subscription_id__in=ids, parent__isnull=True).values_list(
            "subscription_id", "pk"
        )
    )
    priced = pricing.price_periods(
        (r.subscription.pk, r.number)
        for r in renewals
        if (r.subscription.pk, r.start) not in existing
    )
    new_orders: list[tuple[Order, pricing.Priced]] = []
    for r in renewals:
        job = r.job
        if job.parameter:
            logger.info("renewal.resumed job=%s after=%s", job.pk, job.parameter)
        job.status = SubscriptionJobStatus.PROCESSING
        order = existing.get((r.subscription.pk, r.start))
        if order is not None:
            r.amount = order.amount
            if order.status == OrderStatus.CONFIRMED and not done(job.parameter, JobStep.CHARGE):
                # Paid already (by another job for the same period): only finish up.
                job.parameter, job.custom_text = JobStep.CHARGE, order.charge_reference
                r.already_paid = True
            elif not done(job.parameter, JobStep.CREATE_ORDER):
                job.parameter = JobStep.CREATE_ORDER
        else:
            period = priced[(r.subscription.pk, r.number)]
            r.amount = period.amount
            if not done(job.parameter, JobStep.CHARGE):
                # Charged periods whose order is gone get it back at confirm.
                order = Order(
                    subscription_id=r.subscription.pk,
                    parent_id=parents.get(r.subscription.pk),
                    period_number=r.number,
                    period_start=r.start,
                    period_end=r.end,
                    amount=period.amount,
                    status=OrderStatus.PENDING,
                    created_at=now,
                )
                new_orders.append((order, period))
                job.parameter = JobStep.CREATE_ORDER
        job.custom_decimal = r.amount
    Order.objects.bulk_create([order for order, _ in new_orders])
    OrderLine.objects.bulk_create(
        [line for order, period in new_orders for line in period.order_lines(order)]
    )


def charge(
    renewals: Sequence[Renewal],
    *,
    clock: Clock,
    failed: Failures,
    tally: Counter[str],
) -> list[Renewal]:
    """Step 3: one gateway call per job, each charge recorded as soon as it is made.

    A job not yet charged is charged. A job whose record says it was (it resumes after a run
    that died, or its step was written behind the app's back) is verified with the gateway by
    its key first (``_verify``), and charged only when the gateway says nothing was taken.

    The record is one conditional UPDATE committed on its own (``ledger.record_charge``), so the
    window in which a dead worker leaves a charge unrecorded is one call wide, and the
    retry's replay of the key covers it. Every ``CHARGE_GROUP`` charges the subscriptions are
    read again: one cancelled since the first step is not charged. A job recorded as charged
    is verified even when its subscription has ended since: if the money was taken, its
    order is confirmed.
    """
    gateway = payments.gateway()
    paid: list[Renewal] = []
    recorded = [r for r in renewals if done(r.job.parameter, JobStep.CHARGE)]
    due = [r for r in renewals if not done(r.job.parameter, JobStep.CHARGE)]
    for r in recorded:
        try:
            if _verify(gateway, r, clock=clock):
                paid.append(r)
            else:
                due.append(r)  # nothing was taken: charged below, as if it had not begun
        except SoftTimeLimitExceeded:
            raise
        except Exception as exc:  # declined, gateway error, a mismatch, or changed meanwhile
            failed.append((r.job, exc))
    for first in range(0, len(due), CHARGE_GROUP):
        for r in _not_ended(due[first : first + CHARGE_GROUP], clock=clock, tally=tally):
            try:
                result = gateway.charge(
                    customer=r.subscription.customer,
                    amount=r.amount,
                    idempotency_key=idempotency_key(r.subscription.pk, r.start),
                )
                if not ledger.record_charge(r.job, reference=result.reference, now=clock()):
                    raise _stale(r.job)
            except SoftTimeLimitExceeded:
                raise  # the run's time is up: this job did nothing wrong
            except Exception as exc:  # declined, gateway error, or changed by someone else
                failed.append((r.job, exc))
                continue
            paid.append(r)
    return paid


def _verify(gateway: payments.Gateway, r: Renewal, *, clock: Clock) -> bool:
    """Ask the gateway what happened under the period's key, for a job recorded as charged.

    Charged for the order's amount, to the subscription's customer: True, and the job holds
    the gateway's reference (a different one recorded is replaced). Nothing taken: False,
    and the job goes back to ``create_order`` with no reference (``ledger.rewind_charge``), so
    that the charge is made now (not charged) or by its retry (declined: raised as the
    decline it was). Charged for another amount or customer: ``ChargeMismatch``, for an
    operator.
    """
    key = idempotency_key(r.subscription.pk, r.start)
    found = gateway.find_charge(idempotency_key=key)
    if found.confirms(customer=r.subscription.customer, amount=r.amount, key=key):
        if found.reference != r.job.custom_text:
            logger.warning(
                "renewal.reference_replaced job=%s recorded=%s gateway=%s",
                r.job.pk,
                r.job.custom_text,
                found.reference,
            )
            if not ledger.record_charge(r.job, reference=found.reference, now=clock()):
                raise _stale(r.job)
        logger.info("renewal.verified job=%s reference=%s", r.job.pk, found.reference)
        return True
    logger.warning(
        "renewal.unverified job=%s step=%s recorded=%s gateway=%s",
        r.job.pk,
        r.job.parameter,
        r.job.custom_text or "-",
        found.state,
    )
    if not ledger.rewind_charge(r.job, now=clock()):
        raise _stale(r.job)
    r.already_paid = False
    if found.state == payments.ChargeState.DECLINED:
        raise payments.PaymentDeclined(found.reason or f"declined under {key!r}")
    return False


def _not_ended(group: Sequence[Renewal], *, clock: Clock, tally: Counter[str]) -> list[Renewal]:
    """The renewals whose subscription has not ended since they began; the others stop."""
    statuses = dict(
        Subscription.objects.filter(pk__in={r.subscription.pk for r in group}).values_list(
            "pk", "status"
        )
    )
    ended = [r for r in group if statuses.get(r.subscription.pk) in ENDED]
    if not ended:
        return list(group)
    with transaction.atomic(durable=True):
        _lock_subscriptions(r.subscription.pk for r in ended)
        fresh = SubscriptionJob.objects.select_for_update(**row_locks(no_key=True)).filter(
            pk__in=[r.job.pk for r in ended]
        )
        _stop(list(fresh.order_by("pk")), now=clock(), tally=tally)
    gone = {r.job.pk for r in ended}
    return [r for r in group if r.job.pk not in gone]


def confirm(
    renewals: Sequence[Renewal],
    *,
    clock: Clock,
    failed: Failures,
    tally: Counter[str],
) -> list[Renewal]:
    """Step 4: confirm the orders, complete the jobs, place what comes next."""
    if not renewals:
        return []
    with transaction.atomic(durable=True):
        ledger.unflushed_commit()
        subscriptions = _lock_subscriptions(r.subscription.pk for r in renewals)
        renewals = _unchanged(renewals, failed)
        now = clock()
        confirmed = ledger.confirm_orders(
            [(r.subscription.pk, r.start, r.job.custom_text) for r in renewals], now=now
        )
        _restore_orders(
            [r for r in renewals if (r.subscription.pk, r.start) not in confirmed], now=now
        )
        for r in renewals:
            r.job.status, r.job.parameter = SubscriptionJobStatus.COMPLETED, JobStep.CONFIRM
        _write([r.job for r in renewals], now=now)
        was = {pk: subscription.status for pk, subscription in subscriptions.items()}
        flagged = {r.subscription.pk for r in renewals if was[r.subscription.pk] in FAILING}
        if flagged:
            Subscription.objects.filter(pk__in=flagged).update(
                status=SubscriptionStatus.ACTIVE, attention_reason=""
            )
            for pk in flagged:
                subscriptions[pk].status = SubscriptionStatus.ACTIVE
        following = placing.place_next(
            [
                placing.Paid(
                    subscriptions[r.subscription.pk], r.number, r.next_start, was[r.subscription.pk]
                )
                for r in renewals
                if subscriptions[r.subscription.pk].status == SubscriptionStatus.ACTIVE
                and not r.already_paid
            ],
            now=now,
        )
    tally["renewed"] += len(renewals)
    placed = {j.subscription_id: j.pk for j in following}
    for r in renewals:
        logger.info(
            "renewal.completed job=%s subscription=%s period=%s next=%s",
            r.job.pk,
            r.subscription.pk,
            r.job.custom_integer,
            placed.get(r.subscription.pk, "-"),
        )
    return renewals


def _restore_orders(renewals: Sequence[Renewal], *, now: datetime) -> None:
    """Charged periods whose pending order is gone get it back, confirmed: money taken always
    has its order. A period confirmed meanwhile by another job for it is left as it is, and
    its renewal only finishes up (``already_paid``)."""
    if not renewals:
        return
    ids = {r.subscription.pk for r in renewals}
    confirmed = set(
        Order.objects.filter(
            subscription_id__in=ids,
            period_start__in={r.start for r in renewals},
            status=OrderStatus.CONFIRMED,
        ).values_list("subscription_id", "period_start")
    )
    missing = []
    for r in renewals:
        if (r.subscription.pk, r.start) in confirmed:
            r.already_paid = True
        else:
            missing.append(r)
    if not missing:
        return
    parents = dict(
        Order.objects.filter(subscription_id__in=ids, parent__isnull=True).values_list(
            "subscription_id", "pk"
        )
    )
    logger.warning("renewal.order_restored jobs=%s", ",".join(str(r.job.pk) for r in missing))
    priced = pricing.price_periods((r.subscription.pk, r.number) for r in missing)
    orders = [
        Order(
            subscription_id=r.subscription.pk,
            parent_id=parents.get(r.subscription.pk),
            period_number=r.number,
            period_start=r.start,
            period_end=r.end,
            amount=r.amount,
            status=OrderStatus.CONFIRMED,
            charge_reference=r.job.custom_text,
            created_at=now,
            confirmed_at=now,
        )
        for r in missing
    ]
    Order.objects.bulk_create(orders)
    OrderLine.objects.bulk_create(
        [
            line
            for r, order in zip(missing, orders, strict=True)
            for line in priced[(r.subscription.pk, r.number)].order_lines(order)
        ]
    )


def _unchanged(renewals: Sequence[Renewal], failed: Failures) -> list[Renewal]:
    """Lock the jobs and keep those whose counter is still the one this run holds; the rest
    were changed by someone else, and go to ``failed`` with the reason."""
    current = dict(
        SubscriptionJob.objects.select_for_update(**row_locks(no_key=True))
        .filter(pk__in=[r.job.pk for r in renewals])
        .values_list("pk", "opt_counter")
    )
    kept = []
    for r in renewals:
        seen = current.get(r.job.pk)
        if seen == r.job.opt_counter:
            kept.append(r)
            continue
        failed.append((r.job, _stale(r.job, now=seen)))
    return kept


def _stale(job: SubscriptionJob, *, now: int | None = None) -> StaleJob:
    """Why a write of this run to ``job`` was refused: someone changed the job meanwhile."""
    counter = f"optimistic counter {job.opt_counter}" + ("" if now is None else f", now {now}")
    return StaleJob(
        f"subscription job {job.pk} was changed since it was read ({counter}); it is retried"
        " as it is now"
    )


def _write(jobs: Sequence[SubscriptionJob], *, now: datetime) -> None:
    """One UPDATE for the jobs' step columns, moving each counter on (rows locked by caller)."""
    for job in jobs:
        job.opt_counter = next_counter(job.opt_counter)
        job.last_update = now
    ledger.write_steps(jobs, now=now)
