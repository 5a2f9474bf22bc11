"""Walking a calendar's rule: wall times window by window (dateutil lists the days, the times
and the INTERVAL grid are walked here), the instants each wall time is in a zone, and what a
``COUNT`` rule has expanded so far (``Counted``). The rules of the walk are
``scheduling.timing.calendars``' module docstring.
"""

from __future__ import annotations

import itertools
import threading
from bisect import bisect_right
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from itertools import islice

from dateutil import rrule as du

from scheduling.timing.budgets import Budget
from scheduling.timing.rrule import SECOND, CalendarError, Rule


class Counted:
    """What a ``COUNT`` rule has expanded from one anchor: its walls so far, where the next
    window starts and how many are still to come (expanded on demand, a window at a time)."""

    def __init__(self, start: datetime, count: int) -> None:
        self.walls: list[datetime] = []
        self.first = start
        self.next_start: datetime | None = start
        self.remaining = count
        self.lock = threading.Lock()

    def extend(self, rule: Rule, budget: Budget) -> None:
        """Expand one more window (never past the count); the caller holds ``lock``."""
        budget.check()
        start = self.next_start
        if start is None or self.remaining <= 0:
            self.next_start = None
            return
        following = advance(start, rule)
        end = datetime.max if following is None else following - SECOND
        walls = window_walls(rule, self.first, start, end, datetime.min, frozenset(), budget)
        found = []
        for wall in islice(walls, self.remaining):
            if not len(found) % 256:
                budget.check()  # up to MAX_COUNT walls a window: checked as they are made
            found.append(wall)
        self.walls.extend(found)
        self.remaining -= len(found)
        self.next_start = following if self.remaining > 0 else None


def walk_walls(
    rule: Rule,
    first: datetime,
    lowest: datetime,
    until: datetime,
    exdays: frozenset[date],
    budget: Budget,
) -> Iterator[datetime]:
    """The rule's walls after ``lowest`` up to ``until``, none on an excluded day, in order.

    One listing of days from the one holding ``lowest`` (from its period's start for
    ``BYSETPOS`` by weeks, months or years, which need their periods whole): dateutil stops
    only at a day it yields, so windows would each run on to the next matching day.
    """
    start = _window_start(rule, first, lowest)
    if start > until:
        return
    end = None if rule.whole_periods else until
    for wall in window_walls(rule, first, start, end, lowest, exdays, budget):
        budget.check()
        if wall <= lowest:
            continue
        if wall > until:
            return
        yield wall


def _window_start(rule: Rule, first: datetime, lowest: datetime) -> datetime:
    """Where the expansion of the day (the whole period) holding ``lowest`` starts."""
    if rule.whole_periods:
        return max(first, period_start(lowest, rule))
    return datetime.combine(max(first, lowest).date(), time())


def window_walls(
    rule: Rule,
    first: datetime,
    start: datetime,
    end: datetime | None,
    lowest: datetime,
    exdays: frozenset[date],
    budget: Budget | None = None,
) -> Iterator[datetime]:
    """The rule's walls from ``start`` (a day's or a period's start) to ``end``, in order.

    The rule's days are listed (skipping excluded ones, those off the INTERVAL grid and
    those before ``lowest``'s), then each day's times (on ``lowest``'s day, those after it).
    A ``BYSETPOS`` rule picks among each period's days and times (``Rule.picked``); by weeks,
    months or years it lists each period whole (``end`` ends one), and drops the picks that
    fall on an excluded day.
    """
    low_day = lowest.date()
    days = _expand(rule, start, until=end, fields=rule.day_fields, yearly=True)
    if rule.whole_periods:
        yield from _period_picks(rule, first, days, lowest, exdays, budget)
        return
    for listed, midnight in enumerate(days):
        if budget is not None and (rule.freq > du.DAILY or not listed % 64):
            budget.check()  # an hourly or minutely rule walks up to 1,440 times a day
        day = midnight.date()
        if day < low_day or day in exdays:
            continue
        offset = (day - first.date()).days
        if _grid_period(rule, first, day, offset) % rule.interval:
            continue
        if rule.positions:
            if budget is not None:
                budget.check()
            yield from (wall for wall in rule.picked([day], offset) if wall > lowest)
            continue
        after = lowest.time() if day == low_day else None
        for moment in rule.day_times(offset, after):
            yield datetime.combine(day, moment)


def _period_picks(
    rule: Rule,
    first: datetime,
    days: Iterator[datetime],
    lowest: datetime,
    exdays: frozenset[date],
    budget: Budget | None,
) -> Iterator[datetime]:
    """``BYSETPOS``'s picks of each whole week, month or year among ``days`` (midnights)."""
    period: list[date] = []
    key = -1
    for midnight in itertools.chain(days, [None]):
        if budget is not None:
            budget.check()
        number = key + 1
        if midnight is not None:
            day = midnight.date()
            number = _grid_period(rule, first, day, (day - first.date()).days)
            if number % rule.interval:
                continue
            if number == key:
                period.append(day)
                continue
        if period:
            offset = (period[0] - first.date()).days
            for wall in rule.picked(period, offset):
                if wall > lowest and wall.date() not in exdays:
                    yield wall
        if midnight is not None:
            key, period = number, [midnight.date()]


