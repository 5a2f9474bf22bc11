"""Five-field cron expressions and the instants at which they fire, through cronsim.

This module is pure: it never reads the clock, touches the database or imports Django, so
the scheduler can ask "when is the next occurrence after T?" for any T, including instants
in the past when it catches up after downtime, and get the same answer every time. Parsing
and matching are cronsim's (the library Healthchecks maintains, which follows Debian's cron);
this module adds the macros, one-line reasons naming the field, and UTC results.

Syntax
------
The form ``minute hour day-of-month month day-of-week``:

* ``*``, a number, a range ``a-b``, a step ``*/n`` or ``a-b/n``, an open stepped range
  ``a/n`` (``a`` up to the field's maximum in steps of ``n``), and comma-separated lists.
* Month names ``JAN``-``DEC`` and weekday names ``SUN``-``SAT``, in any case. Day-of-week
  counts ``0`` = Sunday to ``6`` = Saturday; ``7`` is also Sunday.
* ``L`` (the last day of the month) and ``LW`` (its last weekday, Monday to Friday) in
  day-of-month; ``5L`` (the month's last Friday) and ``1#2`` (its second Monday) in
  day-of-week.
* Macros ``@yearly`` (= ``@annually``), ``@monthly``, ``@weekly``, ``@daily``
  (= ``@midnight``) and ``@hourly``. ``@reboot`` and six- or seven-field forms (seconds,
  years) are refused.
* When both day-of-month and day-of-week are restricted (neither starts with ``*``), a day
  matches when *either* matches: ``0 0 1 * MON`` fires on the 1st and on every Monday.

An expression that cannot fire, such as ``0 0 30 2 *``, is refused when parsed.

Time zones and daylight-saving time
-----------------------------------
An expression is matched against the wall clock of the schedule's time zone; the instants
returned are in UTC. Where the wall clock jumps, the rule depends on the expression, as in
Debian's cron:

* **Fixed-time expressions** (neither the minute nor the hour field starts with ``*``, such
  as ``30 2 * * *`` or ``0 9,17 * * 1-5``) fire once per named wall time. A time skipped when
  the clocks go forward fires at the first minute after the jump (in Europe/Berlin on
  2024-03-31, ``30 2 * * *`` fires at 03:00 CEST); several skipped times fire once there
  together. A time that occurs twice when the clocks go back fires at its first occurrence,
  still on summer time.
* **Every other expression** (``* * * * *``, ``*/15 * * * *``, ``30 * * * *``,
  ``0 */2 * * *``) follows elapsed time: wall times that do not exist never fire, and wall
  times that occur twice fire twice. An every-minute job keeps running every minute through
  the repeated autumn hour, and an hourly one runs 25 times that day.
* Successive occurrences are strictly increasing instants; no instant is returned twice.

Occurrences are always on a whole minute; seconds in the instant asked about count, so the
next occurrence after 12:00:30 of ``* * * * *`` is 12:01:00.
"""

from __future__ import annotations

import calendar
import functools
from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any

from cronsim import CronSim, CronSimError

__all__ = ["CronError", "CronExpression"]


class CronError(ValueError):
    """A cron expression that cannot be parsed; str() is a one-line human reason."""


_FIELDS = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31, L or LW"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT, 5L for the last Friday, 1#2 for the second Monday"),
)
_FIELD_LIST = " ".join(name for name, _ in _FIELDS)

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# cronsim looks 50 years ahead; every day pattern it accepts recurs within that (the rarest,
# a fifth Monday in February, within 40 years), so one with no occurrence from this instant
# on has none at all.
_PROBE_FROM = datetime(2000, 1, 1, tzinfo=UTC)
# How many (year, month) lists of matching days a search keeps before starting afresh.
_MONTHS_KEPT = 240
_SECOND = timedelta(seconds=1)
_MINUTE = timedelta(minutes=1)
_DAY = timedelta(days=1)
_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "Etc/Universal", "Universal", "Zulu", "Etc/Zulu"})


