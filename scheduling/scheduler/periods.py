"""The scheduler's duty of the partitioned history: periods made before they come due.

On PostgreSQL after the partitioning migration, every scheduler makes the partitions of the
current period and the next ones (``ledger.partitions.make_ahead``) when it starts and then
every ``EVERY`` seconds; an operator never makes them. Several schedulers may try at once:
making a period takes a lock on the default partitions, and one that finds the period made
(PostgreSQL refuses a second, overlapping partition) leaves it. A failure is logged and tried
again next time: the rows of a period not yet made go to the default partition meanwhile, and
move into the period when it is made, so nothing waits on this duty.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

from django.db import DatabaseError

from scheduling import conf
from scheduling.ledger import partitions
from scheduling.scheduler.duty import Every

logger = logging.getLogger("scheduling")

#: Seconds between two looks at the periods ahead.
EVERY = 600.0


class PeriodKeeper:
    """Makes the history's periods ahead of now, at most once per ``EVERY`` seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = Every(EVERY, clock)
        self._partitioned: bool | None = None

    def maybe(self, now: datetime) -> list[partitions.Period]:
        if not self.every.due():
            return []
        try:
            if self._partitioned is None:
                self._partitioned = partitions.is_partitioned()
            if not self._partitioned:
                return []
            return partitions.make_ahead(now=now, days=conf.get("HISTORY_PARTITION_DAYS"))
        except DatabaseError as exc:
            self._partitioned = None
            logger.warning("history.partition_failed error=%s", str(exc).splitlines()[0])
            return []
