"""The scheduler's duty of the partitioned history: periods made before they come due.

Interval: every 600 seconds (``PeriodKeeper.interval``), and at once when a scheduler starts.
On PostgreSQL after the partitioning migration, every scheduler makes the partitions of the
current period and the next ones (``ledger.partitions.make_ahead``); an operator never makes
them. Several schedulers may try at once: making a period takes a lock on the default
partitions, and one that finds the period made (PostgreSQL refuses a second, overlapping
partition) leaves it. A failure is logged (``history.partition_failed``) and tried again next
time: the rows of a period not yet made go to the default partition meanwhile, and move into
the period when it is made, so nothing waits on this duty. On a history that is not
partitioned (SQLite, or before the migration) it does nothing.

Usage: one of ``loop.DUTIES``, so every scheduler runs it after its ticks; on its own,
``PeriodKeeper().maybe(timezone.now())`` returns the periods it made (none until it is due
again).
"""

from __future__ import annotations

from datetime import datetime

from django.db import DatabaseError

from scheduling import conf
from scheduling.ledger import partitions
from scheduling.scheduler.duty import Duty


class PeriodKeeper(Duty[list[partitions.Period]]):
    """Makes the history's periods ahead of now; returns the periods it made."""

    interval = 600.0
    event = "history.partition_failed"
    _partitioned: bool | None = None

    def run(self, now: datetime) -> list[partitions.Period]:
        if self._partitioned is None:
            self._partitioned = partitions.is_partitioned()
        if not self._partitioned:
            return []
        return partitions.make_ahead(now=now, days=conf.get("HISTORY_PARTITION_DAYS"))

    def idle(self) -> list[partitions.Period]:
        return []

    def failed(self, exc: DatabaseError) -> None:
        self._partitioned = None
