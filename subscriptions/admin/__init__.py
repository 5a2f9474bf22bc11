"""The admin: subscriptions with their orders and jobs, subscription jobs, due batches. (The
test gateway's pages are its own app's, ``subscriptions.testgateway.admin``.)

Actions call one service per row and report counts. Ledgers (orders) are read-only for
everyone, superusers included: no page adds, changes or deletes them, and no subscription is
deleted, since that would delete its orders. A subscription job offers only
the fields an operator may edit (``models.OPERATOR_FIELDS``: none on a renewal); its form
carries the optimistic counter it was read with, and saving it is conditional on that counter,
so an edit that raced the scheduler is refused with the reason instead of overwriting the
run's state.

One module per model's pages (``subscription``, ``jobs``, ``orders``, ``batches``), on the
bases in ``common``. Django's admin autodiscovery imports this package alone, so it imports
each module here: importing one registers its pages.
"""

from __future__ import annotations

from subscriptions.admin import batches, jobs, orders, subscription
from subscriptions.admin.batches import BoundedDates, DueBatchAdmin
from subscriptions.admin.common import LATEST, LatestInline, ModelAdmin, ReadOnlyAdmin
from subscriptions.admin.jobs import SubscriptionJobAdmin, SubscriptionJobForm
from subscriptions.admin.orders import OrderAdmin
from subscriptions.admin.subscription import (
    ItemFormSet,
    ItemInline,
    JobInline,
    NeedsAttentionFilter,
    OrderInline,
    SubscriptionAdmin,
)

__all__ = [
    "LATEST",
    "BoundedDates",
    "DueBatchAdmin",
    "ItemFormSet",
    "ItemInline",
    "JobInline",
    "LatestInline",
    "ModelAdmin",
    "NeedsAttentionFilter",
    "OrderAdmin",
    "OrderInline",
    "ReadOnlyAdmin",
    "SubscriptionAdmin",
    "SubscriptionJobAdmin",
    "SubscriptionJobForm",
    "batches",
    "jobs",
    "orders",
    "subscription",
]
