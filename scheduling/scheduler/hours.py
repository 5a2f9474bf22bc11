"""The scheduler's duty of the dashboard's hourly chart: each hour counted once it settles.

Every ``EVERY`` seconds a scheduler counts the chart's settled hours that have no row yet
(``scheduling.stages.hours.settle_due``): one hour's executions, once an hour, whatever the
history holds; the dashboard then counts only the hours that have not settled. Several
schedulers may count the same hour at once: the first row stays. A failure is logged and
tried again next time; a page that finds an hour missing counts it itself meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

from django.db import DatabaseError

from scheduling.scheduler.duty import Every
from scheduling.stages import hours

logger = logging.getLogger("scheduling")

#: Seconds between two looks at the settled hours.
EVERY = 300.0


class HourKeeper:
    """Counts the hours that have settled, at most once per ``EVERY`` seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = Every(EVERY, clock)

    def maybe(self, now: datetime) -> int:
        if not self.every.due():
            return 0
        try:
            return hours.settle_due(now=now)
        except DatabaseError as exc:
            logger.warning("dashboard.hours_failed error=%s", str(exc).splitlines()[0])
            return 0
