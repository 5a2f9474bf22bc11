"""Calendar files: the one event of a ``.ics`` file read as a recurrence set (``read_ics``),
its ``DTSTART`` completing the RRULE, for ``jobs add --ics``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, time
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scheduling.timing.calendar_text import (
    DATE_TEXT,
    DAY_PARTS,
    FREQS,
    read_date,
    read_datetime,
    read_property,
    read_zone_name,
)
from scheduling.timing.rrule import CalendarError


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
            name, params, value = read_property(line)
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
        kept[rule_index] = "RRULE:" + _completed(read_property(kept[rule_index])[2], start_wall)
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
            zone = read_zone_name(raw.strip().strip('"'), "DTSTART")
    if DATE_TEXT.match(value):
        return datetime.combine(read_date(value, "DTSTART"), time()), None
    wall = read_datetime(value, "DTSTART")
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
    if freq in FREQS and "BYSECOND" not in keys:
        added.append(f"BYSECOND={start.second}")
    if not keys & set(DAY_PARTS):
        if freq == "WEEKLY":
            added.append("BYDAY=" + ("MO", "TU", "WE", "TH", "FR", "SA", "SU")[start.weekday()])
        elif freq == "MONTHLY":
            added.append(f"BYMONTHDAY={start.day}")
        elif freq == "YEARLY":
            if "BYMONTH" not in keys:
                added.append(f"BYMONTH={start.month}")
            added.append(f"BYMONTHDAY={start.day}")
    return ";".join(parts + added)
