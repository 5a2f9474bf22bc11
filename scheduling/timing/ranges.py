"""Occurrences in a range of time: what a backfill of ``[start, end)`` would make.

Pure, like the rest of ``timing``: a ``FiringRule`` and plain instants in, aware UTC instants
out. The walk goes through ``FiringRule.next_after``, so the schedule's window (nothing
before its start, nothing after its end), cron's rules at a change of the clocks and the
interval's anchor are the claim's own; this module only bounds the walk. A caller never gets
more than ``limit + 1`` instants back, so a range of a million occurrences costs a thousand
steps to refuse, not a million (``count_interval`` counts an interval's exactly, without a
walk, for the refusal's message).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduling.timing.schedules import FiringRule, ScheduleError

_EPSILON = timedelta(microseconds=1)


def grid_anchor(rule: FiringRule, *, anchor: datetime, start: datetime) -> datetime:
    """The anchor a backfill of a range from ``start`` counts an interval from.

    An interval without a start of its own counts from the job's creation, so taken as it is
    it has no occurrence before the job existed, and a backfill of the week before an hourly
    job was made would make nothing. A backfill asks what the job would have run had it been
    there: the same grid, counted back (``anchor - k * interval``). A rule with a start of its
    own, a cron expression, a calendar or a one-off keeps its anchor.
    """
    if rule.interval is None or rule.start is not None or start >= anchor:
        return anchor
    steps = -((start - anchor) // rule.interval)  # ceil((anchor - start) / interval)
    try:
        return anchor - rule.interval * steps
    except OverflowError:
        return anchor


def occurrences_in(
    rule: FiringRule, *, anchor: datetime, start: datetime, end: datetime, limit: int
) -> list[datetime]:
    """The nominal occurrences of ``rule`` in ``[start, end)``, oldest first, at most
    ``limit + 1`` of them (one more than ``limit`` says the range holds too many).

    An occurrence that would fall beyond the calendar ends the walk, as it ends a schedule.
    """
    found: list[datetime] = []
    current = start - _EPSILON
    while len(found) <= limit:
        try:
            nxt = rule.next_after(current, anchor=anchor)
        except ScheduleError:
            break
        if nxt is None or nxt >= end:
            break
        found.append(nxt)
        current = nxt
    return found


def count_interval(
    rule: FiringRule, *, anchor: datetime, start: datetime, end: datetime
) -> int | None:
    """How many occurrences an interval ``rule`` has in ``[start, end)``, by arithmetic;
    None for a cron or one-off rule (those are only walked)."""
    if rule.interval is None:
        return None
    base = (rule.start if rule.start is not None else anchor).astimezone(UTC)
    low = max(start, base)
    # ``end`` is excluded; the window's own end is included, as ``next_after`` includes it.
    first = -((base - low) // rule.interval)  # ceil((low - base) / interval)
    last = -((base - end) // rule.interval) - 1  # the last step strictly before ``end``
    if rule.end is not None:
        last = min(last, (rule.end - base) // rule.interval)
    return max(0, last - first + 1)