def _grid_period(rule: Rule, first: datetime, day: date, offset: int) -> int:
    """The period of a day- or coarser-grid rule that holds ``day`` (0: the anchor's); hourly
    and minutely rules count their grid in ``day_times``."""
    if rule.freq == du.YEARLY:
        return day.year - first.year
    if rule.freq == du.WEEKLY:
        return offset // 7
    if rule.freq == du.MONTHLY:
        return (day.year - first.year) * 12 + day.month - first.month
    if rule.freq == du.DAILY:
        return offset
    return 0


def advance(start: datetime, rule: Rule) -> datetime | None:
    """The start of the window (of a ``COUNT`` rule's expansion) after the one from ``start``:
    a year of days, or of whole weeks, months or years; None beyond the calendar."""
    try:
        if not rule.whole_periods:
            return start + timedelta(days=366)
        if rule.freq == du.WEEKLY:
            return start + timedelta(weeks=53)
        return start.replace(year=start.year + 1)  # a month's or a year's first day
    except (OverflowError, ValueError):
        return None


def stamp_in_zone(instant: datetime, zone: tzinfo) -> str:
    """``instant`` as a wall time of ``zone`` when that wall time names it alone, else UTC."""
    try:
        wall = wall_of(instant, zone)
        early = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        late = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    except OverflowError:
        return f"{stamp(instant)}Z"
    if early == late == instant:
        return stamp(wall)
    return f"{stamp(instant)}Z"


def day_stamp(day: date) -> str:
    """``day`` as RFC 5545 writes it (``strftime`` drops the year's leading zeros)."""
    return f"{day.year:04d}{day:%m%d}"


def stamp(moment: datetime) -> str:
    return f"{day_stamp(moment)}T{moment:%H%M%S}"


def utc_offset(moment: datetime, step: timedelta, zone: tzinfo) -> timedelta:
    """The zone's offset ``step`` away from ``moment`` (at ``moment`` near the calendar's ends)."""
    try:
        near = moment + step
    except OverflowError:
        near = moment
    try:
        return near.astimezone(zone).utcoffset() or timedelta(0)
    except OverflowError:
        return timedelta(0)


def naive_utc(wall: datetime, offset: timedelta) -> datetime:
    """The instant of ``wall`` read with ``offset``, in UTC (clamped to the calendar)."""
    try:
        return (wall - offset).replace(tzinfo=UTC)
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC)


def wall_of(moment: datetime, zone: tzinfo) -> datetime:
    return moment.astimezone(zone).replace(tzinfo=None)


def years_after(moment: datetime, years: int) -> datetime:
    try:
        return moment.replace(year=moment.year + years, day=min(moment.day, 28))
    except ValueError:
        return datetime.max


def bisect_after(values: tuple[datetime, ...], lowest: datetime) -> int:
    return bisect_right(values, lowest)


def instants_of(wall: datetime, zone: tzinfo, *, fixed: bool) -> list[datetime]:
    """The instants (UTC) a wall time stands for, by the daylight-saving rule above."""
    try:
        early = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        late = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    except OverflowError:
        raise CalendarError(
            f"the wall time {wall.isoformat()} falls outside the calendar"
        ) from None
    exists = early.astimezone(zone).replace(tzinfo=None) == wall
    if exists:
        if early == late or fixed:
            return [early]
        return sorted((early, late))
    if not fixed:
        return []
    # Skipped by the clocks: the first instant after the jump, found between the two readings
    # of the wall time (one with the offset before the jump, one with the offset after it).
    low, high = min(early, late), max(early, late)
    after_jump = high.astimezone(zone).utcoffset()
    while high - low > SECOND:
        middle = low + (high - low) / 2
        middle = middle.replace(microsecond=0)
        if middle <= low:
            break
        if middle.astimezone(zone).utcoffset() == after_jump:
            high = middle
        else:
            low = middle
    return [high]


def period_start(wall: datetime, rule: Rule) -> datetime:
    """The start of the rule's period holding ``wall`` (its year, month, week or day; hourly
    and minutely rules count from the day's midnight, so ``FREQ=MINUTELY;INTERVAL=20`` fires
    at :00, :20 and :40 as cron's ``*/20`` does)."""
    day = datetime.combine(wall.date(), time())
    if rule.freq == du.YEARLY:
        return day.replace(month=1, day=1)
    if rule.freq == du.MONTHLY:
        return day.replace(day=1)
    if rule.freq == du.WEEKLY:
        return day - timedelta(days=(day.weekday() - rule.wkst) % 7)
    return day  # daily and finer rules count from the anchor's midnight


def _expand(
    rule: Rule,
    start: datetime,
    *,
    until: datetime | None,
    fields: dict[str, object] | None = None,
    yearly: bool = False,
) -> Iterator[datetime]:
    """dateutil's expansion of ``rule`` (with ``fields`` instead of its own; every year's
    days when ``yearly``) from ``start``; without ``COUNT``: the callers count."""
    try:
        expanded = du.rrule(
            du.YEARLY if yearly else rule.freq,
            dtstart=start,
            interval=1 if yearly else rule.interval,
            wkst=rule.wkst,
            until=until,
            **(dict(rule.fields) if fields is None else fields),  # type: ignore[arg-type]
        )
        yield from expanded
    except (OverflowError, ValueError):
        return  # the calendar ends (the year 9999)
