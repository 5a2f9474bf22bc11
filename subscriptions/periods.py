"""Billing periods: ISO-8601 fulfilment intervals counted from an anchor. Pure: no ORM, no clock.

Period ``n`` starts at ``anchor + n x interval``, computed from the anchor every time and never
by adding the interval to the previous period's start. Month arithmetic keeps the anchor's day
and clamps it to the length of the month, so an anchor on 31 January renews on 28 (or 29)
February and then on 31 March; repeated "date + one month" would drift to the 28th for ever.
Second- and minute-based intervals are plain elapsed time.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

_DURATION = re.compile(
    r"^P(?!$)(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


#: The longest interval text read: the column's width. Longer text is refused before it is
#: parsed, so no input makes the parser convert a number of thousands of digits.
MAX_INTERVAL_TEXT = 64
#: The shortest period: one renewal a second. A shorter one (``PT0.000001S``) would ask for a
#: million renewals, orders and charges a second, every second.
MIN_PERIOD = timedelta(seconds=1)
#: Anything longer ends its first period after the year 9999, from any anchor: refused before
#: ``timedelta`` would overflow on it.
_MAX_MONTHS = 12 * 10_000
_MAX_SECONDS = 10_000 * 366 * 86_400
_SECONDS = {"weeks": 7 * 86_400, "days": 86_400, "hours": 3_600, "minutes": 60, "seconds": 1}


class PeriodError(ValueError):
    """An interval or instant that cannot define billing periods; ``field`` names the input."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class Interval:
    """A fulfilment interval: whole calendar months plus a fixed amount of elapsed time."""

    months: int
    elapsed: timedelta

    @property
    def is_positive(self) -> bool:
        return self.months > 0 or self.elapsed > timedelta(0)


def parse_interval(text: str, *, field: str = "interval") -> Interval:
    """Read an ISO-8601 duration such as ``P1M``, ``P1Y``, ``P2W`` or ``PT30S``.

    Years count as 12 months and weeks as 7 days. Zero (``PT0S``) is refused: a period must
    end after it starts; so is a period shorter than a second (``MIN_PERIOD``), and one so
    long that it would end after the year 9999 from any anchor.
    """
    text = text or ""
    if len(text) > MAX_INTERVAL_TEXT:
        raise PeriodError(
            field, f"is {len(text)} characters long; an interval is at most {MAX_INTERVAL_TEXT}"
        )
    match = _DURATION.match(text.strip().upper())
    if not match:
        raise PeriodError(
            field, f"{text!r} is not an ISO-8601 duration such as P1M, P1Y, P7D or PT30S"
        )
    parts = {name: value for name, value in match.groupdict().items() if value}
    months = 12 * int(parts.get("years", 0)) + int(parts.get("months", 0))
    seconds = sum(
        (Decimal(parts.get(name, 0)) * size for name, size in _SECONDS.items()), Decimal(0)
    )
    if months > _MAX_MONTHS or seconds > _MAX_SECONDS:
        raise PeriodError(field, f"{text!r} ends the first period after the year 9999")
    interval = Interval(months=months, elapsed=timedelta(seconds=float(seconds)))
    if not interval.is_positive:
        raise PeriodError(field, f"{text!r} is zero; an interval must be longer than nothing")
    if not months and interval.elapsed < MIN_PERIOD:
        raise PeriodError(
            field, f"{text!r} is shorter than a second; a period lasts at least PT1S"
        )
    return interval


def add_months(moment: datetime, months: int, *, day: int) -> datetime:
    """``moment`` moved ``months`` months on, on ``day`` or the month's last day if shorter."""
    index = moment.month - 1 + months
    year, month = moment.year + index // 12, index % 12 + 1
    last = calendar.monthrange(year, month)[1]
    return moment.replace(year=year, month=month, day=min(day, last))


def period_start(anchor: datetime, interval: Interval, number: int) -> datetime:
    """The start of period ``number`` (0 is the period that starts at the anchor)."""
    if number < 0:
        raise PeriodError("period", f"{number} is negative")
    moment = anchor
    if interval.months:
        moment = add_months(anchor, interval.months * number, day=anchor.day)
    return moment + interval.elapsed * number


def period_bounds(anchor: datetime, interval: Interval, number: int) -> tuple[datetime, datetime]:
    """``(start, end)`` of period ``number``; the end is the next period's start."""
    return period_start(anchor, interval, number), period_start(anchor, interval, number + 1)


def period_containing(anchor: datetime, interval: Interval, moment: datetime) -> int:
    """The number of the period that contains ``moment`` (0 for any moment before the anchor)."""
    if moment <= anchor:
        return 0
    # An estimate from the average period length, then corrected in whole steps.
    average = interval.elapsed + timedelta(days=30.436875) * interval.months
    number = max(0, int((moment - anchor) / average) - 1)
    while period_start(anchor, interval, number + 1) <= moment:
        number += 1
    while number > 0 and period_start(anchor, interval, number) > moment:
        number -= 1
    return number


def count_periods(anchor: datetime, interval: Interval, end: datetime | None) -> int | None:
    """How many periods start before ``end`` (None: no end, the subscription runs on)."""
    if end is None:
        return None
    if end <= anchor:
        return 0
    number = period_containing(anchor, interval, end)
    return number + (1 if period_start(anchor, interval, number) < end else 0)
