"""The partial unique constraints hold on every database, MySQL and MariaDB included.

PostgreSQL and SQLite make them as partial indexes; MySQL and MariaDB have none, and there
the subscriptions app's migration 0009 makes each as a unique index over a generated column.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from subscriptions.models import DueBatch, Order, OrderStatus

pytestmark = [pytest.mark.django_db, pytest.mark.specification]


def test_one_open_batch_per_instant_and_block_and_any_number_closed(now) -> None:
    DueBatch.objects.create(due_at=now, block=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        DueBatch.objects.create(due_at=now, block=1)
    DueBatch.objects.create(due_at=now, block=2)
    DueBatch.objects.create(due_at=now + timedelta(seconds=1), block=1)
    DueBatch.objects.filter(due_at=now, block=1).update(closed_at=now)
    DueBatch.objects.create(due_at=now, block=1, closed_at=now)
    DueBatch.objects.create(due_at=now, block=1)
    assert DueBatch.objects.filter(due_at=now, block=1, closed_at__isnull=True).count() == 1
    assert DueBatch.objects.filter(due_at=now, block=1).count() == 3


def test_one_parent_order_per_subscription_and_any_number_of_children(
    make_subscription, now
) -> None:
    subscription = make_subscription()
    (parent,) = Order.objects.filter(subscription=subscription, parent__isnull=True)
    with pytest.raises(IntegrityError), transaction.atomic():
        Order.objects.create(
            subscription=subscription, amount=Decimal(1), status=OrderStatus.PLACED
        )
    for period in range(2):
        Order.objects.create(
            subscription=subscription,
            parent=parent,
            period_number=period,
            period_start=now + timedelta(days=30 * period),
            amount=Decimal(1),
            status=OrderStatus.PLACED,
        )
    assert Order.objects.filter(subscription=subscription).count() == 3
