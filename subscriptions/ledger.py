"""The subscriptions app's hand-written statements, each beside the function that runs it.

Why it exists: a due batch writes the step columns of up to a few hundred jobs, and confirms
as many orders, at each step. The ORM's ``bulk_update`` spells that as one CASE per column per
row, and building it cost more than everything else a renewal does; one ``UPDATE … FROM
json_to_recordset`` per step is a single short statement. The per-renewal writes (a charge's
record, the test gateway's charge) are one statement and one round trip each, with a commit
that does not wait for the log flush. This module is the one place in the app that holds such
text: every other module uses the ORM, and none opens a cursor or asks which database it is.

The engine's runner (``scheduling.api.ledger``) runs each ``Statement``, decides which
database the connection is and decodes rows by column name. Named parameters only. A
statement that runs on both databases carries its SQLite text in the same ``Statement``; one
that PostgreSQL alone runs (json_to_recordset, ``FOR KEY SHARE``, ``set_config``) has its ORM
twin for the embedded SQLite default right here, beside it, one statement per row; callers never
ask which database it is.

Functions:

- ``set_based``: whether the statements below run here (PostgreSQL) or their ORM twins do;
- ``unflushed_commit``: let the current transaction commit without waiting for the WAL flush;
- ``share_batches``: hold a placer's batches against closing; which were closed already;
- ``record_charge``: one job's charge step, conditional on its counter, committed on its own;
- ``rewind_charge``: one job back to ``create_order`` with no reference, likewise;
- ``write_steps``: every job's step columns and counter, as they are on the objects;
- ``confirm_orders``: the pending orders of (subscription, period start) paid by a charge;
- ``test_gateway_charge``: the test gateway's charge in one round trip (``GatewayCharged``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Q

from scheduling.api import ledger
from subscriptions.models import (
    DueBatch,
    GatewayCharge,
    GatewayScript,
    JobStep,
    Order,
    OrderStatus,
    SubscriptionJob,
    next_counter,
)

JOB = SubscriptionJob._meta.db_table
ORDER = Order._meta.db_table
BATCH = DueBatch._meta.db_table
CHARGE = GatewayCharge._meta.db_table
SCRIPT = GatewayScript._meta.db_table

#: The job columns a renewal step writes, besides the counter and ``last_update``.
STEP_COLUMNS = ("status", "retry_count", "parameter", "custom_decimal", "custom_text")


def set_based() -> bool:
    """True where this module's PostgreSQL statements run; False on the embedded SQLite,
    where each function (and the test gateway's ORM charge) takes its ORM twin instead. The
    engine's runner says which database this is."""
    return ledger.on_postgresql()


# -- unflushed_commit: the current transaction's commit does not wait for the WAL flush.
UNFLUSHED_COMMIT = ledger.Statement(postgresql="SET LOCAL synchronous_commit TO OFF")


def unflushed_commit() -> None:
    """Let the current transaction commit without waiting for the WAL flush (PostgreSQL;
    SQLite has no such setting and nothing to do).

    Safe for a renewal's own steps: the batch's completion, which the engine commits
    synchronously afterwards, flushes the log up to and including them (PostgreSQL writes it
    in order), so they are durable before the occurrence counts as done. A database crash
    before that loses only steps the retry redoes anyway: the order by its unique period, the
    charge by its idempotency key, which the gateway committed durably on its side.
    """
    if set_based():
        ledger.execute(UNFLUSHED_COMMIT)


# -- share_batches: hold the batches a placer just wrote jobs into, and say which are closed.
SHARE_BATCHES = ledger.Statement(
    postgresql=f"""
    SELECT id, closed_at IS NOT NULL AS closed FROM {BATCH}
     WHERE id = ANY(%(ids)s) ORDER BY id FOR KEY SHARE
"""
)


def share_batches(ids: Sequence[int]) -> set[int]:
    """Lock the batches ``ids`` against closing until the caller commits (``FOR KEY SHARE``);
    the ids of those a run closed before the lock was granted."""
    if not set_based():  # SQLite: the caller's write already holds the database's write lock
        return set(
            DueBatch.objects.filter(pk__in=ids, closed_at__isnull=False).values_list(
                "pk", flat=True
            )
        )
    found = ledger.rows(SHARE_BATCHES, {"ids": list(ids)})
    return {int(batch["id"]) for batch in found if batch["closed"]}


# -- record_charge: one job's charge step, conditional on its counter, committed on its own
#    (autocommit) without waiting for the WAL flush: ``set_config(…, true)`` is SET LOCAL in
#    the statement itself, so it costs no round trip and ends with the statement's own
#    transaction. Safe for the reason in ``unflushed_commit``.
RECORD_CHARGE = ledger.Statement(
    postgresql=f"""
    UPDATE {JOB}
       SET parameter = %(parameter)s, custom_text = %(reference)s, opt_counter = %(next)s,
           last_update = %(now)s
     WHERE scheduled_id = %(id)s AND opt_counter = %(read)s
       AND set_config('synchronous_commit', 'off', true) IS NOT NULL
"""
)


def record_charge(job: SubscriptionJob, *, reference: str, now: datetime) -> bool:
    """Write ``job``'s charge step in one statement, committed on its own; False (nothing
    written) when its counter moved since it was read. Moves the object's counter on."""
    counter = next_counter(job.opt_counter)
    if not set_based():
        written = SubscriptionJob.objects.filter(pk=job.pk, opt_counter=job.opt_counter).update(
            parameter=JobStep.CHARGE, custom_text=reference, opt_counter=counter, last_update=now
        )
    else:
        written = ledger.execute(
            RECORD_CHARGE,
            {
                "parameter": JobStep.CHARGE.value,
                "reference": reference,
                "next": counter,
                "now": now,
                "id": job.pk,
                "read": job.opt_counter,
            },
        )
    if written:
        job.parameter, job.custom_text = JobStep.CHARGE, reference
        job.opt_counter, job.last_update = counter, now
    return bool(written)


# -- rewind_charge: a job whose record says "charged" while the gateway says nothing was taken
#    goes back to the step before the charge, with no reference, conditional on its counter,
#    committed on its own: its retry then charges instead of trusting the record again.
REWIND_CHARGE = ledger.Statement(
    postgresql=f"""
    UPDATE {JOB}
       SET parameter = %(parameter)s, custom_text = '', opt_counter = %(next)s,
           last_update = %(now)s
     WHERE scheduled_id = %(id)s AND opt_counter = %(read)s
"""
)


def rewind_charge(job: SubscriptionJob, *, now: datetime) -> bool:
    """Put ``job`` back at ``create_order`` with no charge reference, in one statement
    committed on its own; False (nothing written) when its counter moved since it was read.
    Moves the object's counter on."""
    counter = next_counter(job.opt_counter)
    values = {"parameter": JobStep.CREATE_ORDER.value, "custom_text": ""}
    if not set_based():
        written = SubscriptionJob.objects.filter(pk=job.pk, opt_counter=job.opt_counter).update(
            opt_counter=counter, last_update=now, **values
        )
    else:
        written = ledger.execute(
            REWIND_CHARGE,
            {
                "parameter": values["parameter"],
                "next": counter,
                "now": now,
                "id": job.pk,
                "read": job.opt_counter,
            },
        )
    if written:
        job.parameter, job.custom_text = JobStep.CREATE_ORDER, ""
        job.opt_counter, job.last_update = counter, now
    return bool(written)


# -- write_steps: each job's step columns and its next counter (rows locked by the caller).
WRITE_STEPS = ledger.Statement(
    postgresql=f"""
    UPDATE {JOB} AS j
       SET status = v.status, retry_count = v.retry_count, parameter = v.parameter,
           custom_decimal = v.custom_decimal, custom_text = v.custom_text,
           opt_counter = v.opt_counter, last_update = %(now)s
      FROM json_to_recordset(%(rows)s::json) AS v(
           id bigint, status integer, retry_count integer, parameter varchar,
           custom_decimal numeric, custom_text varchar, opt_counter smallint)
     WHERE j.scheduled_id = v.id
"""
)


def write_steps(jobs: Sequence[SubscriptionJob], *, now: datetime) -> None:
    """Write each job's step columns and counter as they are on the objects."""
    if not jobs:
        return
    if not set_based():
        for job in jobs:
            SubscriptionJob.objects.filter(pk=job.pk).update(
                opt_counter=job.opt_counter,
                last_update=now,
                **{name: getattr(job, name) for name in STEP_COLUMNS},
            )
        return
    rows = [
        {
            "id": job.pk,
            "status": int(job.status),
            "retry_count": job.retry_count,
            "parameter": job.parameter,
            "custom_decimal": None if job.custom_decimal is None else str(job.custom_decimal),
            "custom_text": job.custom_text,
            "opt_counter": job.opt_counter,
        }
        for job in jobs
    ]
    ledger.execute(WRITE_STEPS, {"rows": json.dumps(rows), "now": now})


# -- confirm_orders: the pending orders of (subscription, period start), paid by a charge.
CONFIRM_ORDERS = ledger.Statement(
    postgresql=f"""
    UPDATE {ORDER} AS o
       SET status = %(confirmed)s, confirmed_at = %(now)s, charge_reference = v.reference
      FROM json_to_recordset(%(rows)s::json) AS v(
           subscription_id bigint, period_start timestamptz, reference varchar)
     WHERE o.subscription_id = v.subscription_id AND o.period_start = v.period_start
       AND o.status = %(pending)s
    RETURNING o.subscription_id, o.period_start
"""
)


def confirm_orders(
    paid: Sequence[tuple[int, datetime, str]], *, now: datetime
) -> set[tuple[int, datetime]]:
    """Confirm the pending order of each (subscription id, period start), with its charge;
    the (subscription id, period start) of the orders confirmed."""
    if not paid:
        return set()
    confirmed, pending = OrderStatus.CONFIRMED, OrderStatus.PENDING
    if not set_based():
        done = set()
        for subscription_id, start, reference in paid:
            if Order.objects.filter(
                subscription_id=subscription_id, period_start=start, status=pending
            ).update(status=confirmed, confirmed_at=now, charge_reference=reference):
                done.add((subscription_id, start))
        return done
    rows = [
        {"subscription_id": s, "period_start": start.isoformat(), "reference": reference}
        for s, start, reference in paid
    ]
    found = ledger.rows(
        CONFIRM_ORDERS,
        {"rows": json.dumps(rows), "now": now, "confirmed": confirmed, "pending": pending},
    )
    return {(int(order["subscription_id"]), order["period_start"]) for order in found}


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


# -- test_gateway_charge: the test gateway's charge in one round trip. It inserts the charge
#    unless the key was seen (a replay) or the customer's script says decline or fail, and
#    returns what it found either way; the caller acts on the rare outcomes.
TEST_GATEWAY_CHARGE = ledger.Statement(
    postgresql=f"""
    WITH seen AS (
        SELECT reference, customer, amount::text AS amount FROM {CHARGE}
         WHERE idempotency_key = %(key)s
    ), script AS (
        SELECT errors_left, declines_left FROM {SCRIPT}
         WHERE customer = %(customer)s AND (errors_left > 0 OR declines_left > 0)
           FOR NO KEY UPDATE
    ), inserted AS (
        INSERT INTO {CHARGE} (reference, idempotency_key, customer, amount, created_at)
        SELECT %(reference)s, %(key)s, %(customer)s, %(amount)s, %(now)s
         WHERE NOT EXISTS (SELECT 1 FROM seen) AND NOT EXISTS (SELECT 1 FROM script)
            ON CONFLICT (idempotency_key) DO NOTHING
        RETURNING reference
    )
    SELECT i.reference AS inserted, s.reference AS seen_reference,
           s.customer AS seen_customer, s.amount AS seen_amount,
           c.errors_left AS errors_left, c.declines_left AS declines_left
      FROM (SELECT 1) AS one
      LEFT JOIN inserted AS i ON true
      LEFT JOIN seen AS s ON true
      LEFT JOIN script AS c ON true
"""
)


def test_gateway_charge(
    *, key: str, customer: str, amount: Decimal, reference: str, now: datetime
) -> GatewayCharged:
    """What one charge of the test gateway found (in the caller's transaction)."""
    if not set_based():
        return _test_gateway_charge_with_orm(
            key=key, customer=customer, amount=amount, reference=reference, now=now
        )
    found: GatewayCharged = ledger.row(
        TEST_GATEWAY_CHARGE,
        {"key": key, "customer": customer, "amount": amount, "reference": reference, "now": now},
        into=GatewayCharged,
    )
    return found


def _test_gateway_charge_with_orm(
    *, key: str, customer: str, amount: Decimal, reference: str, now: datetime
) -> GatewayCharged:
    """``TEST_GATEWAY_CHARGE`` on SQLite: the same reads and insert, one statement each."""
    seen = GatewayCharge.objects.filter(idempotency_key=key).first()
    if seen is not None:
        return GatewayCharged(None, seen.reference, seen.customer, str(seen.amount), None, None)
    script = (
        GatewayScript.objects.select_for_update(no_key=True)
        .filter(customer=customer)
        .filter(Q(errors_left__gt=0) | Q(declines_left__gt=0))
        .first()
    )
    if script is not None:
        return GatewayCharged(None, None, None, None, script.errors_left, script.declines_left)
    GatewayCharge.objects.create(
        reference=reference, idempotency_key=key, customer=customer, amount=amount, created_at=now
    )
    return GatewayCharged(reference, None, None, None, None, None)
