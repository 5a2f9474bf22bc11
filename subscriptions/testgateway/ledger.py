"""The test gateway's charge in one round trip, on each database.

A renewal's floor is its gateway call, so the test gateway's own is one statement where the
database allows it: ``sql/postgresql.sql`` reads a replayed key and a customer's script and
inserts the charge at once; elsewhere the ORM makes the same reads and insert, one statement
each. Which form a connection gets is decided once per connection (``ledger.Engines``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Q

from scheduling.api import ledger, load_statements, row_locks
from subscriptions.testgateway.models import GatewayCharge, GatewayScript

STATEMENTS = load_statements("subscriptions.testgateway", "sql/postgresql.sql", form="postgresql")


@dataclass(frozen=True)
class GatewayCharged:
    """What the test gateway's one-statement charge found: the reference it inserted, or the
    charge already made under the key (a replay), or the customer's scripted failures left."""

    inserted: str | None
    seen_reference: str | None
    seen_customer: str | None
    seen_amount: str | None  # as text: compared exactly with the amount asked for
    errors_left: int | None
    declines_left: int | None


class OrmCharges:
    """The ORM's form: one statement per read or insert."""

    def __init__(self, using: str) -> None:
        self.using = using

    def charge(
        self, *, key: str, customer: str, amount: Decimal, reference: str, now: datetime
    ) -> GatewayCharged:
        """The same reads and insert as the statement, one statement each."""
        seen = GatewayCharge.objects.filter(idempotency_key=key).first()
        if seen is not None:
            return GatewayCharged(None, seen.reference, seen.customer, str(seen.amount), None, None)
        script = (
            GatewayScript.objects.select_for_update(**row_locks(no_key=True))
            .filter(customer=customer)
            .filter(Q(errors_left__gt=0) | Q(declines_left__gt=0))
            .first()
        )
        if script is not None:
            return GatewayCharged(None, None, None, None, script.errors_left, script.declines_left)
        GatewayCharge.objects.create(
            reference=reference,
            idempotency_key=key,
            customer=customer,
            amount=amount,
            created_at=now,
        )
        return GatewayCharged(reference, None, None, None, None, None)


class PostgreSQLCharges(OrmCharges):
    """The statement of ``sql/postgresql.sql``: one round trip."""

    def charge(
        self, *, key: str, customer: str, amount: Decimal, reference: str, now: datetime
    ) -> GatewayCharged:
        found: GatewayCharged = ledger.row(
            STATEMENTS["test_gateway_charge"],
            {
                "key": key,
                "customer": customer,
                "amount": amount,
                "reference": reference,
                "now": now,
            },
            into=GatewayCharged,
            using=self.using,
        )
        return found


#: Each database's form, chosen once per connection.
engine: ledger.Engines[OrmCharges] = ledger.Engines(
    "subscriptions_testgateway", postgresql=PostgreSQLCharges, sqlite=OrmCharges, mysql=OrmCharges
)


def test_gateway_charge(
    *, key: str, customer: str, amount: Decimal, reference: str, now: datetime
) -> GatewayCharged:
    """What one charge of the test gateway found (in the caller's transaction): the charge
    inserted unless the key was seen (a replay) or the customer's script says decline or
    fail; the caller acts on the rare outcomes."""
    return engine().charge(key=key, customer=customer, amount=amount, reference=reference, now=now)
