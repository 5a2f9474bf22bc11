"""The subscriptions ledger's engines: each database's writes for the verbs of ``ledger``.

``PostgreSQLLedger`` sends the statements of ``sql/postgresql.sql`` (one ``UPDATE … FROM
json_to_recordset`` per step, ``FOR KEY SHARE``, commits that do not wait for the WAL flush);
``OrmLedger`` writes the same rows with the ORM, one statement per row, for the embedded
SQLite and any other database. Which one a connection gets is decided once, by the engine's
runner (``ledger.Engines`` in ``subscriptions.ledger``); nothing here asks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from scheduling.api import ledger, load_statements
from subscriptions.models import DueBatch, Order, OrderStatus, SubscriptionJob

STATEMENTS = load_statements("subscriptions", "sql/postgresql.sql", form="postgresql")

#: The job columns a renewal step writes, besides the counter and ``last_update``.
STEP_COLUMNS = ("status", "retry_count", "parameter", "custom_decimal", "custom_text")


class OrmLedger:
    """The ORM's forms: one statement per row; nothing to say about the WAL."""

    def __init__(self, using: str) -> None:
        self.using = using

    def unflushed_commit(self) -> None:
        return

    def share_batches(self, ids: Sequence[int]) -> set[int]:
        """The caller's write already holds the database's write lock (SQLite)."""
        return set(
            DueBatch.objects.filter(pk__in=ids, closed_at__isnull=False).values_list(
                "pk", flat=True
            )
        )

    def write_counted(
        self, job_id: int, *, read: int, counter: int, values: Mapping[str, Any], now: datetime
    ) -> int:
        """One job's columns ``values`` and its next counter, if its counter is still
        ``read``; how many rows were written (0 or 1)."""
        return SubscriptionJob.objects.filter(pk=job_id, opt_counter=read).update(
            opt_counter=counter, last_update=now, **values
        )

    def record_charge(
        self, job_id: int, *, read: int, counter: int, parameter: str, reference: str,
        now: datetime,
    ) -> int:  # fmt: skip
        values = {"parameter": parameter, "custom_text": reference}
        return self.write_counted(job_id, read=read, counter=counter, values=values, now=now)

    def rewind_charge(
        self, job_id: int, *, read: int, counter: int, parameter: str, now: datetime
    ) -> int:
        values = {"parameter": parameter, "custom_text": ""}
        return self.write_counted(job_id, read=read, counter=counter, values=values, now=now)

    def write_steps(self, jobs: Sequence[SubscriptionJob], *, now: datetime) -> None:
        for job in jobs:
            SubscriptionJob.objects.filter(pk=job.pk).update(
                opt_counter=job.opt_counter,
                last_update=now,
                **{name: getattr(job, name) for name in STEP_COLUMNS},
            )

    def confirm_orders(
        self, paid: Sequence[tuple[int, datetime, str]], *, now: datetime
    ) -> set[tuple[int, datetime]]:
        done = set()
        for subscription_id, start, reference in paid:
            if Order.objects.filter(
                subscription_id=subscription_id, period_start=start, status=OrderStatus.PENDING
            ).update(status=OrderStatus.CONFIRMED, confirmed_at=now, charge_reference=reference):
                done.add((subscription_id, start))
        return done


class PostgreSQLLedger(OrmLedger):
    """The statements of ``sql/postgresql.sql``, one round trip per verb."""

    def unflushed_commit(self) -> None:
        ledger.execute(STATEMENTS["unflushed_commit"], using=self.using)

    def share_batches(self, ids: Sequence[int]) -> set[int]:
        found = ledger.rows(STATEMENTS["share_batches"], {"ids": list(ids)}, using=self.using)
        return {int(batch["id"]) for batch in found if batch["closed"]}

    def record_charge(
        self, job_id: int, *, read: int, counter: int, parameter: str, reference: str,
        now: datetime,
    ) -> int:  # fmt: skip
        """Committed on its own (autocommit) without waiting for the WAL flush:
        ``set_config(…, true)`` in the statement itself costs no round trip."""
        return ledger.execute(
            STATEMENTS["record_charge"],
            {
                "parameter": parameter,
                "reference": reference,
                "next": counter,
                "now": now,
                "id": job_id,
                "read": read,
            },
            using=self.using,
        )

    def rewind_charge(
        self, job_id: int, *, read: int, counter: int, parameter: str, now: datetime
    ) -> int:
        return ledger.execute(
            STATEMENTS["rewind_charge"],
            {"parameter": parameter, "next": counter, "now": now, "id": job_id, "read": read},
            using=self.using,
        )

    def write_steps(self, jobs: Sequence[SubscriptionJob], *, now: datetime) -> None:
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
        ledger.execute(
            STATEMENTS["write_steps"], {"rows": json.dumps(rows), "now": now}, using=self.using
        )

    def confirm_orders(
        self, paid: Sequence[tuple[int, datetime, str]], *, now: datetime
    ) -> set[tuple[int, datetime]]:
        rows = [
            {"subscription_id": s, "period_start": start.isoformat(), "reference": reference}
            for s, start, reference in paid
        ]
        found = ledger.rows(
            STATEMENTS["confirm_orders"],
            {
                "rows": json.dumps(rows),
                "now": now,
                "confirmed": OrderStatus.CONFIRMED,
                "pending": OrderStatus.PENDING,
            },
            using=self.using,
        )
        return {(int(order["subscription_id"]), order["period_start"]) for order in found}
