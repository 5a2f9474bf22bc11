"""The subscriptions app's hand-written statements, by name, and the functions that run them.

A due batch writes the step columns of up to a few hundred jobs, and confirms as many
orders, at each step. The ORM's ``bulk_update`` spells that as one CASE per column per row,
and building it cost more than everything else a renewal does; one ``UPDATE … FROM
json_to_recordset`` per step is a single short statement. SQLite (the embedded demo) gets the
ORM twin next to each call: one UPDATE per row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection

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

# -- share_batches: hold the batches a placer just wrote jobs into, and say which are closed.
SHARE_BATCHES = f"""
    SELECT id, closed_at IS NOT NULL FROM {BATCH}
     WHERE id = ANY(%(ids)s) ORDER BY id FOR KEY SHARE
"""

# -- record_charge: one job's charge step, conditional on its counter, committed on its own
#    (autocommit) without waiting for the WAL flush: ``set_config(…, true)`` is SET LOCAL in
#    the statement itself, so it costs no round trip and ends with the statement's own
#    transaction. Safe for the reason in ``renewals._unflushed_commit``.
RECORD_CHARGE = f"""
    UPDATE {JOB}
       SET parameter = %(parameter)s, custom_text = %(reference)s, opt_counter = %(next)s,
           last_update = %(now)s
     WHERE scheduled_id = %(id)s AND opt_counter = %(read)s
       AND set_config('synchronous_commit', 'off', true) IS NOT NULL
"""

# -- rewind_charge: a job whose record says "charged" while the gateway says nothing was taken
#    goes back to the step before the charge, with no reference, conditional on its counter,
#    committed on its own: its retry then charges instead of trusting the record again.
REWIND_CHARGE = f"""
    UPDATE {JOB}
       SET parameter = %(parameter)s, custom_text = '', opt_counter = %(next)s,
           last_update = %(now)s
     WHERE scheduled_id = %(id)s AND opt_counter = %(read)s
"""

# -- write_steps: each job's step columns and its next counter (rows locked by the caller).
WRITE_STEPS = f"""
    UPDATE {JOB} AS j
       SET status = v.status, retry_count = v.retry_count, parameter = v.parameter,
           custom_decimal = v.custom_decimal, custom_text = v.custom_text,
           opt_counter = v.opt_counter, last_update = %(now)s
      FROM json_to_recordset(%(rows)s::json) AS v(
           id bigint, status integer, retry_count integer, parameter varchar,
           custom_decimal numeric, custom_text varchar, opt_counter smallint)
     WHERE j.scheduled_id = v.id
"""

# -- confirm_orders: the pending orders of (subscription, period start), paid by a charge.
CONFIRM_ORDERS = f"""
    UPDATE {ORDER} AS o
       SET status = %(confirmed)s, confirmed_at = %(now)s, charge_reference = v.reference
      FROM json_to_recordset(%(rows)s::json) AS v(
           subscription_id bigint, period_start timestamptz, reference varchar)
     WHERE o.subscription_id = v.subscription_id AND o.period_start = v.period_start
       AND o.status = %(pending)s
    RETURNING o.subscription_id, o.period_start
"""


# -- test_gateway_charge: the test gateway's charge in one round trip. It inserts the charge
#    unless the key was seen (a replay) or the customer's script says decline or fail, and
#    returns what it found either way; the caller acts on the rare outcomes.
TEST_GATEWAY_CHARGE = f"""
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
    SELECT i.reference, s.reference, s.customer, s.amount, c.errors_left, c.declines_left
      FROM (SELECT 1) AS one
      LEFT JOIN inserted AS i ON true
      LEFT JOIN seen AS s ON true
      LEFT JOIN script AS c ON true
