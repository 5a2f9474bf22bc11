"""One RRULE as the calendars hold it (``Rule``: its open fields made explicit, the days and
times it picks), the limits on a recurrence set, and the errors a set is refused with.

Pure, like the rest of ``scheduling.timing``'s calendars: no clock, no database, no Django.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from dateutil import rrule as du

#: Longest text accepted: a rule and a few years of holidays fit many times over.
MAX_TEXT = 4000


MAX_LINES = 100


MAX_DATES = 1000


MAX_INTERVAL = 1000


MAX_COUNT = 10_000


#: How far ahead a search for the next occurrence looks (cron's horizon too).
HORIZON_YEARS = 50


WEEKDAYS = (du.MO, du.TU, du.WE, du.TH, du.FR, du.SA, du.SU)


_TIME_KEYWORDS = ("byhour", "byminute", "bysecond")


_DAY_KEYWORDS = ("byweekday", "bymonthday", "byyearday", "byweekno")


SECOND = timedelta(seconds=1)


class CalendarError(ValueError):
    """A recurrence set that cannot be used; str() is a one-line human reason."""


class CalendarOverBudget(CalendarError):
    """Proving that a set fires at all took longer than ``seconds`` of CPU (``parse``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"its next occurrence cannot be found within the timing budget of "
            f"{seconds * 1000:g} ms of CPU; simplify the rule (fewer BYxxx values, fewer dates)"
        )
        self.seconds = seconds


@dataclass(frozen=True)
class Rule:
    """One RRULE, its open fields made explicit; ``count`` and ``until`` kept apart."""

    freq: int
    interval: int
    wkst: int
    fields: tuple[tuple[str, object], ...]
    count: int | None
    until: datetime | None  # a naive wall time, inclusive
    until_instant: datetime | None = None  # UNTIL given in UTC (``...Z``), aware

    @functools.cached_property
    def positions(self) -> tuple[int, ...]:
        """The ``BYSETPOS`` values (empty without one)."""
        return tuple(sorted(set(dict(self.fields).get("bysetpos") or ())))  # type: ignore[call-overload]

    @functools.cached_property
    def whole_periods(self) -> bool:
        """Days are picked per week, month or year, not per day: a ``BYSETPOS`` rule picks
        among all of a period's days."""
        return bool(self.positions) and self.freq < du.DAILY

    @functools.cached_property
    def day_fields(self) -> dict[str, object]:
        """The fields that pick days, for dateutil to list them a year at a time (the
        INTERVAL grid and the times are this module's): a rule matching few days costs
        dateutil a step per period of its own frequency, a millisecond a day at worst."""
        found = {k: v for k, v in self.fields if k not in _TIME_KEYWORDS and k != "bysetpos"}
        if self.freq != du.YEARLY and not any(k in found for k in _DAY_KEYWORDS):
            found["byweekday"] = tuple(range(7))  # a yearly rule needs days, or takes one
        if self.freq == du.MONTHLY:  # a numbered weekday (2TU) counts within its month
            found.setdefault("bymonth", tuple(range(1, 13)))
        return {**found, "byhour": (0,), "byminute": (0,), "bysecond": (0,)}

    @functools.cached_property
    def clock(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The hours, minutes and seconds the rule names, each sorted (all when left open)."""
        fields = dict(self.fields)
        return (
            tuple(sorted(set(fields.get("byhour") or range(24)))),  # type: ignore[call-overload]
            tuple(sorted(set(fields.get("byminute") or range(60)))),  # type: ignore[call-overload]
            tuple(sorted(set(fields["bysecond"]))),  # type: ignore[call-overload]
        )

    def on_grid(self, offset: int, hour: int, minute: int = 0) -> bool:
        """Whether the hour (minute) of the day ``offset`` days after the anchor's is on an
        hourly (minutely) rule's INTERVAL grid, counted from the anchor's midnight."""
        if self.freq == du.HOURLY:
            return not (offset * 24 + hour) % self.interval
        if self.freq == du.MINUTELY:
            return not (offset * 1440 + hour * 60 + minute) % self.interval
        return True

    def day_times(self, offset: int, after: time | None) -> Iterator[time]:
        """The times of the day ``offset`` days after the anchor's, after ``after``, in order.

        Daily and coarser rules fire at every time of a day they match; hourly and minutely
        ones at the times on their INTERVAL grid, counted from the anchor's midnight. Walked,
        never listed: a rule naming every second has 86,400 a day.
        """
        hours, minutes, seconds = self.clock
        for hour in hours:
            if after is not None and hour < after.hour:
                continue
            if self.freq == du.HOURLY and not self.on_grid(offset, hour):
                continue
            for minute in minutes:
                if after is not None and (hour, minute) < (after.hour, after.minute):
                    continue
                if self.freq == du.MINUTELY and not self.on_grid(offset, hour, minute):
                    continue
                for second in seconds:
                    moment = time(hour, minute, second)
                    if after is None or moment > after:
                        yield moment

    def picked(self, days: list[date], offset: int) -> list[datetime]:
        """The walls ``BYSETPOS`` picks from a period of ``days`` (sorted; ``offset``: the
        first's days after the anchor's), in order.

        A period's set is its days times its times, in order, so the Nth is day N // T at time
        N % T (T times a period) and is found by arithmetic, never by building the set; an
        hourly (minutely) period is one hour (minute) of a matching day, so on a day each of
        its hours (minutes) on the grid is a period of its own.
        """
        hours, minutes, seconds = self.clock
        if self.freq <= du.DAILY:
            periods = [(days, (hours, minutes, seconds), ())]
        elif self.freq == du.HOURLY:
            periods = [
                (days, (minutes, seconds), (hour,)) for hour in hours if self.on_grid(offset, hour)
            ]
        else:
            periods = [
                (days, (seconds,), (hour, minute))
                for hour in hours
                for minute in minutes
                if self.on_grid(offset, hour, minute)
            ]
        found: list[datetime] = []
        for period_days, dims, fixed in periods:
            found.extend(
                datetime.combine(period_days[day], time(*fixed, *parts))
                for day, parts in _picks(self.positions, len(period_days), dims)
            )
        return found


def _picks(
    positions: tuple[int, ...], days: int, dims: tuple[tuple[int, ...], ...]
) -> list[tuple[int, tuple[int, ...]]]:
    """The (day index, time parts) each position names in ``days`` days times the product of
    ``dims``, in order, without repeats; a position beyond the set names nothing (dateutil's
    reading of ``BYSETPOS``)."""
    size = 1
    for values in dims:
        size *= len(values)
    total = days * size
    found = set()
    for position in positions:
        index = position - 1 if position > 0 else total + position
        if not 0 <= index < total:
            continue
        day, rest = divmod(index, size)
        parts = []
        for values in reversed(dims):
            rest, at = divmod(rest, len(values))
            parts.append(values[at])
        found.add((day, tuple(reversed(parts))))
    return sorted(found)
