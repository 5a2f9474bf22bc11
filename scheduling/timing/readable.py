"""Times, lengths and schedules as people read them: the one rule for the admin, the
dashboard, the domain apps' pages and the commands.

Times follow one rule everywhere:

- an instant exactly, to the second, never with microseconds, in one zone that the text names:
  "2030-01-31 04:00:05 EST". The zone is Django's current time zone, which is the project's
  ``TIME_ZONE`` unless the host activated another for the request; a command's ``--tz`` passes
  its own (``zone_named``);
- beside it, where it helps, the instant relative to now: "12 s ago", "in 3 min", "2 h ago"
  (seconds below ninety seconds, so a job that runs every ten seconds reads in seconds);
- an instant further than ``FAR`` (30 days) from now has no relative words: "in 2912114 d"
  says nothing a date does not say better, so ``ago`` gives the date and ``when`` the instant
  alone.

And the rest:

- a length of time: "0.412 s", "12 s", "3 min 5 s", "2 h 10 min";
- an interval: "every 10 seconds", "every hour", "every 1 hour 30 minutes", never "every PT10S";
- a cron expression: "at 09:00, Monday through Friday". Schedules read as lower-case sentence
  fragments, interval and cron alike, so they sit in a sentence or a column the same way;
- a column of text in a terminal: padded by the width it takes on screen (``display_width``),
  where a wide character (CJK, full-width forms) takes two cells and a combining mark none.

Pure apart from one question: the zone, when none is given, is Django's current one. Nothing
here reads the clock or the database.
"""

from __future__ import annotations

import re
import unicodedata
import zoneinfo
from datetime import datetime, timedelta, tzinfo

from cron_descriptor import Options, get_description
from django.utils import timezone

from scheduling.timing.schedules import ScheduleError, parse_duration

_CALENDAR = re.compile(r"^P(\d+)([YM])$")
_CALENDAR_UNITS = {"Y": "year", "M": "month"}
_UNITS = (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))

#: Beyond this distance from now an instant reads as a date, without "in N d" or "N d ago".
FAR = timedelta(days=30)


# --- zones -----------------------------------------------------------------------------------


def current_zone() -> tzinfo:
    """The zone pages and commands show times in: Django's current time zone (``TIME_ZONE``
    unless the host activated another)."""
    return timezone.get_current_timezone()


def zone_named(name: str) -> tzinfo:
    """The IANA zone ``name`` ("Europe/Berlin", "UTC"); ValueError saying why it is not one."""
    try:
        return zoneinfo.ZoneInfo((name or "").strip())
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValueError(
            f"{name!r} is not an IANA time zone (such as Europe/Berlin or UTC)"
        ) from None


def zone_name(zone: tzinfo | None = None) -> str:
    """The zone's full name, for a caption: "America/New_York"."""
    zone = zone or current_zone()
    return str(getattr(zone, "key", None) or zone)


def caption(zone: tzinfo | None = None) -> str:
    """The line a page shows once, above its times: "Times in America/New_York"."""
    return f"Times in {zone_name(zone)}"


# --- instants --------------------------------------------------------------------------------


def instant(moment: datetime | None, zone: tzinfo | None = None) -> str:
    """``moment`` exactly, to the second, in ``zone`` (the current one when not given), with
    the zone's abbreviation: "2030-01-31 04:00:05 EST"; "-" for none."""
    if moment is None:
        return "-"
    zone = zone or current_zone()
    try:
        local = moment.astimezone(zone)
        return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname() or zone_name(zone)}"
    except (OverflowError, ValueError):  # the ends of the range (``pgtimes``): kept in UTC
        return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def typed(moment: datetime) -> str:
    """``moment`` in ISO 8601 to the second, with its offset, as a person types it: for an
    error that repeats an instant it was given ("2026-11-30T18:00:00+01:00")."""
    return moment.isoformat(timespec="seconds")


def day(moment: datetime, zone: tzinfo | None = None) -> str:
    """The date of ``moment`` in ``zone``: "9999-12-31"."""
    try:
        return f"{moment.astimezone(zone or current_zone()):%Y-%m-%d}"
    except (OverflowError, ValueError):
        return f"{moment:%Y-%m-%d}"


def is_far(moment: datetime, now: datetime) -> bool:
    """Whether ``moment`` is further than ``FAR`` from ``now`` (either way)."""
    try:
        return abs(moment - now) > FAR
    except OverflowError:
        return True


def _coarse(seconds: float) -> str:
    value = abs(seconds)
    if value < 90:
        return f"{round(value)} s"
    if value < 90 * 60:
        return f"{round(value / 60)} min"
    if value < 36 * 3600:
        return f"{round(value / 3600)} h"
    return f"{round(value / 86400)} d"


def ago(moment: datetime | None, now: datetime, zone: tzinfo | None = None) -> str:
    """``moment`` relative to ``now``: "12 s ago", "in 3 min", "now" (within a second); its
    date ("9999-12-31") when it is further than ``FAR`` away."""
    if moment is None:
        return "-"
    if is_far(moment, now):
        return day(moment, zone)
    seconds = (now - moment).total_seconds()
    if abs(seconds) < 1:
        return "now"
    return f"{_coarse(seconds)} ago" if seconds > 0 else f"in {_coarse(seconds)}"


def when(moment: datetime | None, now: datetime, zone: tzinfo | None = None) -> str:
    """The instant with the relative words beside it: "2030-01-31 04:00:05 EST (in 3 min)";
    the instant alone when it is further than ``FAR`` away; "-" for none."""
    if moment is None:
        return "-"
    exact = instant(moment, zone)
    return exact if is_far(moment, now) else f"{exact} ({ago(moment, now, zone)})"


# --- lengths ---------------------------------------------------------------------------------


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


def lag(delta: timedelta) -> str:
    """A start minus due time, signed: "+0.4 s", "+12 s", "+3 min"."""
    seconds = delta.total_seconds()
    return ("-" if seconds < 0 else "+") + span(seconds)


# --- schedules -------------------------------------------------------------------------------


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


_CRON_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def describe_cron(expression: str) -> str:
    """A cron expression in English, as a lower-case fragment like ``describe_interval``'s:
    "at 09:00, Monday through Friday", "every 5 minutes"; the expression itself if the
    describer cannot read it."""
    text = _CRON_MACROS.get(expression.strip().lower(), expression)
    options = Options()
    options.use_24hour_time_format = True
    try:
        words = str(get_description(text, options))
    except Exception:  # the describer knows fewer spellings than our parser
        return expression
    return words[:1].lower() + words[1:]


__all__ = [
    "FAR",
    "ago",
    "caption",
    "current_zone",
    "day",
    "describe_cron",
    "describe_interval",
    "instant",
    "is_far",
    "lag",
    "span",
    "typed",
    "when",
    "zone_name",
    "zone_named",
]


def display_width(text: str) -> int:
    """The cells ``text`` takes in a terminal: two for a wide or full-width character (East
    Asian Width W or F), none for a combining mark, one for the rest."""
    width = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def pad(text: str, width: int) -> str:
    """``text`` followed by spaces up to ``width`` cells on screen (``str.ljust`` counts
    characters, so a column of CJK names would run past its neighbours)."""
    return text + " " * max(0, width - display_width(text))
