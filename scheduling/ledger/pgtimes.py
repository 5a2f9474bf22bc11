"""PostgreSQL times that Python cannot hold, read as the ends of Python's range.

PostgreSQL stores ``infinity``, ``-infinity`` and years past 9999 in a ``timestamptz``
column; Python's ``datetime`` stops at 9999-12-31. psycopg refuses such a value with a
``DataError``, which would make one row written by raw SQL break every page and command that
reads its table. Registered on each new connection (``scheduling.apps``), this loader reads
them as ``datetime.max`` and ``datetime.min`` (in UTC) instead, so readers can show the row and
the scheduler can isolate it (``claims`` reads times as text and names the field).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.pq import Format

LATEST = datetime.max.replace(tzinfo=UTC)
EARLIEST = datetime.min.replace(tzinfo=UTC)


class _Clamping:
    """Mixin for a ``timestamptz`` loader: what Python cannot represent is clamped, not raised."""

    def load(self, data: Any) -> datetime:
        # The loader's own parse first: it refuses every value Python cannot hold (infinity
        # too) with a DataError, and a value it can hold is read with no copy of its text.
        try:
            return super().load(data)  # type: ignore[misc]
        except psycopg.DataError:
            raw = bytes(data)
            return EARLIEST if raw == b"-infinity" or raw.endswith(b" BC") else LATEST


def register(raw_connection: Any) -> None:
    """Clamp out-of-range ``timestamptz`` text values on this psycopg connection.

    The loader extends the one the connection already has (Django's, which carries the
    connection's time zone and which Django checks before each cursor), so only the values
    Python cannot hold are read differently.
    """
    adapters = raw_connection.adapters
    base = adapters.get_loader(adapters.types["timestamptz"].oid, Format.TEXT)
    if base is None or issubclass(base, _Clamping):
        return
    adapters.register_loader(
        "timestamptz", type("OutOfRangeTimestamptzLoader", (_Clamping, base), {})
    )


def is_out_of_range(value: datetime | None) -> bool:
    """Whether ``value`` is one of the clamped ends (the stored time lies beyond Python's)."""
    return value is not None and value.replace(tzinfo=None) in (datetime.max, datetime.min)


def describe(value: datetime | None, *, timespec: str = "auto") -> str | None:
    """ISO 8601, or ``infinity`` / ``-infinity`` for a time past either end of the range."""
    if value is None:
        return None
    # The year first: it is all most values need, and an export asks this of every instant.
    if value.year in (datetime.min.year, datetime.max.year) and is_out_of_range(value):
        return "infinity" if value.year == datetime.max.year else "-infinity"
    return value.isoformat(timespec=timespec)
