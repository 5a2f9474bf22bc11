"""The partitioned history on PostgreSQL: executions and attempts split by ``scheduled_for``.

Both tables are range-partitioned on ``scheduled_for`` in periods of
``SCHEDULING_HISTORY_PARTITION_DAYS`` days, aligned on Mondays (UTC), with the same bounds for
both, so an execution and its attempts always sit in partitions of the same period and a
period goes as a whole: ``DROP TABLE`` of two partitions instead of a ``DELETE`` of millions of
rows and a ``VACUUM`` that never gives the space back. A ``DEFAULT`` partition of each takes
what no period holds (a run deferred by years, a backfill of a period already dropped).

The keys hold across partitions because each contains ``scheduled_for``: the primary key is
``(id, scheduled_for)``, one execution per occurrence is ``(job_id, scheduled_for)``, and an
attempt's number is unique per ``(execution_id, number, scheduled_for)``. ``task_id`` is a
plain index: its uniqueness comes from its making (122 random bits, or a UUIDv7's time and 74
random bits). Neither an attempt's execution nor a job's ``current_execution`` is a foreign key
in the database: a key to a partitioned table makes every detach of one of its partitions
scan the referencing table (half a second per million attempts, measured), which would turn
a drop back into a scan. What stands in for it: an attempt is only ever written by the
statement that starts its execution (the same row, locked), both tables' periods are made,
moved and dropped together in one transaction, deletes through the ORM cascade as the models
declare, and the plain tables of the move back get the foreign keys again.

This module decides which periods there are to be; the engine runs the statements
(``engines/postgresql_history.py``, its text in ``engines/sql/postgresql/history.sql``), and
an engine without partitions answers that its history is not partitioned.

- ``is_partitioned``: whether this database's executions table is partitioned.
- ``periods``: the periods that exist, oldest first.
- ``make_ahead``: the current period and the next ones, made if missing (the scheduler's duty).
- ``make_period``: one period, moving the rows the default partition holds for it.
- ``drop_period``: one period gone, keeping what retention keeps (``latest``, as values).
- ``partition`` / ``unpartition``: the migration's move of an existing installation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS

from scheduling.ledger.engines import engine
from scheduling.ledger.values import ANCHOR, Dropped, Latest, Period, period_of

logger = logging.getLogger("scheduling")

EXECUTION = "scheduling_execution"
ATTEMPT = "scheduling_attempt"
#: Periods made ahead of the current one.
AHEAD = 2
#: The most periods the migration makes behind now for the rows it moves; older rows go to the
#: default partitions (each period more is one more index every unpruned lookup reads).
MOST_BEHIND = 26

__all__ = ["ANCHOR", "Dropped", "Latest", "Period", "period_of"]


def is_partitioned(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether the executions table is partitioned (PostgreSQL after the migration)."""
    return engine(using).is_partitioned()


def periods(using: str = DEFAULT_DB_ALIAS, table: str = EXECUTION) -> list[Period]:
    """The periods ``table`` has a partition for, oldest first (not the default)."""
    return engine(using).periods(table)


def make_ahead(*, now: datetime, days: int, using: str = DEFAULT_DB_ALIAS) -> list[Period]:
    """Make the partitions of the current period and the ``AHEAD`` next ones that are missing.

    Only the gaps are made: a period that exists (of whatever length an earlier
    ``SCHEDULING_HISTORY_PARTITION_DAYS`` gave it) is left as it is, and a new one ends where
    an existing one starts, so no two ever overlap.
    """
    have = periods(using)
    current = period_of(now, days)
    until = current.end + timedelta(days=days * AHEAD)
    made = []
    start = current.start
    while start < until:
        end = period_of(start, days).end
        overlapping = [p for p in have if p.start < end and p.end > start]
        if overlapping:
            first = min(p.start for p in overlapping)
            if first > start:
                end = first
            else:
                start = max(p.end for p in overlapping)
                continue
        period = Period(start, end)
        make_period(period, using=using)
        made.append(period)
        start = end
    return made


def make_period(period: Period, *, using: str = DEFAULT_DB_ALIAS) -> None:
    """Make one period's partitions of both tables, in one transaction, moving into it the
    rows the default partitions hold for it."""
    moving = engine(using).make_period(period)
    logger.info(
        "history.partition_made period=%s..%s moved=%s",
        period.start.isoformat(),
        period.end.isoformat(),
        moving,
    )


def drop_period(
    period: Period,
    *,
    latest: Callable[[dict[int | None, int]], Latest | None],
    using: str = DEFAULT_DB_ALIAS,
) -> Dropped:
    """Drop one period's partitions of both tables, in one transaction, keeping its
    unfinished executions, the current runs, and the latest ones ``latest`` names given the
    period's executions by job (read under its lock), with their attempts."""
    dropped = engine(using).drop_period(period, latest=latest)
    logger.info(
        "history.partition_dropped period=%s..%s executions=%s attempts=%s kept=%s",
        period.start.isoformat(),
        period.end.isoformat(),
        dropped.executions,
        dropped.attempts,
        dropped.kept,
    )
    return dropped


def nth_newest(
    jobs: Sequence[int], *, keep: int, within: Sequence[Period], using: str = DEFAULT_DB_ALIAS
) -> dict[int, datetime | None]:
    """Each of ``jobs``' ``keep``-th newest ``scheduled_for`` in the periods ``within`` (from
    the first's start to the last's end), or None where it has fewer there."""
    return engine(using).nth_newest(jobs, keep=keep, within=within)


# -- the migration's move: the same rows, keys and indexes in partitioned tables and back ----


def partition(schema_editor: Any, execution: Any, attempt: Any, job: Any, *, days: int) -> None:
    """Move both tables into partitioned ones, in the migration's transaction (PostgreSQL)."""
    engine(schema_editor.connection).partition_history(  # type: ignore[attr-defined]
        schema_editor, execution, days=days, ahead=AHEAD, most_behind=MOST_BEHIND
    )


def unpartition(schema_editor: Any, execution: Any, attempt: Any, job: Any) -> None:
    """Move both tables back into plain ones, as Django's models declare them (PostgreSQL)."""
    engine(schema_editor.connection).unpartition_history(  # type: ignore[attr-defined]
        schema_editor, execution, attempt, job
    )