@dataclass(frozen=True)
class CronExpression:
    """A validated five-field expression; ``text`` is it with macros expanded and single spaces.

    Construction parses through cronsim and checks that the expression fires at some point,
    so every instance can answer ``next_after``.
    """

    text: str
    _searches: dict[str, _Search] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        _check(self.text)

    @classmethod
    def parse(cls, text: str) -> CronExpression:
        """Parse five-field cron syntax or a macro, raising CronError with the reason."""
        return _parse(" ".join(text.split()))

    def next_after(self, after: datetime, tz: tzinfo) -> datetime:
        """The first firing instant strictly after ``after``, in UTC.

        Fields are matched in the wall-clock time of ``tz`` with the daylight-saving rules of
        the module docstring. ``after`` may be in any time zone but must be aware, since a
        naive value would silently be read in some arbitrary zone.
        """
        if after.tzinfo is None or after.utcoffset() is None:
            raise ValueError(f"after must be a timezone-aware datetime, got naive {after!r}")
        search = self._search(tz)
        try:
            return search.first_after(after)
        except StopIteration:
            # cronsim's horizon; only reached near the end of the calendar.
            raise CronError(f"no firing time in the 50 years after {_minute(after)}") from None
        except OverflowError:
            raise CronError(
                f"no firing time after {_minute(after)} before the year 10000"
            ) from None

    def _search(self, tz: tzinfo) -> _Search:
        key = str(tz)
        search = self._searches.get(key)
        if search is None:
            # cronsim walks plain UTC only for this exact object; ZoneInfo("UTC") would take
            # its slower daylight-saving path for nothing.
            zone = UTC if key in _UTC_NAMES else tz
            search = self._searches[key] = _Search(self.text, datetime(2000, 1, 1, tzinfo=zone))
        return search


@functools.lru_cache(maxsize=1024)
def _parse(text: str) -> CronExpression:
    # Shared instances keep their parsed searches, so a schedule read on every claim is
    # parsed once per process.
    if not text:
        raise CronError("empty expression")
    if text.startswith("@"):
        return _parse(_expand_macro(text))
    return CronExpression(" ".join(_field_text(part) for part in text.split()))


def _field_text(part: str) -> str:
    # cronsim reads a stepped range of one value ("5-5/2") as an open one ("5/2", up to the
    # field's maximum); it means that one value.
    items = part.split(",")
    for index, item in enumerate(items):
        span, slash, step = item.partition("/")
        start, dash, end = span.partition("-")
        if slash and dash and start.upper() == end.upper() and step.isdigit():
            items[index] = start
    return ",".join(items)


def _expand_macro(text: str) -> str:
    macro, *rest = text.split()
    macro = macro.lower()
    if macro == "@reboot":
        raise CronError("@reboot is not supported: it names no time of day")
    if macro not in _MACROS:
        raise CronError(f"unknown macro {macro} (expected one of {', '.join(_MACROS)})")
    if rest:
        raise CronError(f"unexpected text after {macro}: {' '.join(rest)!r}")
    return _MACROS[macro]


def _check(text: str) -> None:
    parts = text.split()
    if len(parts) != len(_FIELDS):
        hint = "; seconds and year fields are not supported" if len(parts) > 5 else ""
        raise CronError(f"expected 5 fields ({_FIELD_LIST}), got {len(parts)}{hint}")
    try:
        first = next(CronSim(text, _PROBE_FROM))
    except CronSimError:
        raise CronError(_reason(parts)) from None
    except StopIteration:
        first = None
    if first is None:
        raise CronError(f"never fires: no date matches {' '.join(parts[2:])!r}")


def _reason(parts: list[str]) -> str:
    """Which field cronsim refused, found by trying each field alone."""
    for index, (name, accepted) in enumerate(_FIELDS):
        alone = ["*"] * len(_FIELDS)
        alone[index] = parts[index]
        try:
            CronSim(" ".join(alone), _PROBE_FROM)
        except CronSimError:
            return f"{name} field: {parts[index]!r} is not valid (accepted: {accepted})"
    return f"never fires: day-of-month {parts[2]!r} does not occur in month {parts[3]!r}"


