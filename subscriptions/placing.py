"""Placing subscription jobs: each joins the open due batch of its action date
(``subscriptions.batches``), whose one-off engine job runs it with the rest of the batch; and,
after confirmed renewals, what comes next (the next period's renewal, or the Expire), with the
periods a failing subscription skipped.

Caller's transaction throughout: a job is placed with the change that calls for it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from subscriptions import batches, periods
from subscriptions.models import (
    FAILING,
    JobAction,
    SkippedPeriods,
    Subscription,
    SubscriptionJob,
    SubscriptionStatus,
)

logger = logging.getLogger("subscriptions")


def place_job(
    *,
    subscription: Subscription,
    action: str,
    action_date: datetime,
    now: datetime,
    period_number: int | None = None,
    by: Any = None,
) -> SubscriptionJob:
    """Save one subscription job in the open batch of its action date (caller's transaction);
    ``by`` names who opened a batch for it, if it opens one (``batches.open_batch``)."""
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
        by=by,
    )
    return job


def place_jobs(
    jobs: Sequence[SubscriptionJob], *, now: datetime, by: Any = None
) -> list[SubscriptionJob]:
    """Save unsaved jobs, each in the open batch of its action date (caller's transaction;
    ``by`` as ``place_job``'s)."""
    for job in jobs:
        job.time_placed = job.last_update = now
    batches.assign(jobs, now=now, by=by)
    saved = SubscriptionJob.objects.bulk_create(jobs)
    batches.attach(saved, now=now, by=by)
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
