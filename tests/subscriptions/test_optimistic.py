"""Concurrency, proved with two real database connections: the optimistic counter (seed 002's
OPTCOUNTER) and the subscription row lock that orders a renewal after a cancel.

Every update of a subscription job is ``UPDATE … WHERE scheduled_id = ? AND opt_counter = <the
value read>`` and moves the counter on; the second of two writers that read the same version
gets ``StaleJob`` with the reason, and the first writer's change stays.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from subscriptions import batches, placing, services
from subscriptions.models import (
    OPT_COUNTER_MAX,
    DueBatch,
    Order,
    StaleJob,
    SubscriptionJob,
    SubscriptionJobStatus,
    next_counter,
)
from subscriptions.testgateway.models import GatewayCharge
from tests.conftest import wait_for
from tests.subscriptions.conftest import pending_job, run_inline


def on_another_connection(work: Callable[[], Any]) -> Any:
    """Run ``work`` in a thread, which Django gives a database connection of its own."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = work()
            result["backend_pid"] = connection.connection.info.backend_pid
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=30)
    return result


@pytest.mark.django_db(transaction=True)
def test_the_second_of_two_writers_that_read_the_same_version_is_refused(
    make_subscription, now
) -> None:
    job = pending_job(make_subscription())
    mine = SubscriptionJob.objects.get(pk=job.pk)  # read on this connection: counter 0

    def operator_edits() -> int:
        theirs = SubscriptionJob.objects.get(pk=job.pk)  # also counter 0
        theirs.custom_text = "edited by an operator"
        theirs.save()
        return theirs.opt_counter

    other = on_another_connection(operator_edits)
    assert other["value"] == 1
    assert other["backend_pid"] != connection.connection.info.backend_pid

    with pytest.raises(StaleJob, match=r"optimistic counter 0, now 1\); reload"):
        mine.change(now=now + timedelta(seconds=1), status=SubscriptionJobStatus.PROCESSING)
    job.refresh_from_db()
    assert (job.custom_text, job.status, job.opt_counter) == ("edited by an operator", 0, 1)


@pytest.mark.django_db(transaction=True)
def test_a_writer_that_read_the_current_version_wins_and_moves_the_counter(
    make_subscription, now
) -> None:
    job = pending_job(make_subscription())
    on_another_connection(
        lambda: SubscriptionJob.objects.get(pk=job.pk).change(now=now, parameter="price")
    )
    fresh = SubscriptionJob.objects.get(pk=job.pk)
    fresh.change(now=now, parameter="create_order")
    job.refresh_from_db()
    assert (job.parameter, job.opt_counter, job.last_update) == ("create_order", 2, now)


@pytest.mark.django_db
def test_the_counter_wraps_as_a_smallint_must(make_subscription, now) -> None:
    job = pending_job(make_subscription())
    SubscriptionJob.objects.filter(pk=job.pk).update(opt_counter=OPT_COUNTER_MAX)
    job.refresh_from_db()
    job.change(now=now, parameter="price")
    job.refresh_from_db()
    assert job.opt_counter == 1
    assert [next_counter(v) for v in (0, 1, 32766, 32767)] == [1, 2, 32767, 1]


@pytest.mark.django_db
def test_a_plain_save_is_conditional_too(make_subscription, now) -> None:
    job = pending_job(make_subscription())
    stale = SubscriptionJob.objects.get(pk=job.pk)
    job.custom_integer = 7
    job.save()
    stale.custom_integer = 8
    with pytest.raises(StaleJob):
        stale.save()
    job.refresh_from_db()
    assert job.custom_integer == 7


@pytest.mark.django_db(transaction=True)
def test_a_renewal_waits_for_a_cancel_in_progress_then_does_nothing(make_subscription, now) -> None:
    """The renewal's first step locks the subscription row and reads it again under the lock:
    a cancel that holds the lock makes it wait, and once the cancel commits it stops."""
    subscription = make_subscription()
    job = pending_job(subscription)

    renewal = while_held(
        lambda: services.cancel_subscription(
            subscription_id=subscription.pk, at_period_end=False, now=now
        ),
        lambda: run_inline(job, at=now),
        waits_for="the renewal waits for the subscription's lock",
    )

    assert renewal == {"skipped": 1}
    job.refresh_from_db()
    assert (job.status, job.parameter) == (SubscriptionJobStatus.COMPLETED, "cancelled")
    assert not Order.objects.filter(subscription=subscription, parent__isnull=False).exists()
    assert not GatewayCharge.objects.exists()


def while_held(hold: Callable[[], Any], then: Callable[[], Any], *, waits_for: str) -> Any:
    """Run ``hold`` in a transaction on one connection and keep it open; run ``then`` on
    another, see it wait for a lock, commit ``hold``, and return what ``then`` returned."""
    holding, release = threading.Event(), threading.Event()
    results: dict[str, Any] = {}

    def held() -> None:
        try:
            with transaction.atomic():
                hold()
                holding.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    def waiting() -> None:
        try:
            results["then"] = then()
        finally:
            connection.close()

    holder = threading.Thread(target=held)
    holder.start()
    assert holding.wait(timeout=30)
    waiter = threading.Thread(target=waiting)
    waiter.start()
    wait_for(lock_waiters, timeout=30, message=waits_for)
    release.set()
    holder.join(timeout=30)
    waiter.join(timeout=30)
    return results["then"]


def lock_waiters() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_a_batch_does_not_close_over_a_job_being_placed_into_it(make_subscription, now) -> None:
    """The placer holds ``FOR KEY SHARE`` on the batch until it commits; the batch's close
    (``FOR UPDATE``) waits for it, then sees the job and stays open."""
    subscription = make_subscription()
    first = pending_job(subscription)
    batch_id = first.batch_id
    first.change(now=now, status=SubscriptionJobStatus.COMPLETED, parameter="confirm")
    pending = while_held(
        lambda: placing.place_job(
            subscription=subscription, action="Expire", action_date=first.action_date, now=now
        ),
        lambda: batches.close_if_done(batch_id, now=now),
        waits_for="the close waits for the placer's commit",
    )

    (placed,) = SubscriptionJob.objects.filter(subscription=subscription, action="Expire")
    assert pending == [placed.pk] and placed.batch_id == batch_id
    assert DueBatch.objects.get(pk=batch_id).closed_at is None