class _Search(CronSim):
    """cronsim's forward search, reusable for any start instant in one time zone.

    The expression is parsed once; ``first_after`` copies the parsed state and moves the
    start. cronsim steps to the next allowed minute or hour one unit at a time (through UTC
    when it walks aware wall-clock time) and re-checks every field after each step; the claim
    path pays that per due job, so here the next allowed day, hour and minute are reached in
    one step each. On a plain clock (naive wall time, which cronsim walks for fixed-time
    expressions, or UTC) a step within the day or hour leaves the larger fields valid and
    the search goes on from there. On an aware clock a step within the hour is the same UTC
    move as cronsim's single steps added up, and a step across hours is the wall time made
    real the way a step through UTC makes it; either is then re-checked. The property tests
    in ``tests/scheduling/test_cron.py`` hold the result to a minute-by-minute oracle.
    """

    def __init__(self, text: str, start: datetime) -> None:
        super().__init__(text, start)
        self._zone: Any = self.fixup_tz if self.fixup_tz is not None else self.dt.tzinfo
        self._plain = self.fixup_tz is not None or self._zone is UTC
        self._minutes = sorted(self.minutes)
        self._hours = sorted(self.hours)
        # Matching days per (year, month), decided by cronsim's own day rule once per month;
        # shared by every search copied from this one.
        self._month_days: dict[tuple[int, int], tuple[int, ...]] = {}

    def first_after(self, after: datetime) -> datetime:
        search = object.__new__(_Search)
        search.__dict__.update(self.__dict__)
        # cronsim starts one second after the start it is given, on the clock it walks: naive
        # wall time for fixed-time expressions (so a start just before a spring gap still
        # finds the times the gap skipped), otherwise UTC. (The constructor, not replace(),
        # which is several times slower on CPython.)
        if self.fixup_tz is not None:
            at = after.astimezone(self._zone)
            search.dt = datetime(at.year, at.month, at.day, at.hour, at.minute, at.second) + _SECOND
        else:
            at = (after + _SECOND - timedelta(microseconds=after.microsecond)).astimezone(
                self._zone
            )
            search.dt = datetime(
                at.year,
                at.month,
                at.day,
                at.hour,
                at.minute,
                at.second,
                tzinfo=self._zone,
                fold=at.fold,
            )
        # A wall time repeated in autumn maps to its first instant, which can lie before an
        # `after` inside the repeat; keep going until past it.
        found = search._step(tick=False)
        while found <= after:
            found = search._step()
        return found

    def _step(self, *, tick: bool = True) -> datetime:
        """cronsim's ``__next__`` going forward, with the instant in UTC.

        Walking naive wall time (fixed-time expressions), cronsim moves a time the clocks
        skipped to the first real minute after it; that is done here with the UTC instant the
        result needs anyway, instead of converting twice more.
        """
        if tick:
            self.tick()
        self.advance()
        zone = self.fixup_tz
        if zone is None:
            return self.dt.astimezone(UTC)
        while True:
            wall = self.dt
            instant = datetime(
                wall.year, wall.month, wall.day, wall.hour, wall.minute, tzinfo=zone
            ).astimezone(UTC)
            real = instant.astimezone(zone)
            if (real.minute, real.hour, real.day) == (wall.minute, wall.hour, wall.day):
                return instant
            self.dt += _MINUTE

    def advance_day(self) -> bool:
        day = self.dt.date()
        days = self._days_of(day.year, day.month)
        if day.day in days:
            return False
        later = bisect_right(days, day.day)
        if later < len(days):
            self.dt = datetime(day.year, day.month, days[later], tzinfo=self.dt.tzinfo)
            if not self._plain:
                # Midnight may not exist on that day (a spring gap at 00:00): go on from the
                # first real instant, and check every field again from there.
                self.dt = self.dt.astimezone(UTC).astimezone(self.dt.tzinfo)
                return True
            return False  # same month: still allowed
        year, month = (day.year + 1, 1) if day.month == 12 else (day.year, day.month + 1)
        self.dt = datetime(year, month, 1, tzinfo=self.dt.tzinfo)
        if not self._plain:
            self.dt = self.dt.astimezone(UTC).astimezone(self.dt.tzinfo)
        return True

    def _days_of(self, year: int, month: int) -> tuple[int, ...]:
        days = self._month_days.get((year, month))
        if days is None:
            if len(self._month_days) > _MONTHS_KEPT:
                self._month_days.clear()
            length = calendar.monthrange(year, month)[1]
            days = tuple(d for d in range(1, length + 1) if self.match_day(date(year, month, d)))
            self._month_days[(year, month)] = days
        return days

    def advance_hour(self) -> bool:
        hour = self.dt.hour
        if hour in self.hours:
            return False
        dt = self.dt
        later = bisect_right(self._hours, hour)
        if later < len(self._hours):
            wall = datetime(dt.year, dt.month, dt.day, self._hours[later], tzinfo=dt.tzinfo)
            if self._plain:
                self.dt = wall
                return False  # same day: still allowed
        else:
            wall = datetime(dt.year, dt.month, dt.day, tzinfo=dt.tzinfo) + _DAY
        if not self._plain:
            wall = wall.astimezone(UTC).astimezone(wall.tzinfo)
        self.dt = wall
        return True

    def advance_minute(self) -> bool:
        minute = self.dt.minute
        if minute in self.minutes:
            return False
        later = bisect_right(self._minutes, minute)
        target = self._minutes[later] if later < len(self._minutes) else 60
        dt = self.dt
        if self._plain and target < 60:
            self.dt = datetime(dt.year, dt.month, dt.day, dt.hour, target, tzinfo=dt.tzinfo)
            return False  # same hour: still allowed
        self.tick(seconds=(target - minute) * 60 - dt.second)
        return True


def _minute(instant: datetime) -> str:
    """``instant`` to the minute in UTC, as an error message shows it."""
    return f"{instant.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
