"""A calendar schedule in words, for the admin and the commands.

``describe_calendar("FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9\\nEXDATE:20261231", "Europe/Berlin")``
reads "the last day of every month at 09:00 (Europe/Berlin), except 2026-12-31". Pure: text
in, text out; a set that does not parse is given back as it was written, since the words only
explain (the form says what is wrong with it).
"""

from __future__ import annotations

from datetime import datetime

from dateutil import rrule as du

from scheduling.timing.calendars import CalendarError, CalendarRule

_PERIODS = {
    du.YEARLY: ("year", "years"),
    du.MONTHLY: ("month", "months"),
    du.WEEKLY: ("week", "weeks"),
    du.DAILY: ("day", "days"),
    du.HOURLY: ("hour", "hours"),
    du.MINUTELY: ("minute", "minutes"),
}
_WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_ORDINALS = ("first", "second", "third", "fourth", "fifth")
#: Listed dates shown before "and N more".
_DATES_SHOWN = 3


def describe_calendar(text: str, zone: str) -> str:
    """The recurrence set ``text`` read in ``zone`` as a sentence (see the module docstring)."""
    try:
        calendar = CalendarRule.parse(text)
    except CalendarError:
        return " ".join(text.split())
    words = _rule_words(calendar) if calendar.rule is not None else ""
    if calendar.rdates:
        listed = _dates([_stamp(d) for d in calendar.rdates])
        words = f"{words}, also {listed}" if words else f"on {listed}"
    words += f" ({zone})"
    excluded = sorted(
        [d.isoformat() for d in calendar.exdays] + [_stamp(d) for d in calendar.exdates]
    )
    if excluded:
        words += f", except {_dates(excluded)}"
    return words


def _rule_words(calendar: CalendarRule) -> str:
    rule = calendar.rule
    assert rule is not None
    fields = dict(rule.fields)
    one, many = _PERIODS[rule.freq]
    period = f"every {one}" if rule.interval == 1 else f"every {rule.interval} {many}"
    days = _days(fields)
    months = fields.get("bymonth")
    month_words = _join([_MONTH_NAMES[m - 1] for m in sorted(months)]) if months else ""  # type: ignore[union-attr]
    if rule.freq == du.MONTHLY and days:
        words = f"{days} of {period}"
    elif rule.freq == du.YEARLY and days:
        words = f"{days} of {month_words or 'the year'}, {period}"
        month_words = ""
    elif days:
        words = f"{period} on {days}"
    else:
        words = period
    if month_words:
        words += f", in {month_words}"
    times = _times(fields, rule.freq)
    if times:
        words += f" {times}"
    positions = fields.get("bysetpos")
    if positions:
        chosen = _join([_nth(p) for p in positions])  # type: ignore[union-attr]
        words += f", only the {chosen} of them in each {one}"
    if rule.count is not None:
        words += f", {rule.count} times"
    if rule.until is not None:
        words += f", until {_stamp(rule.until)}"
    return words


def _days(fields: dict[str, object]) -> str:
    parts: list[str] = []
    monthdays = fields.get("bymonthday") or ()
    for day in sorted(monthdays, key=lambda d: (d < 0, abs(d))):  # type: ignore[union-attr]
        parts.append(_monthday(day))
    weekdays = fields.get("byweekday") or ()
    plain = sorted(w.weekday for w in weekdays if not w.n)  # type: ignore[union-attr]
    if plain:
        parts.append(_weekdays(plain))
    for weekday in weekdays:  # type: ignore[union-attr]
        if weekday.n:
            parts.append(f"the {_nth(weekday.n)} {_WEEKDAY_NAMES[weekday.weekday]}")
    for yearday in fields.get("byyearday") or ():  # type: ignore[union-attr]
        parts.append(f"day {yearday} of the year")
    for week in fields.get("byweekno") or ():  # type: ignore[union-attr]
        parts.append(f"week {week}")
    return _join(parts)


def _monthday(day: int) -> str:
    if day == -1:
        return "the last day"
    if day < 0:
        return f"the {_nth(day)} day"
    suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"the {day}{suffix}"


def _nth(n: int) -> str:
    if n == -1:
        return "last"
    if n < 0:
        return f"{_nth(-n)}-to-last" if -n <= len(_ORDINALS) else f"{-n}th-to-last"
    return _ORDINALS[n - 1] if n <= len(_ORDINALS) else f"{n}th"


def _weekdays(days: list[int]) -> str:
    if days == [0, 1, 2, 3, 4]:
        return "Monday to Friday"
    if days == [5, 6]:
        return "Saturday and Sunday"
    return _join([_WEEKDAY_NAMES[d] for d in days])


def _times(fields: dict[str, object], freq: int) -> str:
    hours = sorted(fields.get("byhour") or ())  # type: ignore[call-overload]
    minutes = sorted(fields.get("byminute") or ())  # type: ignore[call-overload]
    seconds = sorted(fields.get("bysecond") or (0,))  # type: ignore[call-overload]
    if freq <= du.DAILY:
        stamps = [
            f"{h:02d}:{m:02d}" + (f":{s:02d}" if s else "")
            for h in hours
            for m in minutes
            for s in seconds
        ]
        if len(stamps) > 6:
            return f"at {len(stamps)} times a day, from {stamps[0]} to {stamps[-1]}"
        return f"at {_join(stamps)}"
    words = []
    if minutes == [0] and freq == du.HOURLY:
        words.append("on the hour")
    elif minutes:
        words.append(f"at minute {_join([str(m) for m in minutes])}")
    if "byhour" in fields:
        words.append(f"in the hours {_join([f'{h:02d}' for h in hours])}")
    return ", ".join(words)


def _stamp(moment: datetime) -> str:
    if moment.hour == moment.minute == moment.second == 0:
        return moment.date().isoformat() + " 00:00"
    return f"{moment:%Y-%m-%d %H:%M}" + (f":{moment.second:02d}" if moment.second else "")


def _dates(items: list[str]) -> str:
    if len(items) > _DATES_SHOWN:
        return f"{', '.join(items[:_DATES_SHOWN])} and {len(items) - _DATES_SHOWN} more"
    return _join(items)


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"
