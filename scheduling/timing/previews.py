"""The next occurrences of a timing, for people to check it before it runs.

Pure, like the rest of ``scheduling.timing``: a ``FiringRule`` and a ``now`` in, aware datetimes
out. The command line (``jobs next``), ``scheduling.api.next_occurrences`` and the admin's
preview all list what this returns, so they agree with each other and with the claim, which
walks the same ``FiringRule.next_after``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, tzinfo

from scheduling.timing.budgets import Budget
from scheduling.timing.schedules import FiringRule, ScheduleError

#: What a preview lists when not told (the admin's list, ``jobs next`` without ``--count``).
DEFAULT_COUNT = 10
#: The most a preview lists: a person reads them, and each costs a step of the timing.
MAX_COUNT = 1000
#: The longest (wall-clock) seconds a preview lists for: it answers a person, or a page's
#: script, within a second whatever the timing; each occurrence is bounded by the timing's
#: own budget besides.
MAX_SECONDS = 0.5


@dataclass(frozen=True)
class Preview:
    """Up to ``count`` occurrences in order, in the timing's zone.

    ``ended`` says the schedule is over before ``count`` were found (its end, its COUNT or
    UNTIL, a one-off); ``error`` says why the list stops early otherwise (the next occurrence
    falls beyond the calendar, or finding it took longer than the timing's budget);
    ``cut_short`` that listing more would have taken longer than the preview may.
    """

    occurrences: tuple[datetime, ...]
    zone: tzinfo
    ended: bool
    error: ScheduleError | None = None
    cut_short: bool = False

    @property
    def note(self) -> str:
        """What a reader should know of a list cut short by its time, or ""."""
        if not self.cut_short:
            return ""
        return (
            f"Listed {len(self.occurrences)}: finding more would take longer than the "
            f"preview's {MAX_SECONDS:g} s."
        )


def check_count(count: int) -> int:
    """``count`` when it is one to ``MAX_COUNT``; ScheduleError on ``count`` otherwise."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        raise ScheduleError("count", f"must be a whole number from 1 to {MAX_COUNT}, got {count!r}")
    return count


def preview(
    timing: FiringRule,
    *,
    now: datetime,
    anchor: datetime,
    count: int,
    total: Budget | None = None,
) -> Preview:
    """The first ``count`` occurrences at or after ``now`` (anchor: the job's creation).

    Each element is an aware datetime in the timing's zone with the offset in force at that
    instant, so a daylight-saving change shows as a changed offset. The list stops when
    ``total`` is spent (``MAX_SECONDS`` of wall-clock time when not given) and says so; each
    occurrence is bounded by the timing's own budget.
    """
    check_count(count)
    total = total or Budget(MAX_SECONDS, clock=time.monotonic)
    found: list[datetime] = []
    error = None
    ended = cut_short = False
    try:
        current = timing.occurrence_at_or_after(now, anchor=anchor)
        while current is not None and len(found) < count:
            found.append(current.astimezone(timing.zone))
            if len(found) < count:
                if total.exceeded:
                    cut_short = True
                    break
                current = timing.next_after(current, anchor=anchor)
        ended = current is None
    except ScheduleError as exc:
        error = exc
    return Preview(
        occurrences=tuple(found), zone=timing.zone, ended=ended, error=error, cut_short=cut_short
    )
