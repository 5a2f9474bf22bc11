"""The subscriptions app's ledger: the verbs that write a renewal's rows in bulk or in one
round trip, each database answering them through its engine (``subscriptions.engines``).

Why it exists: a due batch writes the step columns of up to a few hundred jobs, and confirms
as many orders, at each step. The ORM's ``bulk_update`` spells that as one CASE per column per
row, and building it cost more than everything else a renewal does; one ``UPDATE … FROM
json_to_recordset`` per step is a single short statement. The per-renewal writes (a charge's
record) are one statement and one round trip each, with a commit
that does not wait for the log flush. This module and its engines are the one place in the
app that holds such writes: every other module uses the ORM, and none opens a cursor or asks
which database it is.

The statements are named, in ``sql/postgresql.sql``, run by ``PostgreSQLLedger``;
``OrmLedger`` writes the same rows through the ORM, one statement per row, for the embedded
SQLite default (and any other database). Which engine a connection gets is decided once per
connection by the engine's runner (``ledger.Engines``). These functions keep what is the
same on every database: the counters read and moved on, the objects updated after a write.

Functions:

- ``unflushed_commit``: let the current transaction commit without waiting for the WAL flush;
- ``share_batches``: hold a placer's batches against closing; which were closed already;
- ``record_charge``: one job's charge step, conditional on its counter, committed on its own;
- ``rewind_charge``: one job back to ``create_order`` with no reference, likewise;
- ``write_steps``: every job's step columns and counter, as they are on the objects;
- ``confirm_orders``: the pending orders of (subscription, period start) paid by a charge.

The test gateway's charge, one round trip too, is its own app's (``subscriptions.testgateway``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from scheduling.api import ledger
from subscriptions.engines import STEP_COLUMNS, OrmLedger, PostgreSQLLedger
from subscriptions.models import JobStep, SubscriptionJob, next_counter

__all__ = ["STEP_COLUMNS", "engine"]

#: Each database's engine, chosen once per connection.
engine: ledger.Engines[OrmLedger] = ledger.Engines(
    "subscriptions", postgresql=PostgreSQLLedger, sqlite=OrmLedger, mysql=OrmLedger
)


def unflushed_commit() -> None:
    """Let the current transaction commit without waiting for the WAL flush (PostgreSQL;
    SQLite has no such setting and nothing to do).

    Safe for a renewal's own steps: the batch's completion, which the engine commits
    synchronously afterwards, flushes the log up to and including them (PostgreSQL writes it
    in order), so they are durable before the occurrence counts as done. A database crash
    before that loses only steps the retry redoes anyway: the order by its unique period, the
    charge by its idempotency key, which the gateway committed durably on its side.
    """
    engine().unflushed_commit()


def share_batches(ids: Sequence[int]) -> set[int]:
    """Lock the batches ``ids`` against closing until the caller commits (``FOR KEY SHARE``);
    the ids of those a run closed before the lock was granted."""
    return engine().share_batches(ids)


def record_charge(job: SubscriptionJob, *, reference: str, now: datetime) -> bool:
    """Write ``job``'s charge step in one statement, committed on its own; False (nothing
    written) when its counter moved since it was read. Moves the object's counter on."""
    counter = next_counter(job.opt_counter)
    written = engine().record_charge(
        job.pk,
        read=job.opt_counter,
        counter=counter,
        parameter=JobStep.CHARGE.value,
        reference=reference,
        now=now,
    )
    if written:
        job.parameter, job.custom_text = JobStep.CHARGE, reference
        job.opt_counter, job.last_update = counter, now
    return bool(written)


def rewind_charge(job: SubscriptionJob, *, now: datetime) -> bool:
    """Put ``job`` back at ``create_order`` with no charge reference, in one statement
    committed on its own; False (nothing written) when its counter moved since it was read.
    Moves the object's counter on.

    A job whose record says "charged" while the gateway says nothing was taken goes back to
    the step before the charge: its retry then charges instead of trusting the record again.
    """
    counter = next_counter(job.opt_counter)
    written = engine().rewind_charge(
        job.pk,
        read=job.opt_counter,
        counter=counter,
        parameter=JobStep.CREATE_ORDER.value,
        now=now,
    )
    if written:
        job.parameter, job.custom_text = JobStep.CREATE_ORDER, ""
        job.opt_counter, job.last_update = counter, now
    return bool(written)


def write_steps(jobs: Sequence[SubscriptionJob], *, now: datetime) -> None:
    """Write each job's step columns and counter as they are on the objects (rows locked by
    the caller)."""
    if jobs:
        engine().write_steps(jobs, now=now)


def confirm_orders(
    paid: Sequence[tuple[int, datetime, str]], *, now: datetime
) -> set[tuple[int, datetime]]:
    """Confirm the pending order of each (subscription id, period start), with its charge;
    the (subscription id, period start) of the orders confirmed."""
    if not paid:
        return set()
    return engine().confirm_orders(paid, now=now)
