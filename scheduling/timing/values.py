"""Timing values: when a job made from code runs (``Every``, ``Cron``, ``Calendar`` or ``Once``).

These are what ``scheduling.api`` takes instead of command-line-shaped keywords; each maps to
one ``Schedule`` row. They are plain values: validation happens when the job is saved, with the
same rules and messages as the admin and ``jobs add``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError

from scheduling.timing.schedules import format_duration


@dataclass(frozen=True)
class Every:
    """A fixed interval of elapsed time: an ISO-8601 duration (``"PT2H"``) or a timedelta."""

    interval: str | timedelta
    start: datetime | None = None
    end: datetime | None = None

    def schedule_fields(self) -> dict[str, Any]:
        interval = self.interval
        text = format_duration(interval) if isinstance(interval, timedelta) else str(interval)
        return {"interval": text, "starts_at": self.start, "ends_at": self.end}


@dataclass(frozen=True)
class Cron:
    """A five-field cron expression read in an IANA time zone (``"0 10-18/2 * * MON-FRI"``)."""

    expression: str
    tz: str = "UTC"
    start: datetime | None = None
    end: datetime | None = None

    def schedule_fields(self) -> dict[str, Any]:
        return {
            "cron": self.expression,
            "timezone": self.tz or "UTC",
            "starts_at": self.start,
            "ends_at": self.end,
        }


@dataclass(frozen=True)
class Calendar:
    """RFC 5545 lines (RRULE, RDATE, EXDATE) read in an IANA time zone, such as
    ``"FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9"`` (``scheduling.timing.calendars``)."""

    rrule: str
    tz: str = "UTC"
    start: datetime | None = None
    end: datetime | None = None

    def schedule_fields(self) -> dict[str, Any]:
        return {
            "rrule": self.rrule,
            "timezone": self.tz or "UTC",
            "starts_at": self.start,
            "ends_at": self.end,
        }


@dataclass(frozen=True)
class Once:
    """A single instant. One already past is refused (``ValidationError`` on ``run_at``)
    unless ``allow_past=True`` says it is meant: then the job runs at once when it is saved
    (a renewal found late, an import of history). An instant up to ``SCHEDULING_MISFIRE_GRACE``
    ago counts as now."""

    at: datetime
    allow_past: bool = False

    def schedule_fields(self) -> dict[str, Any]:
        return {"run_at": self.at}


Timing = Every | Cron | Calendar | Once


def parse_instant(raw: str | None, *, field: str) -> datetime | None:
    """An ISO-8601 instant with an offset (``2030-01-01T09:00Z``), in UTC; None stays None.

    Naive input is refused at the boundary, naming ``field``: a time without an offset means
    a different instant on every machine that reads it.
    """
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise ValidationError(
            {field: f"{raw!r} is not an ISO-8601 date-time such as 2030-01-01T09:00:00Z"}
        ) from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(
            {field: f"{raw!r} has no offset; add a time zone offset such as Z or +01:00"}
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+09:00 is in the year 0 in UTC
        raise ValidationError(
            {field: f"{raw!r} falls outside the years 1 to 9999 in UTC"}
        ) from None
