"""The scheduler's duty of the dashboard's hourly chart: each hour counted once it settles.

Interval: every 300 seconds (``HourKeeper.interval``), and at once when a scheduler starts.
It counts the chart's settled hours that have no row yet (``scheduling.stages.hours.settle_due``):
one hour's executions, once an hour, whatever the history holds; the dashboard then counts
only the hours that have not settled. Several schedulers may count the same hour at once: the
first row stays. A failure is logged (``dashboard.hours_failed``) and tried again next time; a
page that finds an hour missing counts it itself meanwhile.

Usage: one of ``loop.DUTIES``, so every scheduler runs it after its ticks; on its own,
``HourKeeper().maybe(timezone.now())`` returns how many hours it counted (0 until it is due
again).
"""

from __future__ import annotations

from datetime import datetime

from scheduling.scheduler.duty import Duty
from scheduling.stages import hours


class HourKeeper(Duty[int]):
    """Counts the hours that have settled; returns how many it counted."""

    interval = 300.0
    event = "dashboard.hours_failed"

    def run(self, now: datetime) -> int:
        return hours.settle_due(now=now)

    def idle(self) -> int:
        return 0
