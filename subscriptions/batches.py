"""Due batches: how subscription jobs reach the engine.

Every subscription job belongs to the open batch of its (action date, block), where a block
is ``subscription id // SUBSCRIPTIONS_BATCH_SIZE``. Opening a batch schedules one one-off
engine job at its instant (``scheduling.api.schedule_row``); that job's execution runs the
batch (``subscriptions.renewals``). So ten thousand subscriptions renewing at one instant
cost the engine fifty executions, not ten thousand, while a subscription alone at its
instant still gets an engine job of its own.

A batch's run closes it once nothing runnable is left in it, under ``SELECT … FOR UPDATE``.
A placer, after writing its jobs, takes ``FOR KEY SHARE`` on their batch rows and reads
``closed_at`` under that lock (``attach``; the foreign key's own check would come too late:
Django makes it deferred to the commit). Either the placer locks first, and the close waits
for its commit and then sees the jobs, or the close committed first, and the placer sees the
batch closed and moves its jobs to a new one. No job is left runnable in a closed batch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from scheduling.api import Once, Policies, schedule_row
from subscriptions import conf, ledger
from subscriptions.models import JOB_RUNNABLE, DueBatch, JobAction, SubscriptionJob

#: The engine may retry a batch a few more times than a job's own limit: the batch is
#: retried only when a run died or broke off, and each retry resumes where it stopped.
ENGINE_RETRY_MARGIN = 3


def block_of(subscription_id: int) -> int:
    return subscription_id // conf.batch_size()


def policies() -> Policies:
    """The engine policies of a batch's job: a run that died is retried after the renewal's
    retry delay (the same wait a declined charge gets) and resumes where it stopped."""
    delay = conf.retry_delay(JobAction.CREATE_CHILD_ORDER)
    return Policies(
        max_retries=conf.max_retries(JobAction.CREATE_CHILD_ORDER) + ENGINE_RETRY_MARGIN,
        retry_backoff=delay,
        retry_backoff_max=delay,
        timeout=conf.timeout(),
        note="subscriptions: due batch",
    )


def open_batch(due_at: datetime, block: int, *, now: datetime, by: Any = None) -> int:
    """The id of the open batch of (``due_at``, ``block``), opening and scheduling one when
    none is open (caller's transaction); ``by`` is who the engine job's audit trail names as
    its maker (the operator whose change opened it; ``system`` when None)."""
    while True:
        found = (
            DueBatch.objects.filter(due_at=due_at, block=block, closed_at__isnull=True)
            .values_list("pk", flat=True)
            .first()
        )
        if found is not None:
            return int(found)
        try:
            with transaction.atomic():
                batch = DueBatch.objects.create(due_at=due_at, block=block, created_at=now)
        except IntegrityError:
            continue  # another transaction opened it first: use theirs
        schedule_row(
            batch,
            timing=Once(at=due_at, allow_past=True),  # a batch found late runs at once
            policies=policies(),
            name=f"subscriptions.DueBatch:{batch.pk}",
            now=now,
            by=by,
        )
        return batch.pk


def assign(jobs: Sequence[SubscriptionJob], *, now: datetime, by: Any = None) -> None:
    """Set ``batch_id`` on unsaved (or about to be changed) jobs from their action dates
    (``open_batch``'s ``by``)."""
    keys = {(job.action_date, block_of(job.subscription_id)) for job in jobs}
    # In one order everywhere, so two placers opening the same batches cannot deadlock.
    opened = {key: open_batch(*key, now=now, by=by) for key in sorted(keys)}
    for job in jobs:
        job.batch_id = opened[(job.action_date, block_of(job.subscription_id))]


def attach(jobs: Sequence[SubscriptionJob], *, now: datetime, by: Any = None) -> None:
    """After ``jobs`` were written with their batches: move any that landed in a batch
    closed meanwhile (see the module docstring) to an open one. Caller's transaction."""
    while True:
        by_batch: dict[int, list[SubscriptionJob]] = defaultdict(list)
        for job in jobs:
            by_batch[int(job.batch_id)].append(job)
        closed = ledger.share_batches(sorted(by_batch))
        if not closed:
            return
        moved = [job for pk in closed for job in by_batch[pk]]
        for job in moved:
            job.batch_id = None
        assign(moved, now=now, by=by)
        for job in moved:
            # Part of the placing change already counted: the job is not visible to anyone
            # but its batch's run, which has not seen it.
            SubscriptionJob.objects.filter(pk=job.pk).update(batch_id=job.batch_id)
        jobs = moved


def close_if_done(batch_id: int, *, now: datetime) -> list[int]:
    """Close the batch if no job in it is runnable; otherwise return those jobs' ids.

    The row lock waits for any transaction that is placing a job into the batch, and the
    check after it sees that job, so a job placed while the batch's run ends is never left
    behind in a closed batch.
    """
    with transaction.atomic(durable=True):
        list(DueBatch.objects.select_for_update().filter(pk=batch_id).values_list("pk"))
        pending = list(
            SubscriptionJob.objects.filter(batch_id=batch_id, status__in=JOB_RUNNABLE).values_list(
                "pk", flat=True
            )
        )
        if not pending:
            DueBatch.objects.filter(pk=batch_id).update(closed_at=now)
    return pending
