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
* **Times are wall times of the job's zone** (``--tz``, as for cron). ``DTSTART`` lines are
  refused, and so are values in UTC (``...Z``) or with a ``TZID`` parameter: a second zone in
  the text would disagree with the job's. ``UNTIL`` is a wall time too (or a date: the end of
  that day).
* A rule names its times with ``BYHOUR``/``BYMINUTE`` (``BYSECOND``); what it leaves out is
  0, so ``FREQ=DAILY`` fires at 00:00 and ``FREQ=HOURLY`` at the top of each hour.
* ``WEEKLY``, ``MONTHLY`` and ``YEARLY`` rules must say which days (``BYDAY``,
  ``BYMONTHDAY``, ``BYYEARDAY`` or ``BYWEEKNO``; ``YEARLY`` may use ``BYMONTH`` with one of
  them). In RFC 5545 the missing day would come from ``DTSTART``; here it would silently be
  the day the job was made.
* ``EXDATE`` of a date (``EXDATE:20261225``) drops every occurrence on that day; of a
  date-time it drops the occurrence at exactly that wall time. ``RDATE`` takes date-times.
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

Performance: ``next_after`` does not expand from the anchor on every call. It starts the rule
at the beginning of the period that holds the instant asked about (on the ``INTERVAL`` grid
counted from the anchor), which yields the same occurrences, because every day and time field
the rule leaves open was made explicit when it was parsed. Only a ``COUNT`` rule expands from
the anchor, and ``COUNT`` is bounded (``MAX_COUNT``).

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
import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo

from dateutil import rrule as du

__all__ = ["MAX_TEXT", "CalendarError", "CalendarRule", "normalise"]

#: Longest text accepted: a rule and a few years of holidays fit many times over.
MAX_TEXT = 4000
MAX_LINES = 100
MAX_DATES = 1000
MAX_INTERVAL = 1000
MAX_COUNT = 10_000
#: How far ahead a search for the next occurrence looks (cron's horizon too).
HORIZON_YEARS = 50

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
_BYDAY = re.compile(r"^([+-]?\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)$")
_DATE = re.compile(r"^\d{8}$")
_DATETIME = re.compile(r"^\d{8}T\d{6}$")
_SECOND = timedelta(seconds=1)


class CalendarError(ValueError):
    """A recurrence set that cannot be used; str() is a one-line human reason."""


@dataclass(frozen=True)
class _Rule:
    """One RRULE, its open fields made explicit; ``count`` and ``until`` kept apart."""

    freq: int
    interval: int
    wkst: int
    fields: tuple[tuple[str, object], ...]
    count: int | None
    until: datetime | None  # a naive wall time, inclusive


