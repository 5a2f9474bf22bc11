"""The optimistic counter (seed 002's OPTCOUNTER), proved with two real database connections.

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
from django.db import connection

from subscriptions.models import OPT_COUNTER_MAX, JobStatus, StaleJob, SubscriptionJob, next_counter
from tests.subscriptions.conftest import pending_job


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
        mine.change(now=now + timedelta(seconds=1), status=JobStatus.PROCESSING)
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
