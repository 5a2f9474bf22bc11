"""Five-field cron expressions and the instants at which they fire.

This module is pure: it never reads the clock, touches the database or imports Django, so
the scheduler can ask "when is the next occurrence after T?" for any T, including instants
in the past when it catches up after downtime, and get the same answer every time.

Syntax
------
The standard Vixie-cron form ``minute hour day-of-month month day-of-week``:

* ``*``, a number, a range ``a-b``, a step over everything ``*/n``, a stepped range
  ``a-b/n``, an open stepped range ``a/n`` (``a`` up to the field's maximum in steps of
  ``n``), and comma-separated lists of these (``0,15-20,*/30``).
* Month names ``JAN``-``DEC`` and weekday names ``SUN``-``SAT``, in any case, wherever a
  number is allowed in those fields (also as range ends, never as steps).
* Day-of-week counts ``0`` = Sunday to ``6`` = Saturday; ``7`` is also accepted as Sunday.
  ``*`` and ``a/n`` in day-of-week span ``0-6``.
* Macros ``@yearly`` (= ``@annually``), ``@monthly``, ``@weekly``, ``@daily``
  (= ``@midnight``) and ``@hourly``. ``@reboot`` and six- or seven-field forms (seconds,
  years) are rejected.
* The Vixie day rule: when both day-of-month and day-of-week are restricted (neither field
  starts with ``*``), a day matches when *either* matches, so ``0 0 1 * MON`` fires on
  the 1st of every month and on every Monday. Otherwise both must match; ``*/2`` counts as
  unrestricted because it starts with ``*``, exactly as in Vixie cron.

Expressions that can never fire, such as ``0 0 30 2 *``, are rejected when parsed rather
than discovered later as a schedule that silently never runs.

Time zones and daylight-saving time
-----------------------------------
An expression is matched against the wall-clock time of the schedule's time zone; the
instants returned are always in UTC. Where the wall clock jumps, the rules are:

* **Skipped time (clocks go forward).** A wall time that does not exist on that day fires
  once, at the wall time shifted forward by the length of the gap. In Europe/Berlin on
  2024-03-31 the clock jumps from 02:00 to 03:00, so ``30 2 * * *`` fires at 03:30 CEST
  (01:30 UTC); in Australia/Lord_Howe, where the gap is 30 minutes, a 02:15 job fires at
  02:45. Several skipped times keep their spacing (``*/15 2 * * *`` fires at 03:00, 03:15,
  03:30 and 03:45 CEST). If a shifted time coincides with a time the expression names
  anyway (``0 2,3 * * *`` shifts 02:00 onto 03:00), the job runs once at that instant.
* **Repeated time (clocks go back).** A wall time that occurs twice fires once, at its
  first occurrence (still on summer time). The repeated hour is not run twice: in
  Europe/Berlin on 2024-10-27 the clock goes from 03:00 CEST back to 02:00 CET, and
  ``30 * * * *`` fires at 00:30, 01:30 and 02:30 CEST, then at 03:30 CET, but not at
  02:30 CET. An every-minute job is idle for that repeated hour.
* Successive occurrences are strictly increasing instants; no instant is returned twice.

Occurrences are always on a whole minute; seconds in the instant asked about count, so the
next occurrence after 12:00:30 of ``* * * * *`` is 12:01:00.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

__all__ = ["CronError", "CronExpression"]


class CronError(ValueError):
    """A cron expression that cannot be parsed; str() is a one-line human reason."""


_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_FIELD_LIST = " ".join(_FIELD_NAMES)

# Spelled out rather than taken from `calendar`, whose names follow the process locale.
_MONTH_FULL_NAMES = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_MONTH_NAMES = {name[:3].upper(): number for number, name in enumerate(_MONTH_FULL_NAMES, 1)}
_WEEKDAY_NAMES = {
    name: number for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))
}
# Using a leap year so that February 29 counts as a day that exists.
_LONGEST_MONTH = {month: calendar.monthrange(2000, month)[1] for month in range(1, 13)}

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# The Gregorian calendar, weekdays included, repeats every 400 years: a day pattern that
# does not occur within that window never occurs at all.
_SEARCH_YEARS = 400
_ONE_DAY = timedelta(days=1)
# How far back to look for a clock change that may have pushed a skipped wall time past
# `after`: gaps are at most a few hours in practice (one day for Samoa's 2011 date-line move).
_GAP_PROBES = (timedelta(hours=3), timedelta(hours=26))


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    # Largest value accepted on input; differs from `high` only for day-of-week (7 = Sunday).
    input_high: int
    names: Mapping[str, int]
    names_hint: str

    def error(self, reason: str) -> CronError:
        return CronError(f"{self.name} field: {reason}")

    def parse(self, text: str) -> frozenset[int]:
        values: set[int] = set()
        for item in text.split(","):
            if not item:
                raise self.error(f"empty list item in {text!r}")
            values.update(self._parse_item(item))
        return frozenset(values)

    def _parse_item(self, item: str) -> range:
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not _is_number(step_text) or int(step_text) == 0:
                raise self.error(f"step must be a positive integer, got {step_text!r} in {item!r}")
            step = int(step_text)
            if step > self.high - self.low + 1:
                raise self.error(f"step {step} exceeds the field's range {self.low}-{self.high}")
        if base == "*":
            return range(self.low, self.high + 1, step)
        start_text, dash, end_text = base.partition("-")
        if dash and (not start_text or not end_text):
            raise self.error(f"malformed range {base!r}")
        start = self._value(start_text)
        if dash:
            end = self._value(end_text)
            if start > end:
                raise self.error(f"range {base} is backwards (start is after end)")
        elif slash:
            end = self.high
        else:
            end = start
        return range(start, end + 1, step)

    def _value(self, text: str) -> int:
        if _is_number(text):
            value = int(text)
        elif text.upper() in self.names:
            return self.names[text.upper()]
        else:
            raise self.error(f"{text!r} is not a number{self.names_hint}")
        if not self.low <= value <= self.input_high:
            raise self.error(f"{value} is out of range {self.low}-{self.input_high}")
        return value


def _is_number(text: str) -> bool:
    # str.isdigit alone would also admit digits of other scripts, which cron does not.
    return text.isascii() and text.isdigit()


_MINUTE = _Field("minute", 0, 59, 59, {}, "")
_HOUR = _Field("hour", 0, 23, 23, {}, "")
_DAY_OF_MONTH = _Field("day-of-month", 1, 31, 31, {}, "")
_MONTH = _Field("month", 1, 12, 12, _MONTH_NAMES, " or month name (JAN-DEC)")
_DAY_OF_WEEK = _Field("day-of-week", 0, 6, 7, _WEEKDAY_NAMES, " or weekday name (SUN-SAT)")
_FIELDS = (_MINUTE, _HOUR, _DAY_OF_MONTH, _MONTH, _DAY_OF_WEEK)


@dataclass(frozen=True)
class CronExpression:
    """The set of wall-clock minutes a cron expression names.

    Kept as expanded sets rather than as text so that matching is a membership test and
    the next occurrence can be found by walking sorted values instead of scanning time.
    Construction validates the sets, so every instance can fire at some point.
    """

    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    dom_restricted: bool
    dow_restricted: bool
    _sorted_minutes: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _sorted_hours: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        days_of_week = frozenset(0 if day == 7 else day for day in self.days_of_week)
        object.__setattr__(self, "days_of_week", days_of_week)
        for spec, values in zip(_FIELDS, self._field_values(), strict=True):
            if not values:
                raise spec.error("no values")
            for value in values:
                if not spec.low <= value <= spec.high:
                    raise spec.error(f"{value} is out of range {spec.low}-{spec.high}")
        if not (self.dom_restricted and self.dow_restricted):
            self._check_some_day_exists()
        object.__setattr__(self, "_sorted_minutes", tuple(sorted(self.minutes)))
        object.__setattr__(self, "_sorted_hours", tuple(sorted(self.hours)))

    def _field_values(self) -> tuple[frozenset[int], ...]:
        return (self.minutes, self.hours, self.days_of_month, self.months, self.days_of_week)

    def _check_some_day_exists(self) -> None:
        if any(day <= _LONGEST_MONTH[m] for m in self.months for day in self.days_of_month):
            return
        months = "/".join(_MONTH_FULL_NAMES[m - 1] for m in sorted(self.months))
        days = "/".join(str(day) for day in sorted(self.days_of_month))
        raise CronError(f"never fires: no such day ({months} {days})")

    @classmethod
    def parse(cls, text: str) -> CronExpression:
        """Parse five-field cron syntax or a macro, raising CronError with the reason."""
        stripped = text.strip()
        if not stripped:
            raise CronError("empty expression")
        if stripped.startswith("@"):
            return cls._parse_macro(stripped)
        parts = stripped.split()
        if len(parts) != 5:
            hint = "; seconds and year fields are not supported" if len(parts) > 5 else ""
            raise CronError(f"expected 5 fields ({_FIELD_LIST}), got {len(parts)}{hint}")
        minutes, hours, doms, months, dows = (
            spec.parse(part) for spec, part in zip(_FIELDS, parts, strict=True)
        )
        return cls(
            minutes=minutes,
            hours=hours,
            days_of_month=doms,
            months=months,
            days_of_week=dows,
            dom_restricted=not parts[2].startswith("*"),
            dow_restricted=not parts[4].startswith("*"),
        )

    @classmethod
    def _parse_macro(cls, text: str) -> CronExpression:
        macro, *rest = text.split()
        macro = macro.lower()
        if macro == "@reboot":
            raise CronError("@reboot is not supported: it names no time of day")
        if macro not in _MACROS:
            known = ", ".join(_MACROS)
            raise CronError(f"unknown macro {macro} (expected one of {known})")
        if rest:
            raise CronError(f"unexpected text after {macro}: {' '.join(rest)!r}")
        return cls.parse(_MACROS[macro])

    def matches_date(self, d: date) -> bool:
        """Whether the expression fires at some time on calendar day `d`."""
        return d.month in self.months and self._day_matches(d)

    def _day_matches(self, d: date) -> bool:
        dom = d.day in self.days_of_month
        dow = d.isoweekday() % 7 in self.days_of_week
        if self.dom_restricted and self.dow_restricted:
            return dom or dow
        return dom and dow

    def next_after(self, after: datetime, tz: ZoneInfo) -> datetime:
        """The first firing instant strictly after `after`, in UTC.

        Fields are matched in the wall-clock time of `tz`, with the daylight-saving rules
        in the module docstring. `after` may be in any time zone but must be aware, since a
        naive value would silently be read in some arbitrary zone.
        """
        if after.tzinfo is None or after.utcoffset() is None:
            raise ValueError(f"after must be a timezone-aware datetime, got naive {after!r}")
        try:
            found = self._next_after(after.astimezone(UTC), tz)
        except OverflowError:
            found = None
        if found is None:
            raise CronError(f"no firing time after {after.isoformat()} in the Gregorian calendar")
        return found

    def _next_after(self, after: datetime, tz: ZoneInfo) -> datetime | None:
        local = after.astimezone(tz)
        # A wall time skipped by a recent spring-forward fires at a shifted instant that can
        # lie after `after` even though the wall time itself is earlier than local `after`,
        # so start that much earlier.
        offset = _utcoffset(local)
        back = max(offset - _utcoffset((after - probe).astimezone(tz)) for probe in _GAP_PROBES)
        start = local.replace(tzinfo=None, second=0, microsecond=0) - max(back, timedelta(0))

        # Wall times are walked in order, but a shifted skipped time maps to a later instant
        # than the real wall times just after the gap, so keep the earliest instant seen until
        # the walk passes the wall time of the best one; beyond that instants only grow.
        best: datetime | None = None
        stop: datetime | None = None
        for wall in self._walls_from(start):
            if stop is not None and wall >= stop:
                break
            instant = wall.replace(tzinfo=tz).astimezone(UTC)
            if instant > after and (best is None or instant < best):
                best = instant
                stop = instant.astimezone(tz).replace(tzinfo=None)
        return best

    def _walls_from(self, start: datetime) -> Iterator[datetime]:
        """Naive wall times the expression names, in order, from `start` inclusive."""
        minutes, hours = self._sorted_minutes, self._sorted_hours
        last = date(min(start.year + _SEARCH_YEARS, date.max.year), 12, 31)
        day = self._next_day(start.date(), last)
        first_hour, first_minute = (start.hour, start.minute) if day == start.date() else (0, 0)
        while day is not None:
            year, month, dom = day.year, day.month, day.day
            for hour in hours[bisect_left(hours, first_hour) :]:
                from_minute = first_minute if hour == first_hour else 0
                for minute in minutes[bisect_left(minutes, from_minute) :]:
                    yield datetime(year, month, dom, hour, minute)
            first_hour = first_minute = 0
            day = None if day >= last else self._next_day(day + _ONE_DAY, last)

    def _next_day(self, day: date, last: date) -> date | None:
        """The first matching calendar day from `day` to `last` inclusive, if any."""
        while day <= last:
            if day.month not in self.months:
                if day.month == 12:
                    if day.year >= last.year:
                        return None
                    day = date(day.year + 1, 1, 1)
                else:
                    day = date(day.year, day.month + 1, 1)
                continue
            if self._day_matches(day):
                return day
            if day >= last:
                return None
            day += _ONE_DAY
        return None


def _utcoffset(moment: datetime) -> timedelta:
    offset = moment.utcoffset()
    if offset is None:
        raise ValueError(f"time zone {moment.tzinfo!r} gives no UTC offset for {moment}")
    return offset
