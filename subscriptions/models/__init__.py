"""Subscriptions, their orders and their scheduled jobs (seed 002's SUBSCRSCHJOBS). The test
gateway's tables are its own app's (``subscriptions.testgateway.models``).

Every rule a row must satisfy lives in these modules (``clean`` and database constraints), so
the admin, the command line and the services refuse the same input with the same message.
One module per thing a row is, so each stays readable on its own:

- ``validation``: the field rules every model shares (plain text, aware instants);
- ``subscription``: ``Subscription``, its ``SubscriptionItem`` lines and their statuses;
- ``orders``: ``Order``, ``OrderLine`` and ``SkippedPeriods``;
- ``jobs``: ``SubscriptionJob``, its actions, steps, statuses and counter, and ``DueBatch``.

Every name is imported here, so ``from subscriptions.models import X`` is where the rest of the
app, the migrations and the tests find it.
"""

from __future__ import annotations

from subscriptions.models.jobs import (
    JOB_PENDING,
    JOB_RUNNABLE,
    OPERATOR_FIELDS,
    OPT_COUNTER_MAX,
    RENEWAL_STEPS,
    DueBatch,
    JobAction,
    JobStep,
    NeedsOperator,
    StaleJob,
    SubscriptionJob,
    SubscriptionJobStatus,
    UnhandledAction,
    next_counter,
    step_done,
)
from subscriptions.models.orders import Order, OrderLine, OrderStatus, SkippedPeriods
from subscriptions.models.subscription import (
    ENDED,
    FAILING,
    MAX_ITEMS,
    MAX_PERIOD_AMOUNT,
    MAX_PERIOD_NUMBER,
    MAX_QUANTITY,
    RENEWABLE,
    Subscription,
    SubscriptionItem,
    SubscriptionStatus,
)
from subscriptions.models.validation import one_line, validate_plain_text

__all__ = [
    "ENDED",
    "FAILING",
    "JOB_PENDING",
    "JOB_RUNNABLE",
    "MAX_ITEMS",
    "MAX_PERIOD_AMOUNT",
    "MAX_PERIOD_NUMBER",
    "MAX_QUANTITY",
    "OPERATOR_FIELDS",
    "OPT_COUNTER_MAX",
    "RENEWABLE",
    "RENEWAL_STEPS",
    "DueBatch",
    "JobAction",
    "JobStep",
    "NeedsOperator",
    "Order",
    "OrderLine",
    "OrderStatus",
    "SkippedPeriods",
    "StaleJob",
    "Subscription",
    "SubscriptionItem",
    "SubscriptionJob",
    "SubscriptionJobStatus",
    "SubscriptionStatus",
    "UnhandledAction",
    "next_counter",
    "one_line",
    "step_done",
    "validate_plain_text",
]