@dataclass(frozen=True)
class CalendarRule:
    """A validated recurrence set; ``text`` is it normalised (one property per line)."""

    text: str
    rule: _Rule | None
    rdates: tuple[datetime, ...]
    exdates: frozenset[datetime]
    exdays: frozenset[date]
    _counted: dict[datetime, tuple[datetime, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @classmethod
    def parse(cls, text: str) -> CalendarRule:
        """Parse RFC 5545 lines (see the module docstring), raising CalendarError."""
        if len(text) > MAX_TEXT:
            raise CalendarError(f"is {len(text)} characters long; at most {MAX_TEXT}")
        return _parse(normalise(text))

    @property
    def follows_wall_time(self) -> bool:
        """Fixed wall times (daily or coarser): a skipped time moves, a repeated one fires once."""
        return self.rule is None or self.rule.freq <= du.DAILY

    # --- occurrences

    def next_after(self, after: datetime, zone: tzinfo, *, anchor: datetime) -> datetime | None:
        """The first occurrence strictly after ``after`` (aware), in UTC; None when over.

        ``anchor`` (aware) fixes the first period of ``INTERVAL`` and ``COUNT``. Raises
        CalendarError when no occurrence falls within ``HORIZON_YEARS`` of ``after`` although
        the set has not ended, or when the next one would fall beyond the year 9999.
        """
        if after.tzinfo is None or after.utcoffset() is None:
            raise ValueError(f"after must be a timezone-aware datetime, got naive {after!r}")
        after = after.astimezone(UTC)
        offsets = [_offset(after, step, zone) for step in (-_DAYS_2, timedelta(0), _DAYS_2)]
        low_offset, high_offset = min(offsets), max(offsets)
        # No wall time below this has an instant after ``after`` (an instant is its wall time
        # minus an offset, and no offset near ``after`` is smaller).
        try:
            lowest = (after + low_offset).replace(tzinfo=None) - _SECOND
        except OverflowError:
            lowest = datetime.min
        best: datetime | None = None
        ended = True
        for wall, last in self._walls(lowest, zone, anchor):
            if wall is None:  # the search reached its horizon without an end of the set
                ended = last
                break
            if best is not None and _naive_utc(wall, high_offset) > best:
                break
            for instant in _instants(wall, zone, fixed=self.follows_wall_time):
                if instant > after and (best is None or instant < best):
                    best = instant
        if best is None and not ended:
            if _years_after(lowest, HORIZON_YEARS) == datetime.max:
                raise CalendarError(
                    f"no occurrence after {after.isoformat()} before the year 10000"
                )
            raise CalendarError(
                f"no occurrence in the {HORIZON_YEARS} years after {after.isoformat()}"
            )
        return best

    def _walls(
        self, lowest: datetime, zone: tzinfo, anchor: datetime
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
            rule_walls, open_ended = self._rule_walls(lowest, horizon, zone, anchor)
            streams.append(rule_walls)
        previous = None
        for wall in heapq.merge(*streams):
            if wall == previous:
                continue
            previous = wall
            if wall in self.exdates or wall.date() in self.exdays:
                continue
            yield wall, True
        yield None, not open_ended

    def _rule_walls(
        self, lowest: datetime, horizon: datetime, zone: tzinfo, anchor: datetime
    ) -> tuple[Iterator[datetime], bool]:
        rule = self.rule
        assert rule is not None
        first = _period_start(_wall(anchor, zone), rule)
        if rule.count is not None:
            walls = self._counted.get(first)
            if walls is None:
                if len(self._counted) > 64:
                    self._counted.clear()
                walls = self._counted[first] = tuple(_expand(rule, first, until=rule.until))
            return iter(walls[_bisect_after(walls, lowest) :]), False
        start = max(first, _grid_start(lowest, first, rule))
        until = horizon if rule.until is None else min(horizon, rule.until)
        still_going = rule.until is None or rule.until > horizon
        found = _expand(rule, start, until=until)
        return (wall for wall in found if wall > lowest), still_going


_DAYS_2 = timedelta(days=2)


def normalise(text: str) -> str:
    """``text`` as stored: one property per line, blank lines and outer spaces dropped."""
    lines = (line.strip() for line in text.replace("\r", "\n").split("\n"))
    return "\n".join(line for line in lines if line)


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


def _grid_start(lowest: datetime, first: datetime, rule: _Rule) -> datetime:
    """The start of the period holding ``lowest`` on the INTERVAL grid counted from ``first``
    (``first`` itself when ``lowest`` is before it)."""
    if lowest <= first:
        return first
    step = rule.interval
    if rule.freq == du.YEARLY:
        years = (lowest.year - first.year) // step * step
        return first.replace(year=first.year + years)
    if rule.freq == du.MONTHLY:
        months = ((lowest.year - first.year) * 12 + lowest.month - first.month) // step * step
        year, month = divmod(first.month - 1 + months, 12)
        return first.replace(year=first.year + year, month=month + 1)
    size = {
        du.WEEKLY: timedelta(weeks=1),
        du.DAILY: timedelta(days=1),
        du.HOURLY: timedelta(hours=1),
        du.MINUTELY: timedelta(minutes=1),
    }[rule.freq]
    periods = (lowest - first) // size // step * step
    return first + size * periods


def _expand(rule: _Rule, start: datetime, *, until: datetime | None) -> Iterator[datetime]:
    try:
        expanded = du.rrule(
            rule.freq,
            dtstart=start,
            interval=rule.interval,
            wkst=rule.wkst,
            count=rule.count,
            until=until,
            **dict(rule.fields),  # type: ignore[arg-type]
        )
        yield from expanded
    except (OverflowError, ValueError):
        return  # the calendar ends (the year 9999)


# --- parsing


@functools.lru_cache(maxsize=256)
def _parse(text: str) -> CalendarRule:
    if not text:
        raise CalendarError("is empty; give an RRULE line such as FREQ=DAILY;BYHOUR=9")
    lines = text.split("\n")
    if len(lines) > MAX_LINES:
        raise CalendarError(f"has {len(lines)} lines; at most {MAX_LINES}")
    rule: _Rule | None = None
    rdates: list[datetime] = []
    exdates: set[datetime] = set()
    exdays: set[date] = set()
    for line in lines:
        if line.upper().startswith("FREQ="):
            line = "RRULE:" + line
        head, colon, value = line.partition(":")
        if not colon:
            raise CalendarError(f"{line[:40]!r} is not NAME:VALUE (such as RRULE:FREQ=DAILY)")
        name, *params = head.split(";")
        name = name.strip().upper()
        value = value.strip()
        if name == "DTSTART":
            raise CalendarError(
                "DTSTART is not accepted: times are read in the job's zone, and a rule "
                "starts at the schedule's start (or the job's creation)"
            )
        if name in ("RRULE", "RDATE", "EXDATE"):
            _check_params(name, params)
        if name == "RRULE":
            if rule is not None:
                raise CalendarError("give one RRULE line (add further dates with RDATE)")
            rule = _parse_rule(value)
        elif name == "RDATE":
            for item in _items(value, name):
                if _DATE.match(item):
                    raise CalendarError(
                        f"RDATE {item!r} is a date; give a date and time such as {item}T090000"
                    )
                rdates.append(_datetime(item, name))
        elif name == "EXDATE":
            for item in _items(value, name):
                if _DATE.match(item):
                    exdays.add(_date(item, name))
                else:
                    exdates.add(_datetime(item, name))
        elif name == "EXRULE":
            raise CalendarError("EXRULE is not accepted (RFC 5545 deprecates it); use EXDATE")
        else:
            raise CalendarError(f"unknown property {name!r} (expected RRULE, RDATE or EXDATE)")
    if rule is None and not rdates:
        raise CalendarError("has no RRULE or RDATE line, so it never fires")
    if len(rdates) + len(exdates) + len(exdays) > MAX_DATES:
        raise CalendarError(f"lists more than {MAX_DATES} dates")
    found = CalendarRule(
        text=text,
        rule=rule,
        rdates=tuple(sorted(set(rdates))),
        exdates=frozenset(exdates),
        exdays=frozenset(exdays),
    )
    _check_fires(found)
    return found


def _check_params(name: str, params: list[str]) -> None:
    for param in params:
        key, _, value = param.partition("=")
        key = key.strip().upper()
        if key == "TZID":
            raise CalendarError(
                f"{name} has TZID; times are read in the job's zone, so leave TZID out"
            )
        if key == "VALUE" and value.strip().upper() in ("DATE", "DATE-TIME"):
            continue
        raise CalendarError(f"{name} parameter {param!r} is not supported")


def _items(value: str, name: str) -> list[str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise CalendarError(f"{name} has no value")
    return items


def _datetime(item: str, name: str) -> datetime:
    if item.upper().endswith("Z"):
        raise CalendarError(
            f"{name} {item!r} is in UTC; write the wall time in the job's zone (without Z)"
        )
    if not _DATETIME.match(item):
        raise CalendarError(f"{name} {item!r} is not a date-time such as 20270101T090000")
    try:
        return datetime.strptime(item, "%Y%m%dT%H%M%S")
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
    until = None
    if until_text is not None:
        if count_value is not None:
            raise CalendarError("RRULE gives both COUNT and UNTIL; RFC 5545 allows one")
        if _DATE.match(until_text):
            until = datetime.combine(_date(until_text, "UNTIL"), time(23, 59, 59))
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
    )
    try:
        du.rrule(freq, dtstart=datetime(2000, 1, 1), interval=interval, **fields)  # type: ignore[arg-type]
    except ValueError as exc:
        raise CalendarError(f"never fires: {exc}") from None
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


def _check_fires(calendar: CalendarRule) -> None:
    """Refuse a set with no occurrence at all.

    An RDATE not excluded fires. A rule is tried in the calendar's last fifty years, which hold
    every day pattern a rule can ask for (the rarest, a weekday on February 29, recurs within
    forty years): dateutil walks a rule that matches nothing until the year 9999, checking
    ``UNTIL`` only against dates it found, so a search started there ends within those years.
    A rule with COUNT or UNTIL may have ended by then; saving it asks whether it has an
    occurrence still to come (``schedules.check_savable``).
    """
    if any(d not in calendar.exdates and d.date() not in calendar.exdays for d in calendar.rdates):
        return
    if calendar.rule is not None:
        if calendar.rule.count or calendar.rule.until:
            return
        probe = datetime(datetime.max.year - HORIZON_YEARS, 1, 1, tzinfo=UTC)
        try:
            if calendar.next_after(probe, UTC, anchor=probe) is not None:
                return
        except CalendarError:
            pass
    raise CalendarError("never fires: no date matches the rule (minus its EXDATEs)")
