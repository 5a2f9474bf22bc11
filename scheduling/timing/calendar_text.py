"""Reading RFC 5545 text: each property line (``RRULE``, ``RDATE``, ``EXDATE``) and its
values, one-line reasons naming the field, and ``normalise``, the one text a set is kept as.
The syntax is ``scheduling.timing.calendars``' module docstring.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil import rrule as du

from scheduling.timing import windows_zones
from scheduling.timing.calendar_walk import day_stamp, stamp, stamp_in_zone
from scheduling.timing.rrule import MAX_COUNT, MAX_INTERVAL, MAX_TEXT, WEEKDAYS, CalendarError, Rule

FREQS = {
    "YEARLY": du.YEARLY,
    "MONTHLY": du.MONTHLY,
    "WEEKLY": du.WEEKLY,
    "DAILY": du.DAILY,
    "HOURLY": du.HOURLY,
    "MINUTELY": du.MINUTELY,
}


_DAYS = {"MO": 0, "TU": 1, "WE": 2, "TH": 3, "FR": 4, "SA": 5, "SU": 6}


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


DAY_PARTS = ("BYDAY", "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO")


_BYDAY = re.compile(r"^([+-]?\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)$")


DATE_TEXT = re.compile(r"^\d{8}$")


_DATETIME = re.compile(r"^\d{8}T\d{6}Z?$", re.IGNORECASE)


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
        name, params, value = read_property(line)
        if name == "RRULE":
            parts = value.split(";")
            for index, part in enumerate(parts):
                key, _, raw = part.partition("=")
                if key.strip().upper() == "UNTIL" and raw.strip().upper().endswith("Z"):
                    instant = read_datetime(raw.strip(), "UNTIL").replace(tzinfo=UTC)
                    parts[index] = f"UNTIL={stamp_in_zone(instant, zone)}"
            return (
                ";".join(parts) if line.upper().startswith("FREQ=") else "RRULE:" + ";".join(parts)
            )
        if name not in ("RDATE", "EXDATE") or not (
            params or value.upper().endswith("Z") or "Z," in value.upper()
        ):
            return line
        items = []
        for item in read_dates(name, params, value):
            if isinstance(item, datetime) and item.tzinfo is not None:
                items.append(stamp_in_zone(item, zone))
            elif isinstance(item, datetime):
                items.append(stamp(item))
            elif name == "RDATE":
                items.append(f"{day_stamp(item)}T000000")
            else:
                items.append(day_stamp(item))
        return f"{name}:{','.join(items)}"
    except CalendarError:
        return line


def read_property(line: str) -> tuple[str, list[str], str]:
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


def read_dates(name: str, params: list[str], value: str) -> list[date | datetime]:
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
        if DATE_TEXT.match(item):
            if kind == "DATE-TIME":
                raise CalendarError(f"{name} {item!r} is a date, but the line says DATE-TIME")
            found.append(read_date(item, name))
            continue
        if kind == "DATE":
            raise CalendarError(f"{name} {item!r} is not a date such as 20270101 (VALUE=DATE)")
        wall = read_datetime(item, name)
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
    return ZoneInfo(read_zone_name(raw, name))


def read_zone_name(raw: str, name: str) -> str:
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


def read_datetime(item: str, name: str) -> datetime:
    """A date-time item's wall time (naive; a ``Z`` at the end is the caller's to read)."""
    if not _DATETIME.match(item):
        raise CalendarError(f"{name} {item!r} is not a date-time such as 20270101T090000")
    try:
        return datetime.strptime(item[:15], "%Y%m%dT%H%M%S")
    except ValueError:
        raise CalendarError(f"{name} {item!r} is not a real date and time") from None


def read_date(item: str, name: str) -> date:
    try:
        return datetime.strptime(item, "%Y%m%d").date()
    except ValueError:
        raise CalendarError(f"{name} {item!r} is not a real date") from None


def read_rule(value: str) -> Rule:
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
    if freq_text not in FREQS:
        raise CalendarError(
            f"FREQ={freq_text} is not one of YEARLY, MONTHLY, WEEKLY, DAILY, HOURLY, MINUTELY"
        )
    freq = FREQS[freq_text]
    interval = _number(parts.pop("INTERVAL", "1"), "INTERVAL", 1, MAX_INTERVAL)
    count = parts.pop("COUNT", None)
    count_value = None if count is None else _number(count, "COUNT", 1, MAX_COUNT)
    until_text = parts.pop("UNTIL", None)
    until = until_instant = None
    if until_text is not None:
        if count_value is not None:
            raise CalendarError("RRULE gives both COUNT and UNTIL; RFC 5545 allows one")
        if DATE_TEXT.match(until_text):
            until = datetime.combine(read_date(until_text, "UNTIL"), time(23, 59, 59))
        elif until_text.endswith("Z"):
            until_instant = read_datetime(until_text, "UNTIL").replace(tzinfo=UTC)
        else:
            until = read_datetime(until_text, "UNTIL")
    wkst = _DAYS.get(parts.pop("WKST", "MO"), -1)
    if wkst < 0:
        raise CalendarError("WKST must be a weekday: MO, TU, WE, TH, FR, SA or SU")
    if freq in (du.YEARLY, du.MONTHLY, du.WEEKLY) and not any(p in parts for p in DAY_PARTS):
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
    rule = Rule(
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
    day = WEEKDAYS[_DAYS[name]]
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
