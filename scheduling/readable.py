"""Times and durations as people read them: one format for the admin, the dashboard and the
commands.

- an instant relative to now: "12 s ago", "in 3 min", "2 h ago", "5 d ago" (seconds below
  ninety seconds, so a job that runs every ten seconds reads in seconds);
- an instant exactly: "2030-01-31 09:00:05 UTC", to the second, never with microseconds;
- a length of time: "0.412 s", "12 s", "3 min 5 s", "2 h 10 min";
- an interval: "every 10 seconds", "every hour", "every 1 hour 30 minutes", never "every PT10S".

Pure: plain values in, text out; nothing here reads the clock or the database.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from scheduling.timing.schedules import ScheduleError, parse_duration

_CALENDAR = re.compile(r"^P(\d+)([YM])$")
_CALENDAR_UNITS = {"Y": "year", "M": "month"}
_UNITS = (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))


def span(seconds: float) -> str:
    """A length of time in the largest unit that reads well: "0.412 s", "12 s", "3 min 5 s"."""
    value = abs(seconds)
    if value < 10:
        return f"{value:.3g} s" if value else "0 s"
    if value < 90:
        return f"{round(value)} s"
    if value < 90 * 60:
        minutes, rest = divmod(round(value), 60)
        return f"{minutes} min {rest} s" if rest and minutes < 10 else f"{round(value / 60)} min"
    if value < 36 * 3600:
        hours, rest = divmod(round(value / 60), 60)
        return f"{hours} h {rest} min" if rest and hours < 10 else f"{round(value / 3600)} h"
    return f"{round(value / 86400)} d"


def _coarse(seconds: float) -> str:
    value = abs(seconds)
    if value < 90:
        return f"{round(value)} s"
    if value < 90 * 60:
        return f"{round(value / 60)} min"
    if value < 36 * 3600:
        return f"{round(value / 3600)} h"
    return f"{round(value / 86400)} d"


def ago(moment: datetime | None, now: datetime) -> str:
    """``moment`` relative to ``now``: "12 s ago", "in 3 min", "now" (within a second)."""
    if moment is None:
        return "-"
    seconds = (now - moment).total_seconds()
    if abs(seconds) < 1:
        return "now"
    return f"{_coarse(seconds)} ago" if seconds > 0 else f"in {_coarse(seconds)}"


def instant(moment: datetime | None) -> str:
    """``moment`` exactly, to the second, in UTC: "2030-01-31 09:00:05 UTC"."""
    if moment is None:
        return "-"
    try:
        return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
    except (OverflowError, ValueError):  # the ends of the range (``pgtimes``)
        return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def lag(delta: timedelta) -> str:
    """A start minus due time, signed: "+0.4 s", "+12 s", "+3 min"."""
    seconds = delta.total_seconds()
    return ("-" if seconds < 0 else "+") + span(seconds)


def describe_interval(text: str) -> str:
    """``PT90M`` as "every 1 hour 30 minutes"; ``PT1H`` as "every hour"; ``PT10S`` as
    "every 10 seconds"."""
    calendar = _CALENDAR.match(text or "")
    if calendar:  # months and years: calendar steps, not a fixed number of seconds
        count, unit = int(calendar.group(1)), _CALENDAR_UNITS[calendar.group(2)]
        return f"every {unit}" if count == 1 else f"every {count} {unit}s"
    try:
        seconds = int(parse_duration(text).total_seconds())
    except ScheduleError:
        return f"every {text}"
    parts = []
    for unit, size in _UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count} {unit}{'' if count == 1 else 's'}")
    if len(parts) == 1 and parts[0].startswith("1 "):
        return f"every {parts[0][2:]}"
    return "every " + " ".join(parts)
