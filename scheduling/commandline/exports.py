"""History out in bulk: a window of time (``--since``/``--until``) and ``--jsonl``.

A listing (``manage.py executions``, the emailer's ``history`` and ``deliveries``, the
subscriptions' ``orders``) shows at most ``--limit`` rows, newest first, because a person
reads it. An export is read by a program: every row of a window, oldest first, one JSON object
a line, with no cap, in memory that does not grow with the ledger. The pieces each command
uses, the engine's and the domain apps' (through ``scheduling.api``), live here once:

- ``add_window_options`` and ``add_jsonl_option``: the options, with the same help everywhere.
- ``read_window``: ``--since`` (inclusive) and ``--until`` (exclusive) read as instants: an
  ISO-8601 date-time with an offset, as every other instant of the commands
  (``timing.values.parse_instant``), or a date alone, which is that day's midnight in the
  listing's zone (``--tz``, or ``TIME_ZONE``), so ``--since 2026-11-01 --until 2026-12-01`` is
  November as the project's clocks say it. A refusal is a ``ValidationError`` on ``since`` or
  ``until``, which the commands print naming the option.
- ``in_key_order``: the rows of a query in ``(time, id)`` order, a page at a time, each page a
  query of its own that starts after the last row of the one before (keyset pagination). No
  server-side cursor, so it is the same on PostgreSQL (behind a transaction-mode pooler too)
  and SQLite, and no transaction stays open for the length of the export; a row is never read
  twice or skipped, and the order is total, so exports of adjacent windows concatenate with
  neither overlap nor gap.
- ``write_jsonl``: the pages' objects written a page at a time, one line each.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, tzinfo
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet, Subquery

from scheduling.ledger import pgtimes
from scheduling.timing import readable
from scheduling.timing.values import parse_instant

#: Rows read per page of an export: large enough that a page's query costs little beside its
#: rows, small enough that a page's objects stay a few megabytes.
PAGE_SIZE = 2_000

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def add_window_options(parser: argparse.ArgumentParser, *, of: str) -> None:
    """``--since INSTANT`` and ``--until INSTANT``: only rows whose ``of`` (words: "due time")
    is in the window, ``--since`` included and ``--until`` not."""
    parser.add_argument(
        "--since",
        metavar="INSTANT",
        help=f"Only rows whose {of} is at or after this instant: ISO 8601 with an offset "
        "(2026-11-01T00:00:00+01:00), or a date alone, midnight in the listing's zone.",
    )
    parser.add_argument(
        "--until",
        metavar="INSTANT",
        help=f"Only rows whose {of} is before this instant (not included); the same forms.",
    )


def add_jsonl_option(parser: argparse.ArgumentParser) -> None:
    """``--jsonl``: every matching row, oldest first, one JSON object a line, no cap."""
    parser.add_argument(
        "--jsonl",
        action="store_true",
        help="Export every matching row, oldest first, one JSON object per line (the fields "
        "of --json); no row cap, --limit only when given.",
    )


@dataclass(frozen=True)
class Window:
    """A window of time: ``since`` included, ``until`` not; either end may be open
    (``ALL_TIME``: both)."""

    since: datetime | None = None
    until: datetime | None = None

    def of(self, rows: QuerySet[Any], field: str) -> QuerySet[Any]:
        """``rows`` whose ``field`` lies in the window."""
        if self.since is not None:
            rows = rows.filter(**{f"{field}__gte": self.since})
        if self.until is not None:
            rows = rows.filter(**{f"{field}__lt": self.until})
        return rows


#: The window without ends.
ALL_TIME = Window()


def read_instant(raw: str, *, field: str, zone: tzinfo) -> datetime:
    """``raw`` as an aware instant in UTC: ISO 8601 with an offset, or a date alone (its
    midnight in ``zone``). A ``ValidationError`` on ``field`` says why, and names both forms."""
    text = raw.strip()
    if _DATE.match(text):
        try:
            day = date.fromisoformat(text)
            return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)
        except ValueError:
            raise ValidationError({field: f"{raw!r} is not a date in the calendar"}) from None
        except OverflowError:
            raise ValidationError(
                {field: f"{raw!r} falls outside the years 1 to 9999 in UTC"}
            ) from None
    try:
        found = parse_instant(text, field=field)
    except ValidationError as exc:
        # The commands' one reason for a date-time, and the other form this option takes.
        reason = " ".join(exc.message_dict[field])
        raise ValidationError(
            {
                field: f"{reason}; or give a date alone (2026-11-01: its midnight in "
                f"{readable.zone_name(zone)})"
            }
        ) from None
    assert found is not None
    return found


def read_window(since: str | None, until: str | None, *, zone: tzinfo) -> Window:
    """The window ``--since``/``--until`` give (each optional), checked together: both ends
    read, and ``--until`` after ``--since``. One error per option."""
    errors: dict[str, str] = {}
    ends: dict[str, datetime | None] = {"since": None, "until": None}
    for field, raw in (("since", since), ("until", until)):
        if raw is None:
            continue
        try:
            ends[field] = read_instant(raw, field=field, zone=zone)
        except ValidationError as exc:
            errors.update({k: " ".join(v) for k, v in exc.message_dict.items()})
    start, end = ends["since"], ends["until"]
    if start is not None and end is not None and end <= start:
        errors["until"] = (
            f"{readable.typed(end)} is not after --since {readable.typed(start)};"
            " the window would be empty"
        )
    if errors:
        raise ValidationError(errors)
    return Window(since=start, until=end)


def in_key_order(
    rows: QuerySet[Any],
    *,
    time_field: str,
    key: Callable[[Any], tuple[datetime, int]],
    limit: int | None = None,
) -> Iterator[list[Any]]:
    """``rows`` ordered by ``(time_field, pk)``, one page of at most ``PAGE_SIZE`` at a time
    (see the module docstring); ``key(row)`` is a row's ``(time, pk)``; at most ``limit`` rows
    in all when given. ``time_field`` must hold no NULL, and an index led by it (with the
    other filters' columns first) keeps every page as cheap as the first.

    A page resumes at ``time_field >= t AND (time_field > t OR pk > id)``, which such an index
    answers as a range, reading only the page's rows. A time PostgreSQL holds past Python's
    range (``pgtimes``: read as the range's end) cannot be written back as a bound; the page
    after such a row compares with the row's own stored time instead.
    """
    rows = rows.order_by(time_field, "pk")
    left = limit
    after: tuple[datetime, int] | None = None
    while left is None or left > 0:
        page = rows
        if after is not None:
            at, pk = after
            bound: Any = at
            if pgtimes.is_out_of_range(at):
                bound = Subquery(rows.model._default_manager.filter(pk=pk).values(time_field)[:1])
            page = rows.filter(
                Q(**{f"{time_field}__gt": bound}) | Q(pk__gt=pk), **{f"{time_field}__gte": bound}
            )
        size = PAGE_SIZE if left is None else min(PAGE_SIZE, left)
        found = list(page[:size])
        if not found:
            return
        yield found
        if left is not None:
            left -= len(found)
        if len(found) < size:
            return
        after = key(found[-1])


def write_jsonl(write: Callable[[str], Any], pages: Iterable[Iterable[Mapping[str, Any]]]) -> int:
    """Each page's objects as JSON, one a line, written a page at a time; the count written.

    The encoder is made once; what JSON has no form for (a ``Decimal``, a ``UUID``) is
    written as its text, as ``--json`` writes it.
    """
    encode = json.JSONEncoder(default=str, separators=(",", ":")).encode
    count = 0
    for page in pages:
        lines = [encode(item) for item in page]
        if lines:
            try:
                write("\n".join(lines) + "\n")
            except BrokenPipeError:  # the reader has had enough (``| head``): stop quietly
                _drop_stdout()
                return count
            count += len(lines)
    return count


def _drop_stdout() -> None:
    """Point the process's standard output at /dev/null, so that the interpreter's last flush
    of what is still buffered for a closed pipe raises nothing at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor behind stdout (a test's StringIO)
        pass
