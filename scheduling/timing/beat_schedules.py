"""Celery's schedules as the engine's timing: one translation for ``beat_schedule`` entries
(``scheduling.stages.declarations``) and django-celery-beat's rows
(``scheduling.management.beat_import``).

Pure: schedule values in, the ``jobs add`` vocabulary out (``every`` as an ISO-8601
interval, ``cron`` as five fields, ``tz`` as an IANA zone). What has no equivalent raises
``Unmappable`` with the reason: a solar schedule, an interval that is not a whole number of
seconds, a schedule object of a kind the engine cannot read.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta, tzinfo
from typing import Any

from celery.schedules import crontab, schedule, solar

_PERIODS = {"days": "D", "hours": "H", "minutes": "M", "seconds": "S"}


class Unmappable(Exception):
    """A schedule that has no equivalent timing; the message says why."""


def interval_of(every: int, period: str) -> str:
    """``every`` times ``period`` as an ISO-8601 duration (microseconds only in whole seconds)."""
    if period == "microseconds":
        if every % 1_000_000:
            raise Unmappable(
                f"an interval of {every} microseconds is not a whole number of seconds"
            )
        every, period = every // 1_000_000, "seconds"
    if period not in _PERIODS:
        raise Unmappable(f"unknown interval period {period!r}")
    unit = _PERIODS[period]
    return f"P{every}D" if unit == "D" else f"PT{every}{unit}"


def cron_fields(
    minute: Any, hour: Any, day_of_month: Any, month_of_year: Any, day_of_week: Any
) -> str:
    """Five crontab fields (text, a number, or a collection of numbers) as one expression."""
    fields = (minute, hour, day_of_month, month_of_year, day_of_week)
    return " ".join(_field(value) for value in fields)


def _field(value: Any) -> str:
    if isinstance(value, str):
        return value.replace(" ", "")
    if isinstance(value, Iterable):
        return ",".join(str(item) for item in sorted(value))
    return str(value)


def zone_name(zone: tzinfo | None) -> str:
    """The IANA name of ``zone`` (zoneinfo's ``key``, pytz's ``zone``); UTC for none or a zero
    offset. A fixed offset other than zero has no name a cron expression can be read in."""
    if zone is None:
        return "UTC"
    name = getattr(zone, "key", None) or getattr(zone, "zone", None)
    if name:
        return str(name)
    if zone.utcoffset(None) == timedelta(0):
        return "UTC"
    raise Unmappable(
        f"its time zone {zone!r} is a fixed offset; give the crontab an IANA zone "
        "(the app's timezone, or a nowfun returning times in a ZoneInfo)"
    )


def timing_of(value: Any, *, app_zone: tzinfo | None) -> dict[str, str]:
    """A ``beat_schedule`` entry's ``schedule`` as ``jobs add`` options: ``every``, or ``cron``
    and ``tz``.

    A number is seconds and a ``timedelta`` a length, both whole seconds; a ``crontab`` is
    read in its own zone (its ``nowfun``'s, else its own app's) or ``app_zone``, as Celery
    reads it; a ``schedule`` object (or a subclass) by its ``run_every``. ``solar`` and any
    other kind of object raise ``Unmappable``.
    """
    if isinstance(value, bool):
        raise Unmappable("schedule: True or False is not a number of seconds")
    if isinstance(value, int | float):
        value = timedelta(seconds=value)
    if isinstance(value, solar):
        raise Unmappable(
            f"schedule: solar schedules ({value.event} at {value.lat}, {value.lon}) have no "
            "equivalent; use a crontab at the event's usual local time"
        )
    if isinstance(value, crontab):
        return {
            "cron": cron_fields(
                value._orig_minute,
                value._orig_hour,
                value._orig_day_of_month,
                value._orig_month_of_year,
                value._orig_day_of_week,
            ),
            "tz": _crontab_zone(value, app_zone=app_zone),
        }
    if isinstance(value, schedule):
        if getattr(value, "relative", False):
            raise Unmappable("schedule: relative=True (rounded to its period) has no equivalent")
        value = value.run_every
    if isinstance(value, timedelta):
        whole = int(value.total_seconds())
        if value <= timedelta(0) or value != timedelta(seconds=whole):
            raise Unmappable(
                f"schedule: {value.total_seconds():g} seconds is not a whole number of seconds "
                "of 1 or more"
            )
        return {"every": interval_of(whole, "seconds")}
    raise Unmappable(
        f"schedule: a {type(value).__name__} cannot be expressed; give a number of seconds, "
        "a timedelta, a crontab or a celery.schedules.schedule"
    )


def _crontab_zone(value: crontab, *, app_zone: tzinfo | None) -> str:
    if value.nowfun is not None:
        return zone_name(value.nowfun().tzinfo)
    own = value.__dict__.get("_app")
    if own is not None:
        return zone_name(own.timezone)
    return zone_name(app_zone)
