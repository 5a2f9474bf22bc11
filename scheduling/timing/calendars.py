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
  creation); ``timing.ics.read_ics`` takes what it needs from a calendar file's ``DTSTART``.
  ``UNTIL`` of a date is the end of that day.
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
import math
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import TypeVar

from dateutil import rrule as du

from scheduling.timing.budgets import Budget, OverBudget
from scheduling.timing.calendar_text import normalise, read_dates, read_property, read_rule
from scheduling.timing.calendar_walk import (
    Counted,
    bisect_after,
    instants_of,
    naive_utc,
    period_start,
    utc_offset,
    walk_walls,
    wall_of,
    years_after,
)
from scheduling.timing.rrule import (
    HORIZON_YEARS,
    MAX_DATES,
    MAX_LINES,
    MAX_TEXT,
    SECOND,
    CalendarError,
    CalendarOverBudget,
    Rule,
)

__all__ = [
    "MAX_TEXT",
    "CalendarError",
    "CalendarOverBudget",
    "CalendarRule",
    "normalise",
]


#: The least CPU time the proof that a set fires at all may take (``_check_fires``).
FIRES_PROOF_SECONDS = 0.25


#: Parsed sets kept per process (each checked once for whether it fires at all).
MAX_PARSED = 256


@dataclass(frozen=True)
class CalendarRule:
    """A validated recurrence set; ``text`` is it normalised (one property per line).

    ``rdates``, ``exdates`` and ``exdays`` are wall times (dates) of the job's zone;
    ``rinstants`` and ``exinstants`` are the times given in UTC or with ``TZID``, as UTC.
    """

    text: str
    rule: Rule | None
    rdates: tuple[datetime, ...]
    exdates: frozenset[datetime]
    exdays: frozenset[date]
    rinstants: tuple[datetime, ...] = ()
    exinstants: frozenset[datetime] = frozenset()
    _counted: dict[datetime, Counted] = field(
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
        offsets = [utc_offset(after, step, zone) for step in (-_DAYS_2, timedelta(0), _DAYS_2)]
        low_offset, high_offset = min(offsets), max(offsets)
        # No wall time below this has an instant after ``after`` (an instant is its wall time
        # minus an offset, and no offset near ``after`` is smaller).
        try:
            lowest = (after + low_offset).replace(tzinfo=None) - SECOND
        except OverflowError:
            lowest = datetime.min
        best = self._next_instant(after, zone)
        ended = True
        until = self.rule.until_instant if self.rule is not None else None
        for wall, last in self._walls(lowest, zone, anchor, budget):
            if wall is None:  # the search reached its horizon without an end of the set
                ended = last
                break
            if best is not None and naive_utc(wall, high_offset) > best:
                break
            for instant in instants_of(wall, zone, fixed=self.follows_wall_time):
                if instant in self.exinstants or (until is not None and instant > until):
                    continue
                if instant > after and (best is None or instant < best):
                    best = instant
            if best is not None and naive_utc(wall, high_offset) >= best:
                break  # every later wall names a later instant: no need to find the next one
        if best is None and not ended:
            when = f"{after:%Y-%m-%d %H:%M} UTC"
            if years_after(lowest, HORIZON_YEARS) == datetime.max:
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
                wall = wall_of(instant, zone)
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
        rdates = self.rdates[bisect_after(self.rdates, lowest) :]
        streams.append(iter(rdates))
        horizon = years_after(lowest, HORIZON_YEARS)
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
        first = period_start(wall_of(anchor, zone), rule)
        if rule.count is not None:
            return self._counted_walls(rule, first, lowest, budget), False
        end = rule.until
        if rule.until_instant is not None:
            try:
                end = wall_of(rule.until_instant, zone)
            except OverflowError:
                end = rule.until_instant.replace(tzinfo=None)
        until = horizon if end is None else min(horizon, end)
        still_going = end is None or end > horizon
        return walk_walls(rule, first, lowest, until, self.exdays, budget), still_going

    def _counted_walls(
        self, rule: Rule, first: datetime, lowest: datetime, budget: Budget
    ) -> Iterator[datetime]:
        """The COUNT rule's walls after ``lowest``, expanded from ``first`` as far as asked."""
        assert rule.count is not None
        state = self._counted.get(first)
        if state is None:
            if len(self._counted) > 64:
                self._counted.clear()
            state = self._counted.setdefault(first, Counted(first, rule.count))
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


@functools.lru_cache(maxsize=MAX_PARSED)
def _parse(text: str) -> CalendarRule:
    if not text:
        raise CalendarError("is empty; give an RRULE line such as FREQ=DAILY;BYHOUR=9")
    lines = text.split("\n")
    if len(lines) > MAX_LINES:
        raise CalendarError(f"has {len(lines)} lines; at most {MAX_LINES}")
    rule: Rule | None = None
    rdates: list[datetime] = []
    rinstants: list[datetime] = []
    exdates: set[datetime] = set()
    exinstants: set[datetime] = set()
    exdays: set[date] = set()
    for line in lines:
        name, params, value = read_property(line)
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
            rule = read_rule(value)
        elif name in ("RDATE", "EXDATE"):
            for item in read_dates(name, params, value):
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


def _any_anchor(rule: Rule) -> Rule:
    """The rule whose periods are every period that ``rule`` keeps from some anchor.

    A daily or coarser period may start any period, so every period is kept from some
    anchor: INTERVAL 1. An hourly or minutely grid counts from the anchor's midnight, and
    midnights are a whole number of days apart: the times of day it reaches from any of them
    are the multiples of gcd(INTERVAL, units in a day), the same from every midnight.
    """
    per_day = {du.HOURLY: 24, du.MINUTELY: 24 * 60}.get(rule.freq, 1)
    return replace(rule, interval=math.gcd(rule.interval, per_day))
