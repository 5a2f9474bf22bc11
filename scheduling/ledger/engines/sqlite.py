"""The SQLite engine: the embedded default, the ORM's forms of every verb.

SQLite takes one writer at a time (its transactions start with ``BEGIN IMMEDIATE``), so a
lock is a write: the first write of a transaction waits for every other writer, and holds
them off until it commits. Several schedulers are safe, and only take turns
(``scheduling.W011`` warns of them: ``one_writer``).
"""

from __future__ import annotations

from django.db.models import F

from scheduling.ledger.engines.orm import OrmEngine
from scheduling.models import DeclarationSet, Job


class SQLiteEngine(OrmEngine):
    vendor = "sqlite"
    one_writer = True

    def lock_slot(self, *, job_id: int, limit_job: bool, owner_id: int | None) -> None:
        """A write takes the one write lock before anything is counted."""
        Job.objects.filter(pk=job_id).update(updated_at=F("updated_at"))

    def lock_declarations(self) -> None:
        """A write takes the one write lock before anything is read."""
        DeclarationSet.objects.filter(pk=0).update(entries=0)
