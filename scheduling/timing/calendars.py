"""Calendar schedules: RFC 5545 recurrence sets (RRULE, RDATE, EXDATE) read in one time zone.

Pure, like ``scheduling.timing.cron``: it never reads the clock, touches the database or
imports Django. Expansion is python-dateutil's ``rrule``; this module adds the input rules,
one-line reasons naming the field, the daylight-saving rule of cron and UTC results.

Syntax
------
Lines of ``NAME:VALUE`` (or ``NAME;PARAM=...:VALUE``), newline-separated; ``;`` between
properties on one line is not allowed, so write one property per line::

    RRULE:FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9;BYMINUTE=0
    EXDATE:20261231

* At most one ``RRULE`` (``FREQ`` of ``YEARLY``, ``MONTHLY``, ``WEEKLY``, ``DAILY``, ``HOURLY``
  or ``MINUTELY``; ``SECONDLY`` is refused: use an interval) and any number of ``RDATE`` and
  ``EXDATE`` lines, each a comma-separated list. ``RRULE:`` may be left off a line that starts
  with ``FREQ=``. A set with no RRULE is a list of RDATE instants.
* **Times are wall times of the job's zone** (``--tz``, as for cron) unless they say otherwise.
  ``RDATE``, ``EXDATE`` and ``UNTIL`` also take RFC 5545's other forms, as calendar tools
  export them: UTC (``EXDATE:20270101T090000Z``), a zone parameter
  (``EXDATE;TZID=America/New_York:20270101T090000``, or a Windows zone name as Outlook and
  Exchange write, read as its IANA zone by ``windows_zones``; a wall time the clocks skip or
  repeat there is read as RFC 5545 says, with the offset before the change) and ``VALUE=DATE`` or
  ``VALUE=DATE-TIME``. Such a time names one instant, and fires (or is excluded) at that
  instant whatever the job's zone; ``normalise`` with the job's zone rewrites it as the wall
  time of that zone, so the stored text and what the admin and ``jobs show`` display read in
  the job's zone (an instant whose wall time the clocks repeat or skip there stays in UTC).
  ``DTSTART`` lines are refused: a rule starts at the schedule's start (or the job's
  creation); ``read_ics`` takes what it needs from a calendar file's ``DTSTART``. ``UNTIL`` of
  a date is the end of that day.
* A rule names its times with ``BYHOUR``/``BYMINUTE`` (``BYSECOND``); what it leaves out is
  0, so ``FREQ=DAILY`` fires at 00:00 and ``FREQ=HOURLY`` at the top of each hour.
* ``WEEKLY``, ``MONTHLY`` and ``YEARLY`` rules must say which days (``BYDAY``,
  ``BYMONTHDAY``, ``BYYEARDAY`` or ``BYWEEKNO``; ``YEARLY`` may use ``BYMONTH`` with one of
  them). In RFC 5545 the missing day would come from ``DTSTART``; here it would silently be
  the day the job was made.
* ``EXDATE`` of a date (``EXDATE:20261225``) drops every occurrence on that day; of a
  date-time it drops the occurrence at exactly that wall time (of an instant, at exactly that
  instant). ``RDATE`` of a date (``RDATE;VALUE=DATE:20270101``, an all-day date) fires at
  00:00 of that day, as a rule that names no time does.
* ``COUNT`` and ``UNTIL`` are honoured; ``INTERVAL`` is at most ``MAX_INTERVAL``.
* A set that never fires (``BYMONTH=2;BYMONTHDAY=30``, an RDATE-only set wholly excluded) is
  refused when parsed; so is one with no occurrence within ``HORIZON_YEARS`` of its anchor.

The anchor
----------
``INTERVAL`` greater than 1 and ``COUNT`` need a first period to count from, which RFC 5545
takes from ``DTSTART``. Here it is the period holding the *anchor*: the schedule's start when
it has one, otherwise the job's creation (as for intervals), read as a wall date in the zone.
``FREQ=WEEKLY;INTERVAL=2;BYDAY=MO`` thus fires on the Mondays of every other week counted from
the week (from ``WKST``, Monday by default) of the job's creation; hourly and minutely rules
count from the midnight of the anchor's day (``FREQ=MINUTELY;INTERVAL=20`` fires at :00, :20
and :40, like cron's ``*/20``). Rules with ``INTERVAL=1`` and
no ``COUNT`` do not depend on the anchor.

Cost
----
Every evaluation is bounded by a ``budgets.Budget`` the caller passes (the engine's
``SCHEDULING_TIMING_BUDGET_MS``, 50 ms of CPU by default; ``budgets.OverBudget`` past it), and
expansion never enumerates what it will discard:

* ``next_after`` starts the rule at the day holding the instant asked about (at the week,
  month or year for a ``BYSETPOS`` rule by those), which yields the same occurrences because
  every day and time field the rule leaves open was made explicit when it was parsed. Only a
  ``COUNT`` rule expands from the anchor (``COUNT`` is at most ``MAX_COUNT``, and what it has
  expanded is kept per anchor).
* Every rule is expanded as days, then times: dateutil lists the days the rule matches a year
  at a time (one listing per search: dateutil only stops at a day it yields, so a listing cut
  into windows would run on to the next matching day from each), the ``INTERVAL`` grid is
  applied here, an excluded day (``EXDATE`` of a date) costs one step whatever its times, and
  the day asked about starts at the first time after the instant.
* ``BYSETPOS`` picks from a period's days times its times by arithmetic (``_Rule.picked``),
  never building the set (86,400 a day for a rule naming every second).
* The budget is checked between days and between occurrences, so no step runs long; the
  proof that a set fires at all (``parse``) is bounded the same way, and its refusals are kept
  per text like its successes.

Daylight-saving time
--------------------
The same rule as ``scheduling.timing.cron``, with daily and coarser rules taking the place of
cron's fixed-time expressions:

* ``DAILY``, ``WEEKLY``, ``MONTHLY`` and ``YEARLY`` rules, and RDATEs, name wall times. A time
  the clocks skip fires at the first instant after the jump (02:30 on the night Berlin goes
  from 02:00 to 03:00 fires at 03:00 CEST); several skipped times fire there once together. A
  time that occurs twice fires at its first occurrence only.
* ``HOURLY`` and ``MINUTELY`` rules follow elapsed time: wall times that do not exist never
  fire, and wall times that occur twice fire twice.
* Successive occurrences are strictly increasing instants.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import re
import threading
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from itertools import islice
from typing import TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil import rrule as du

from scheduling.timing import windows_zones
from scheduling.timing.budgets import Budget, OverBudget

__all__ = [
    "MAX_TEXT",
    "CalendarError",
    "CalendarOverBudget",
    "CalendarRule",
    "IcsEvent",
    "normalise",
    "read_ics",
]

#: Longest text accepted: a rule and a few years of holidays fit many times over.
MAX_TEXT = 4000
MAX_LINES = 100
MAX_DATES = 1000
MAX_INTERVAL = 1000
MAX_COUNT = 10_000
#: How far ahead a search for the next occurrence looks (cron's horizon too).
HORIZON_YEARS = 50
#: The least CPU time the proof that a set fires at all may take (``_check_fires``).
FIRES_PROOF_SECONDS = 0.25
#: Parsed sets kept per process (each checked once for whether it fires at all).
MAX_PARSED = 256

_FREQS = {
    "YEARLY": du.YEARLY,
    "MONTHLY": du.MONTHLY,
    "WEEKLY": du.WEEKLY,
    "DAILY": du.DAILY,
    "HOURLY": du.HOURLY,
    "MINUTELY": du.MINUTELY,
}
_DAYS = {"MO": 0, "TU": 1, "WE": 2, "TH": 3, "FR": 4, "SA": 5, "SU": 6}
_WEEKDAYS = (du.MO, du.TU, du.WE, du.TH, du.FR, du.SA, du.SU)
#: Each ``BYxxx`` part: its dateutil keyword and the values it accepts.
_NUMBERS = {
    "BYMONTH": ("bymonth", 1, 12, False),
    "BYMONTHDAY": ("bymonthday", 1, 31, True),
    "BYYEARDAY": ("byyearday", 1, 366, True),
    "BYWEEKNO": ("byweekno", 1, 53, True),
    "BYHOUR": ("byhour", 0, 23, False),
    "BYMINUTE": ("byminute", 0, 59, False),
    "BYSECOND": ("bysecond", 0, 59, False),
    "BYSETPOS": ("bysetpos", 1, 366, True),
}
_DAY_PARTS = ("BYDAY", "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO")
_TIME_KEYWORDS = ("byhour", "byminute", "bysecond")
_DAY_KEYWORDS = ("byweekday", "bymonthday", "byyearday", "byweekno")
_BYDAY = re.compile(r"^([+-]?\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)$")
_DATE = re.compile(r"^\d{8}$")
_DATETIME = re.compile(r"^\d{8}T\d{6}Z?$", re.IGNORECASE)
_SECOND = timedelta(seconds=1)


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
class _Rule:
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


class _Counted:
    """What a ``COUNT`` rule has expanded from one anchor: its walls so far, where the next
    window starts and how many are still to come (expanded on demand, a window at a time)."""

    def __init__(self, start: datetime, count: int) -> None:
        self.walls: list[datetime] = []
        self.first = start
        self.next_start: datetime | None = start
        self.remaining = count
        self.lock = threading.Lock()

    def extend(self, rule: _Rule, budget: Budget) -> None:
        """Expand one more window (never past the count); the caller holds ``lock``."""
        budget.check()
        start = self.next_start
        if start is None or self.remaining <= 0:
            self.next_start = None
            return
        following = _advance(start, rule)
        end = datetime.max if following is None else following - _SECOND
        walls = _window(rule, self.first, start, end, datetime.min, frozenset(), budget)
        found = []
        for wall in islice(walls, self.remaining):
            if not len(found) % 256:
                budget.check()  # up to MAX_COUNT walls a window: checked as they are made
            found.append(wall)
        self.walls.extend(found)
        self.remaining -= len(found)
        self.next_start = following if self.remaining > 0 else None


@dataclass(frozen=True)
class CalendarRule:
    """A validated recurrence set; ``text`` is it normalised (one property per line).

    ``rdates``, ``exdates`` and ``exdays`` are wall times (dates) of the job's zone;
    ``rinstants`` and ``exinstants`` are the times given in UTC or with ``TZID``, as UTC.
    """

    text: str
    rule: _Rule | None
    rdates: tuple[datetime, ...]
    exdates: frozenset[datetime]
    exdays: frozenset[date]
    rinstants: tuple[datetime, ...] = ()
    exinstants: frozenset[datetime] = frozenset()
    _counted: dict[datetime, _Counted] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @classmethod
    def parse(cls, text: str, *, budget: Budget | None = None) -> CalendarRule:
        """Parse RFC 5545 lines (see the module docstring), raising CalendarError.

        A set that never fires is refused here, which asks for an occurrence: ``budget``
        (at least ``FIRES_PROOF_SECONDS``) bounds that, and a set that needs more is refused
        with CalendarOverBudget. Sets are kept by text once checked, and so are the sets
        refused by the check, so asking again costs nothing.
        """
        if len(text) > MAX_TEXT:
            raise CalendarError(f"is {len(text)} characters long; at most {MAX_TEXT}")
        text = normalise(text)
        found = _PARSED.get(text)
        if found is not None:
            return found
        proof = max(FIRES_PROOF_SECONDS, budget.seconds if budget is not None else 0)
        refused = _REFUSED.get(text)
        if refused is not None and (refused.seconds is None or refused.seconds >= proof):
            raise refused.error()
        found = _parse(text)
        try:
            _check_fires(found, Budget(proof))
        except CalendarOverBudget as exc:
            _remember(_REFUSED, text, _Refusal(str(exc), exc.seconds))
            raise
        except CalendarError as exc:
            _remember(_REFUSED, text, _Refusal(str(exc), None))
            raise
        _remember(_PARSED, text, found)
        return found

    @property
    def follows_wall_time(self) -> bool:
        """Fixed wall times (daily or coarser): a skipped time moves, a repeated one fires once."""
        return self.rule is None or self.rule.freq <= du.DAILY

    # --- occurrences

    def next_after(
        self, after: datetime, zone: tzinfo, *, anchor: datetime, budget: Budget | None = None
    ) -> datetime | None:
        """The first occurrence strictly after ``after`` (aware), in UTC; None when over.

        ``anchor`` (aware) fixes the first period of ``INTERVAL`` and ``COUNT``. Raises
        CalendarError when no occurrence falls within ``HORIZON_YEARS`` of ``after`` although
        the set has not ended, or when the next one would fall beyond the year 9999, and
        ``budgets.OverBudget`` when finding it takes longer than ``budget`` (50 ms of the
        thread's CPU when not given).
        """
        if after.tzinfo is None or after.utcoffset() is None:
            raise ValueError(f"after must be a timezone-aware datetime, got naive {after!r}")
        budget = budget or Budget()
        after = after.astimezone(UTC)
        offsets = [_offset(after, step, zone) for step in (-_DAYS_2, timedelta(0), _DAYS_2)]
        low_offset, high_offset = min(offsets), max(offsets)
        # No wall time below this has an instant after ``after`` (an instant is its wall time
        # minus an offset, and no offset near ``after`` is smaller).
        try:
            lowest = (after + low_offset).replace(tzinfo=None) - _SECOND
        except OverflowError:
            lowest = datetime.min
        best = self._next_instant(after, zone)
        ended = True
        until = self.rule.until_instant if self.rule is not None else None
        for wall, last in self._walls(lowest, zone, anchor, budget):
            if wall is None:  # the search reached its horizon without an end of the set
                ended = last
                break
            if best is not None and _naive_utc(wall, high_offset) > best:
                break
            for instant in _instants(wall, zone, fixed=self.follows_wall_time):
                if instant in self.exinstants or (until is not None and instant > until):
                    continue
                if instant > after and (best is None or instant < best):
                    best = instant
            if best is not None and _naive_utc(wall, high_offset) >= best:
                break  # every later wall names a later instant: no need to find the next one
        if best is None and not ended:
            when = f"{after:%Y-%m-%d %H:%M} UTC"
            if _years_after(lowest, HORIZON_YEARS) == datetime.max:
                raise CalendarError(f"no occurrence after {when} before the year 10000")
            phase = ""
            if self.rule is not None and self.rule.interval > 1:
                phase = (
                    f": INTERVAL={self.rule.interval} counts its periods from the schedule's"
                    " start, and none of the periods it keeps from there holds a matching date"
                    " (set a start in a period that does)"
                )
            raise CalendarError(f"no occurrence in the {HORIZON_YEARS} years after {when}{phase}")
        return best

    def _next_instant(self, after: datetime, zone: tzinfo) -> datetime | None:
        """The first RDATE given as an instant after ``after`` that no EXDATE drops."""
        for instant in self.rinstants[bisect_right(self.rinstants, after) :]:
            if instant in self.exinstants:
                continue
            try:
                wall = _wall(instant, zone)
            except OverflowError:
                return instant
            if wall not in self.exdates and wall.date() not in self.exdays:
                return instant
        return None

    def _walls(
        self, lowest: datetime, zone: tzinfo, anchor: datetime, budget: Budget
    ) -> Iterator[tuple[datetime | None, bool]]:
        """Wall times after ``lowest`` in order, without exclusions; (None, ended) at the end.

        ``ended`` is False when the search stopped at its horizon while the set goes on.
        """
        streams: list[Iterator[datetime]] = []
        rdates = self.rdates[_bisect_after(self.rdates, lowest) :]
        streams.append(iter(rdates))
        horizon = _years_after(lowest, HORIZON_YEARS)
        open_ended = False
        if self.rule is not None:
            rule_walls, open_ended = self._rule_walls(lowest, horizon, zone, anchor, budget)
            streams.append(rule_walls)
        previous = None
        for wall in heapq.merge(*streams):
            budget.check()
            if wall == previous:
                continue
            previous = wall
            if wall in self.exdates or wall.date() in self.exdays:
                continue
            yield wall, True
        yield None, not open_ended

    def _rule_walls(
        self, lowest: datetime, horizon: datetime, zone: tzinfo, anchor: datetime, budget: Budget
    ) -> tuple[Iterator[datetime], bool]:
        rule = self.rule
        assert rule is not None
        first = _period_start(_wall(anchor, zone), rule)
        if rule.count is not None:
            return self._counted_walls(rule, first, lowest, budget), False
        end = rule.until
        if rule.until_instant is not None:
            try:
                end = _wall(rule.until_instant, zone)
            except OverflowError:
                end = rule.until_instant.replace(tzinfo=None)
        until = horizon if end is None else min(horizon, end)
        still_going = end is None or end > horizon
        return _walk(rule, first, lowest, until, self.exdays, budget), still_going

    def _counted_walls(
        self, rule: _Rule, first: datetime, lowest: datetime, budget: Budget
    ) -> Iterator[datetime]:
        """The COUNT rule's walls after ``lowest``, expanded from ``first`` as far as asked."""
        assert rule.count is not None
        state = self._counted.get(first)
        if state is None:
            if len(self._counted) > 64:
                self._counted.clear()
            state = self._counted.setdefault(first, _Counted(first, rule.count))
        index = None
        while True:
            with state.lock:
                if index is None:
                    while state.next_start is not None and (
                        not state.walls or state.walls[-1] <= lowest
                    ):
                        state.extend(rule, budget)
                    index = bisect_right(state.walls, lowest)
                elif index >= len(state.walls) and state.next_start is not None:
                    state.extend(rule, budget)
                if index >= len(state.walls):
                    if state.next_start is None:
                        return
                    continue
                wall = state.walls[index]
            index += 1
            yield wall


_DAYS_2 = timedelta(days=2)
#: Parsed sets checked to fire, by normalised text (``CalendarRule.parse``).
_PARSED: dict[str, CalendarRule] = {}


@dataclass(frozen=True)
class _Refusal:
    """Why a text was refused by the check that it fires; ``seconds``: the budget it ran
    out of (None: it never fires)."""

    reason: str
    seconds: float | None

    def error(self) -> CalendarError:
        if self.seconds is None:
            return CalendarError(self.reason)
        return CalendarOverBudget(self.seconds)


#: Texts refused by that check, by normalised text.
_REFUSED: dict[str, _Refusal] = {}
_T = TypeVar("_T")


def _remember(kept: dict[str, _T], text: str, value: _T) -> None:
    if len(kept) >= MAX_PARSED:
        kept.clear()
    kept[text] = value


def _walk(
    rule: _Rule,
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
    for wall in _window(rule, first, start, end, lowest, exdays, budget):
        budget.check()
        if wall <= lowest:
            continue
        if wall > until:
            return
        yield wall


def _window_start(rule: _Rule, first: datetime, lowest: datetime) -> datetime:
    """Where the expansion of the day (the whole period) holding ``lowest`` starts."""
    if rule.whole_periods:
        return max(first, _period_start(lowest, rule))
    return datetime.combine(max(first, lowest).date(), time())


def _window(
    rule: _Rule,
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
    A ``BYSETPOS`` rule picks among each period's days and times (``_Rule.picked``); by weeks,
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
    rule: _Rule,
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


def _grid_period(rule: _Rule, first: datetime, day: date, offset: int) -> int:
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


def _advance(start: datetime, rule: _Rule) -> datetime | None:
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


def normalise(text: str, zone: str | tzinfo | None = None) -> str:
    """``text`` as stored: one property per line, blank lines and outer spaces dropped.

    Given the job's ``zone``, every RDATE, EXDATE and UNTIL given in UTC or with ``TZID`` is
    rewritten as the wall time of ``zone`` it names, so the text reads in the job's zone; an
    instant whose wall time ``zone`` skips or repeats stays in UTC (a wall time would name
    another instant, or two). A line that does not parse is left as it is for the parse to
    refuse, and so is everything when ``zone`` is not a known zone.
    """
    lines = (line.strip() for line in text.replace("\r", "\n").split("\n"))
    text = "\n".join(line for line in lines if line)
    if zone is None or len(text) > MAX_TEXT:
        return text
    if isinstance(zone, str):
        try:
            zone = ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            return text
    return "\n".join(_localised(line, zone) for line in text.split("\n"))


def _localised(line: str, zone: tzinfo) -> str:
    """One line of a set with its instants as wall times of ``zone`` (see ``normalise``)."""
    try:
        name, params, value = _property(line)
        if name == "RRULE":
            parts = value.split(";")
            for index, part in enumerate(parts):
                key, _, raw = part.partition("=")
                if key.strip().upper() == "UNTIL" and raw.strip().upper().endswith("Z"):
                    instant = _datetime(raw.strip(), "UNTIL").replace(tzinfo=UTC)
                    parts[index] = f"UNTIL={_in_zone(instant, zone)}"
            return (
                ";".join(parts) if line.upper().startswith("FREQ=") else "RRULE:" + ";".join(parts)
            )
        if name not in ("RDATE", "EXDATE") or not (
            params or value.upper().endswith("Z") or "Z," in value.upper()
        ):
            return line
        items = []
        for item in _dates(name, params, value):
            if isinstance(item, datetime) and item.tzinfo is not None:
                items.append(_in_zone(item, zone))
            elif isinstance(item, datetime):
                items.append(_stamp(item))
            elif name == "RDATE":
                items.append(f"{_day_stamp(item)}T000000")
            else:
                items.append(_day_stamp(item))
        return f"{name}:{','.join(items)}"
    except CalendarError:
        return line


def _in_zone(instant: datetime, zone: tzinfo) -> str:
    """``instant`` as a wall time of ``zone`` when that wall time names it alone, else UTC."""
    try:
        wall = _wall(instant, zone)
        early = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        late = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    except OverflowError:
        return f"{_stamp(instant)}Z"
    if early == late == instant:
        return _stamp(wall)
    return f"{_stamp(instant)}Z"


def _day_stamp(day: date) -> str:
    """``day`` as RFC 5545 writes it (``strftime`` drops the year's leading zeros)."""
    return f"{day.year:04d}{day:%m%d}"


def _stamp(moment: datetime) -> str:
    return f"{_day_stamp(moment)}T{moment:%H%M%S}"


def _offset(moment: datetime, step: timedelta, zone: tzinfo) -> timedelta:
    """The zone's offset ``step`` away from ``moment`` (at ``moment`` near the calendar's ends)."""
    try:
        near = moment + step
    except OverflowError:
        near = moment
    try:
        return near.astimezone(zone).utcoffset() or timedelta(0)
    except OverflowError:
        return timedelta(0)


def _naive_utc(wall: datetime, offset: timedelta) -> datetime:
    """The instant of ``wall`` read with ``offset``, in UTC (clamped to the calendar)."""
    try:
        return (wall - offset).replace(tzinfo=UTC)
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC)


def _wall(moment: datetime, zone: tzinfo) -> datetime:
    return moment.astimezone(zone).replace(tzinfo=None)


def _years_after(moment: datetime, years: int) -> datetime:
    try:
        return moment.replace(year=moment.year + years, day=min(moment.day, 28))
    except ValueError:
        return datetime.max


def _bisect_after(values: tuple[datetime, ...], lowest: datetime) -> int:
    return bisect_right(values, lowest)


def _instants(wall: datetime, zone: tzinfo, *, fixed: bool) -> list[datetime]:
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
    while high - low > _SECOND:
        middle = low + (high - low) / 2
        middle = middle.replace(microsecond=0)
        if middle <= low:
            break
        if middle.astimezone(zone).utcoffset() == after_jump:
            high = middle
        else:
            low = middle
    return [high]


def _period_start(wall: datetime, rule: _Rule) -> datetime:
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
    rule: _Rule,
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


# --- parsing


@functools.lru_cache(maxsize=MAX_PARSED)
def _parse(text: str) -> CalendarRule:
    if not text:
        raise CalendarError("is empty; give an RRULE line such as FREQ=DAILY;BYHOUR=9")
    lines = text.split("\n")
    if len(lines) > MAX_LINES:
        raise CalendarError(f"has {len(lines)} lines; at most {MAX_LINES}")
    rule: _Rule | None = None
    rdates: list[datetime] = []
    rinstants: list[datetime] = []
    exdates: set[datetime] = set()
    exinstants: set[datetime] = set()
    exdays: set[date] = set()
    for line in lines:
        name, params, value = _property(line)
        if name == "DTSTART":
            raise CalendarError(
                "DTSTART is not accepted: times are read in the job's zone, and a rule "
                "starts at the schedule's start (or the job's creation)"
            )
        if name == "RRULE":
            if params:
                raise CalendarError(f"RRULE parameter {params[0]!r} is not supported")
            if rule is not None:
                raise CalendarError("give one RRULE line (add further dates with RDATE)")
            rule = _parse_rule(value)
        elif name in ("RDATE", "EXDATE"):
            for item in _dates(name, params, value):
                aware = isinstance(item, datetime) and item.tzinfo is not None
                if aware and name == "RDATE":
                    rinstants.append(item)  # type: ignore[arg-type]
                elif aware:
                    exinstants.add(item)  # type: ignore[arg-type]
                elif isinstance(item, datetime):
                    (rdates.append if name == "RDATE" else exdates.add)(item)
                elif name == "RDATE":  # an all-day date fires at its midnight
                    rdates.append(datetime.combine(item, time()))
                else:
                    exdays.add(item)
        elif name == "EXRULE":
            raise CalendarError("EXRULE is not accepted (RFC 5545 deprecates it); use EXDATE")
        else:
            raise CalendarError(f"unknown property {name!r} (expected RRULE, RDATE or EXDATE)")
    if rule is None and not rdates and not rinstants:
        raise CalendarError("has no RRULE or RDATE line, so it never fires")
    listed = len(rdates) + len(rinstants) + len(exdates) + len(exinstants) + len(exdays)
    if listed > MAX_DATES:
        raise CalendarError(f"lists more than {MAX_DATES} dates")
    return CalendarRule(
        text=text,
        rule=rule,
        rdates=tuple(sorted(set(rdates))),
        exdates=frozenset(exdates),
        exdays=frozenset(exdays),
        rinstants=tuple(sorted(set(rinstants))),
        exinstants=frozenset(exinstants),
    )


def _property(line: str) -> tuple[str, list[str], str]:
    """``NAME;PARAM=...:VALUE`` as its upper-case name, its parameters and its value."""
    if line.upper().startswith("FREQ="):
        line = "RRULE:" + line
    head, colon, value = _split_value(line)
    if not colon:
        raise CalendarError(f"{line[:40]!r} is not NAME:VALUE (such as RRULE:FREQ=DAILY)")
    name, *params = head.split(";")
    return name.strip().upper(), [p.strip() for p in params if p.strip()], value.strip()


def _split_value(line: str) -> tuple[str, str, str]:
    """Split at the first colon outside a quoted parameter value (``TZID="A:B"``)."""
    quoted = False
    for index, char in enumerate(line):
        if char == '"':
            quoted = not quoted
        elif char == ":" and not quoted:
            return line[:index], ":", line[index + 1 :]
    return line, "", ""


def _dates(name: str, params: list[str], value: str) -> list[date | datetime]:
    """The items of an RDATE or EXDATE line: dates, wall times, or instants (aware, UTC)."""
    zone: tzinfo | None = None
    kind = None
    for param in params:
        key, _, raw = param.partition("=")
        key, raw = key.strip().upper(), raw.strip().strip('"')
        if key == "TZID":
            zone = _zone(raw, name)
        elif key == "VALUE" and raw.upper() in ("DATE", "DATE-TIME"):
            kind = raw.upper()
        elif key == "VALUE":
            raise CalendarError(f"{name} VALUE={raw} is not supported (give DATE or DATE-TIME)")
        else:
            raise CalendarError(f"{name} parameter {param!r} is not supported")
    found: list[date | datetime] = []
    for item in _items(value, name):
        if _DATE.match(item):
            if kind == "DATE-TIME":
                raise CalendarError(f"{name} {item!r} is a date, but the line says DATE-TIME")
            found.append(_date(item, name))
            continue
        if kind == "DATE":
            raise CalendarError(f"{name} {item!r} is not a date such as 20270101 (VALUE=DATE)")
        wall = _datetime(item, name)
        if item.upper().endswith("Z"):
            if zone is not None:
                raise CalendarError(f"{name} {item!r} is in UTC and has a TZID; give one of them")
            found.append(wall.replace(tzinfo=UTC))
        elif zone is not None:
            try:
                found.append(wall.replace(tzinfo=zone, fold=0).astimezone(UTC))
            except OverflowError:
                raise CalendarError(f"{name} {item!r} falls outside the calendar") from None
        else:
            found.append(wall)
    return found


def _zone(raw: str, name: str) -> tzinfo:
    return ZoneInfo(_zone_name(raw, name))


def _zone_name(raw: str, name: str) -> str:
    """The IANA name of a ``TZID``: an IANA name, or a Windows one as Outlook and Exchange
    write (``W. Europe Standard Time`` is ``Europe/Berlin``)."""
    try:
        ZoneInfo(raw)
    except (ZoneInfoNotFoundError, ValueError):
        found = windows_zones.iana_name(raw)
        if found is None:
            raise CalendarError(
                f"{name} TZID={raw!r} is not a known IANA (or Windows) time zone"
            ) from None
        return found
    return raw


def _items(value: str, name: str) -> list[str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise CalendarError(f"{name} has no value")
    return items


def _datetime(item: str, name: str) -> datetime:
    """A date-time item's wall time (naive; a ``Z`` at the end is the caller's to read)."""
    if not _DATETIME.match(item):
        raise CalendarError(f"{name} {item!r} is not a date-time such as 20270101T090000")
    try:
        return datetime.strptime(item[:15], "%Y%m%dT%H%M%S")
    except ValueError:
        raise CalendarError(f"{name} {item!r} is not a real date and time") from None


def _date(item: str, name: str) -> date:
    try:
        return datetime.strptime(item, "%Y%m%d").date()
    except ValueError:
        raise CalendarError(f"{name} {item!r} is not a real date") from None


def _parse_rule(value: str) -> _Rule:
    parts: dict[str, str] = {}
    for part in value.split(";"):
        if not part.strip():
            continue
        key, equals, raw = part.partition("=")
        key = key.strip().upper()
        if not equals or not raw.strip():
            raise CalendarError(f"RRULE part {part!r} is not KEY=VALUE")
        if key in parts:
            raise CalendarError(f"RRULE gives {key} twice")
        parts[key] = raw.strip().upper()
    freq_text = parts.pop("FREQ", None)
    if freq_text is None:
        raise CalendarError("RRULE needs FREQ (YEARLY, MONTHLY, WEEKLY, DAILY, HOURLY, MINUTELY)")
    if freq_text == "SECONDLY":
        raise CalendarError("FREQ=SECONDLY is not accepted; use an interval for seconds")
    if freq_text not in _FREQS:
        raise CalendarError(
            f"FREQ={freq_text} is not one of YEARLY, MONTHLY, WEEKLY, DAILY, HOURLY, MINUTELY"
        )
    freq = _FREQS[freq_text]
    interval = _number(parts.pop("INTERVAL", "1"), "INTERVAL", 1, MAX_INTERVAL)
    count = parts.pop("COUNT", None)
    count_value = None if count is None else _number(count, "COUNT", 1, MAX_COUNT)
    until_text = parts.pop("UNTIL", None)
    until = until_instant = None
    if until_text is not None:
        if count_value is not None:
            raise CalendarError("RRULE gives both COUNT and UNTIL; RFC 5545 allows one")
        if _DATE.match(until_text):
            until = datetime.combine(_date(until_text, "UNTIL"), time(23, 59, 59))
        elif until_text.endswith("Z"):
            until_instant = _datetime(until_text, "UNTIL").replace(tzinfo=UTC)
        else:
            until = _datetime(until_text, "UNTIL")
    wkst = _DAYS.get(parts.pop("WKST", "MO"), -1)
    if wkst < 0:
        raise CalendarError("WKST must be a weekday: MO, TU, WE, TH, FR, SA or SU")
    if freq in (du.YEARLY, du.MONTHLY, du.WEEKLY) and not any(p in parts for p in _DAY_PARTS):
        raise CalendarError(
            f"FREQ={freq_text} needs the days it fires on: BYDAY, BYMONTHDAY, BYYEARDAY or "
            "BYWEEKNO (such as BYMONTHDAY=-1 for the last day of the month)"
        )
    fields: dict[str, object] = {}
    for key, raw in parts.items():
        if key == "BYDAY":
            fields["byweekday"] = tuple(_weekday(item, freq) for item in raw.split(","))
        elif key in _NUMBERS:
            keyword, low, high, signed = _NUMBERS[key]
            fields[keyword] = tuple(
                _by_number(item, key, low, high, signed) for item in raw.split(",")
            )
        else:
            raise CalendarError(f"RRULE part {key} is not supported")
    # What the rule leaves out would come from DTSTART: the time is midnight, spelled out so
    # that the rule can start at any period and yield the same occurrences.
    if freq <= du.DAILY:
        fields.setdefault("byhour", (0,))
    if freq <= du.HOURLY:
        fields.setdefault("byminute", (0,))
    fields.setdefault("bysecond", (0,))
    rule = _Rule(
        freq=freq,
        interval=interval,
        wkst=wkst,
        fields=tuple(sorted(fields.items())),
        count=count_value,
        until=until,
        until_instant=until_instant,
    )
    try:  # the days alone: dateutil lists a day's times as it is made (86,400 of them)
        du.rrule(freq, dtstart=datetime(2000, 1, 1), interval=interval, **rule.day_fields)  # type: ignore[arg-type]
    except ValueError as exc:
        raise CalendarError(f"never fires: {exc}") from None
    if rule.positions and freq >= du.DAILY:
        hours, minutes, seconds = (len(values) for values in rule.clock)
        size = {du.DAILY: hours * minutes * seconds, du.HOURLY: minutes * seconds}.get(
            freq, seconds
        )
        if all(abs(position) > size for position in rule.positions):
            period = {du.DAILY: "day", du.HOURLY: "hour", du.MINUTELY: "minute"}[freq]
            raise CalendarError(
                f"never fires: BYSETPOS picks beyond the {size} times of each {period}"
            )
    return rule


def _number(raw: str, key: str, low: int, high: int) -> int:
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise CalendarError(f"{key}={raw} must be a whole number from {low} to {high}")
    return int(raw)


def _by_number(raw: str, key: str, low: int, high: int, signed: bool) -> int:
    text = raw.strip()
    digits = text.lstrip("+-") if signed else text
    if not digits.isdigit() or not low <= int(digits) <= high:
        span = f"{low} to {high}" + (f" or -{high} to -{low}" if signed else "")
        raise CalendarError(f"{key} value {raw!r} must be {span}")
    return int(text)


def _weekday(raw: str, freq: int) -> du.weekday:
    match = _BYDAY.match(raw.strip())
    if not match:
        raise CalendarError(f"BYDAY value {raw!r} is not a weekday such as MO, 2TU or -1FR")
    number, name = match.groups()
    day = _WEEKDAYS[_DAYS[name]]
    if number is None:
        return day
    n = int(number)
    if n == 0 or abs(n) > 53:
        raise CalendarError(f"BYDAY value {raw!r}: the number must be 1 to 53 or -1 to -53")
    if freq not in (du.MONTHLY, du.YEARLY):
        raise CalendarError(
            f"BYDAY value {raw!r} numbers a weekday, which only MONTHLY or YEARLY rules can"
        )
    return day(n)


def _check_fires(calendar: CalendarRule, budget: Budget) -> None:
    """Refuse a set with no occurrence at all.

    An RDATE not excluded fires. A rule is tried in the calendar's last fifty years, which hold
    every day pattern a rule can ask for (the rarest, a weekday on February 29, recurs within
    forty years), within ``budget`` (OverBudget past it). Which periods an INTERVAL keeps
    depends on the anchor (``FREQ=DAILY;INTERVAL=7;BYDAY=MO`` fires from a Monday, never from a
    Saturday), so the rule is tried with the interval that keeps every period some anchor
    keeps (``_any_anchor``): it fires from some anchor exactly when that one fires, and saving
    a schedule asks whether it fires from its own (``schedules.check_savable``). A rule with
    COUNT or UNTIL may have
    ended by then; saving it asks whether it has an occurrence still to come
    (``schedules.check_savable``). CalendarOverBudget when the proof needs more than
    ``budget``: every step of the walk is small, so it stops soon after.
    """
    if any(d not in calendar.exdates and d.date() not in calendar.exdays for d in calendar.rdates):
        return
    if any(d not in calendar.exinstants for d in calendar.rinstants):
        return
    if calendar.rule is not None:
        if calendar.rule.count or calendar.rule.until or calendar.rule.until_instant:
            return
        probe = datetime(datetime.max.year - HORIZON_YEARS, 1, 1, tzinfo=UTC)
        calendar = replace(calendar, rule=_any_anchor(calendar.rule))
        # The proof walks the whole horizon for a rule that never fires (a year of days takes
        # dateutil about a millisecond): ``parse`` gives it FIRES_PROOF_SECONDS at least.
        try:
            if calendar.next_after(probe, UTC, anchor=probe, budget=budget) is not None:
                return
        except CalendarError:
            pass
        except OverBudget:
            raise CalendarOverBudget(budget.seconds) from None
    raise CalendarError("never fires: no date matches the rule (minus its EXDATEs)")


def _any_anchor(rule: _Rule) -> _Rule:
    """The rule whose periods are every period that ``rule`` keeps from some anchor.

    A daily or coarser period may start any period, so every period is kept from some
    anchor: INTERVAL 1. An hourly or minutely grid counts from the anchor's midnight, and
    midnights are a whole number of days apart: the times of day it reaches from any of them
    are the multiples of gcd(INTERVAL, units in a day), the same from every midnight.
    """
    per_day = {du.HOURLY: 24, du.MINUTELY: 24 * 60}.get(rule.freq, 1)
    return replace(rule, interval=math.gcd(rule.interval, per_day))


# --- calendar files


@dataclass(frozen=True)
class IcsEvent:
    """The recurrence of a calendar file's one event, as this module reads it.

    ``text`` holds its RRULE, RDATE and EXDATE lines, the RRULE completed from ``DTSTART``
    (the time of day, and the day for a rule that names none, as RFC 5545 takes them from
    there); ``zone`` is the zone of ``DTSTART`` (``TZID``, or ``UTC`` for a ``Z`` time; None
    when it is a floating time or a date) and ``start`` its instant when that zone is known.
    """

    text: str
    zone: str | None
    start: datetime | None


def read_ics(content: str) -> IcsEvent:
    """The one VEVENT of an iCalendar file (RFC 5545: folded lines, other properties and
    components ignored); CalendarError when it holds none or several, or no RRULE or RDATE."""
    unfolded = re.sub(r"\r?\n[ \t]", "", content.replace("\r\n", "\n").replace("\r", "\n"))
    events: list[list[str]] = []
    depth: list[str] = []
    for raw in unfolded.split("\n"):
        line = raw.strip()
        upper = line.upper()
        if upper.startswith("BEGIN:"):
            depth.append(upper[6:].strip())
            if depth[-1] == "VEVENT":
                events.append([])
        elif upper.startswith("END:"):
            if depth:
                depth.pop()
        elif depth and depth[-1] == "VEVENT" and events:
            events[-1].append(line)
    if len(events) != 1:
        found = "no VEVENT" if not events else f"{len(events)} VEVENTs"
        raise CalendarError(f"holds {found}; give a file with exactly one event")
    kept: list[str] = []
    rule_index = None
    start_wall: datetime | None = None
    zone: str | None = None
    for line in events[0]:
        try:
            name, params, value = _property(line)
        except CalendarError:
            continue
        if name == "DTSTART":
            start_wall, zone = _ics_start(params, value)
        elif name in ("RRULE", "RDATE", "EXDATE"):
            if name == "RRULE":
                rule_index = len(kept)
            kept.append(line)
    if not kept:
        raise CalendarError("its VEVENT has no RRULE or RDATE line")
    if rule_index is not None and start_wall is not None:
        kept[rule_index] = "RRULE:" + _completed(_property(kept[rule_index])[2], start_wall)
    start = None
    if start_wall is not None and zone is not None:
        try:
            start = start_wall.replace(tzinfo=ZoneInfo(zone)).astimezone(UTC)
        except (ZoneInfoNotFoundError, ValueError, OverflowError):
            raise CalendarError(f"DTSTART TZID={zone!r} is not a known IANA time zone") from None
    return IcsEvent(text="\n".join(kept), zone=zone, start=start)


def _ics_start(params: list[str], value: str) -> tuple[datetime, str | None]:
    """``DTSTART``'s wall time and zone name (None: floating, or a date)."""
    zone = None
    for param in params:
        key, _, raw = param.partition("=")
        if key.strip().upper() == "TZID":
            zone = _zone_name(raw.strip().strip('"'), "DTSTART")
    if _DATE.match(value):
        return datetime.combine(_date(value, "DTSTART"), time()), None
    wall = _datetime(value, "DTSTART")
    if value.upper().endswith("Z"):
        zone = "UTC"
    return wall, zone


def _completed(rule: str, start: datetime) -> str:
    """``rule`` with the fields RFC 5545 takes from ``DTSTART`` written out: the time of day
    (what the rule's frequency does not step through), and the day of a weekly, monthly or
    yearly rule that names none."""
    parts = [part for part in rule.split(";") if part.strip()]
    keys = {part.partition("=")[0].strip().upper() for part in parts}
    freq = next(
        (p.partition("=")[2].strip().upper() for p in parts if p.upper().startswith("FREQ=")), ""
    )
    added = []
    if freq in ("YEARLY", "MONTHLY", "WEEKLY", "DAILY") and "BYHOUR" not in keys:
        added.append(f"BYHOUR={start.hour}")
    if freq in ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY") and "BYMINUTE" not in keys:
        added.append(f"BYMINUTE={start.minute}")
    if freq in _FREQS and "BYSECOND" not in keys:
        added.append(f"BYSECOND={start.second}")
    if not keys & set(_DAY_PARTS):
        if freq == "WEEKLY":
            added.append("BYDAY=" + ("MO", "TU", "WE", "TH", "FR", "SA", "SU")[start.weekday()])
        elif freq == "MONTHLY":
            added.append(f"BYMONTHDAY={start.day}")
        elif freq == "YEARLY":
            if "BYMONTH" not in keys:
                added.append(f"BYMONTH={start.month}")
            added.append(f"BYMONTHDAY={start.day}")
    return ";".join(parts + added)
