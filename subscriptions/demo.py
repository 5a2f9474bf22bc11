"""The subscriptions' part of ``manage.py loaddemo``: three customers of a coffee roaster.

Two renew and pay; the test gateway is told to decline the third one's next ten charges
(``script_customer``), so its renewal is retried until its retries are spent and the
subscription needs attention, as with a real card that keeps being declined. With a custom
``SUBSCRIPTIONS_GATEWAY`` the script is kept but never read: every charge goes to that gateway.
Where the test gateway's app is not installed, there is nothing to script and none is written.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from subscriptions import payments, pricing, services
from subscriptions.models import Subscription

#: (customer, interval, items as (sku, quantity, unit price), declines scripted)
DEMO_SUBSCRIPTIONS = [
    ("ada@example.com", "P1M", [("COFFEE-BEANS-ETHIOPIA-1KG", 2, "19.90")], 0),
    (
        "accounts@bistro.example.com",
        "P7D",
        [("ESPRESSO-BLEND-5KG", 1, "74.50"), ("MILK-FROTHING-JUG", 1, "12.00")],
        0,
    ),
    ("grace@example.com", "P1M", [("DECAF-COLOMBIA-500G", 3, "9.80")], 10),
]


def load_demo(*, now: datetime) -> list[str]:
    """Create the demo subscriptions that are not there yet, by customer."""
    created = []
    for customer, interval, items, declines in DEMO_SUBSCRIPTIONS:
        if Subscription.objects.filter(customer=customer).exists():
            continue
        if declines and payments.has_test_gateway():
            from subscriptions.testgateway.gateway import script_customer

            script_customer(customer=customer, declines=declines)
        services.create_subscription(
            customer=customer,
            items=[pricing.ItemSpec(sku, count, Decimal(price)) for sku, count, price in items],
            interval=interval,
            start=now,
            end=None,
            now=now,
        )
        created.append(f"{customer} (subscription)")
    return created