"""


def test_gateway_charge(
    *, key: str, customer: str, amount: Decimal, reference: str, now: datetime
) -> tuple[Any, ...]:
    """(inserted reference, seen reference, seen customer, seen amount, errors left,
    declines left) for one charge (PostgreSQL; the caller's transaction)."""
    with connection.cursor() as cursor:
        cursor.execute(
            TEST_GATEWAY_CHARGE,
            {
                "key": key,
                "customer": customer,
                "amount": amount,
                "reference": reference,
                "now": now,
            },
        )
        return tuple(cursor.fetchone())


def postgres() -> bool:
    return connection.vendor == "postgresql"


def share_batches(ids: Sequence[int]) -> set[int]:
    """Lock the batches ``ids`` against closing until the caller commits (``FOR KEY SHARE``);
    the ids of those a run closed before the lock was granted."""
    if not postgres():  # SQLite: the caller's write already holds the database's write lock
        return set(
            DueBatch.objects.filter(pk__in=ids, closed_at__isnull=False).values_list(
                "pk", flat=True
            )
        )
    with connection.cursor() as cursor:
        cursor.execute(SHARE_BATCHES, {"ids": list(ids)})
        return {int(pk) for pk, closed in cursor.fetchall() if closed}


def record_charge(job: SubscriptionJob, *, reference: str, now: datetime) -> bool:
    """Write ``job``'s charge step in one statement, committed on its own; False (nothing
    written) when its counter moved since it was read. Moves the object's counter on."""
    counter = next_counter(job.opt_counter)
    if not postgres():
        written = SubscriptionJob.objects.filter(pk=job.pk, opt_counter=job.opt_counter).update(
            parameter=JobStep.CHARGE, custom_text=reference, opt_counter=counter, last_update=now
        )
    else:
        with connection.cursor() as cursor:
            cursor.execute(
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
            written = cursor.rowcount
    if written:
        job.parameter, job.custom_text = JobStep.CHARGE, reference
        job.opt_counter, job.last_update = counter, now
    return bool(written)


def rewind_charge(job: SubscriptionJob, *, now: datetime) -> bool:
    """Put ``job`` back at ``create_order`` with no charge reference, in one statement
    committed on its own; False (nothing written) when its counter moved since it was read.
    Moves the object's counter on."""
    counter = next_counter(job.opt_counter)
    values = {"parameter": JobStep.CREATE_ORDER.value, "custom_text": ""}
    if not postgres():
        written = SubscriptionJob.objects.filter(pk=job.pk, opt_counter=job.opt_counter).update(
            opt_counter=counter, last_update=now, **values
        )
    else:
        with connection.cursor() as cursor:
            cursor.execute(
                REWIND_CHARGE,
                {
                    "parameter": values["parameter"],
                    "next": counter,
                    "now": now,
                    "id": job.pk,
                    "read": job.opt_counter,
                },
            )
            written = cursor.rowcount
    if written:
        job.parameter, job.custom_text = JobStep.CREATE_ORDER, ""
        job.opt_counter, job.last_update = counter, now
    return bool(written)


def write_steps(jobs: Sequence[SubscriptionJob], *, now: datetime) -> None:
    """Write each job's step columns and counter as they are on the objects."""
    if not jobs:
        return
    if not postgres():
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
    with connection.cursor() as cursor:
        cursor.execute(WRITE_STEPS, {"rows": json.dumps(rows), "now": now})


def confirm_orders(
    paid: Sequence[tuple[int, datetime, str]], *, now: datetime
) -> set[tuple[int, datetime]]:
    """Confirm the pending order of each (subscription id, period start), with its charge;
    the (subscription id, period start) of the orders confirmed."""
    if not paid:
        return set()
    confirmed, pending = OrderStatus.CONFIRMED, OrderStatus.PENDING
    if not postgres():
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
    with connection.cursor() as cursor:
        cursor.execute(
            CONFIRM_ORDERS,
            {"rows": json.dumps(rows), "now": now, "confirmed": confirmed, "pending": pending},
        )
        return {(int(s), start) for s, start in cursor.fetchall()}
