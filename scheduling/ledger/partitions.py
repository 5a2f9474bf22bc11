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

- ``is_partitioned``: whether this database's executions table is partitioned.
- ``periods``: the periods that exist, oldest first.
- ``make_ahead``: the current period and the next ones, made if missing (the scheduler's duty).
- ``make_period``: one period, moving the rows the default partition holds for it.
- ``drop_period``: one period gone, keeping the rows retention keeps (``keepers``).
- ``partition`` / ``unpartition``: the migration's move of an existing installation.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, OperationalError, connections, transaction

from scheduling import ledger

logger = logging.getLogger("scheduling")

EXECUTION = "scheduling_execution"
ATTEMPT = "scheduling_attempt"
JOB = "scheduling_job"
#: Periods start on a Monday at midnight UTC, counted from this one.
ANCHOR = datetime(2000, 1, 3, tzinfo=UTC)
#: Periods made ahead of the current one.
AHEAD = 2
#: The most periods the migration makes behind now for the rows it moves; older rows go to the
#: default partitions (each period more is one more index every unpruned lookup reads).
MOST_BEHIND = 26
#: How long maintenance waits for a lock before giving up until its next turn.
LOCK_TIMEOUT = "5s"
#: How many times the migration tries to lock the tables it moves.
LOCK_TRIES = 60
#: The suffix of Django's names of foreign keys.
_FK_SUFFIX = "_fk_%(to_table)s_%(to_column)s"
_BOUND = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")


@dataclass(frozen=True)
class Period:
    start: datetime
    end: datetime

    @property
    def suffix(self) -> str:
        return self.start.strftime("p%Y%m%d")

    def name(self, table: str) -> str:
        return f"{table}_{self.suffix}"


def period_of(instant: datetime, days: int) -> Period:
    """The period of ``days`` days that holds ``instant``."""
    length = timedelta(days=days)
    start = ANCHOR + ((instant - ANCHOR) // length) * length
    return Period(start, start + length)


def is_partitioned(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether the executions table is partitioned (PostgreSQL after the migration)."""
    if not ledger.on_postgresql(using):
        return False
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = %s::regclass)",
            [EXECUTION],
        )
        return bool(cursor.fetchone()[0])


def periods(using: str = DEFAULT_DB_ALIAS, table: str = EXECUTION) -> list[Period]:
    """The periods ``table`` has a partition for, oldest first (not the default)."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            """
            SELECT pg_get_expr(c.relpartbound, c.oid)
              FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = %s::regclass
            """,
            [table],
        )
        bounds = [row[0] for row in cursor.fetchall()]
    found = []
    for bound in bounds:
        match = _BOUND.search(bound)
        if match:
            found.append(Period(_instant(match.group(1)), _instant(match.group(2))))
    return sorted(found, key=lambda p: p.start)


def _instant(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


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
    """Make one period's partitions of both tables, in one transaction.

    Rows the default partitions hold for the period (a run deferred to it before it existed)
    move into it: PostgreSQL refuses a new partition while its default holds such rows.
    """
    q = connections[using].ops.quote_name
    e_default, a_default = q(f"{EXECUTION}_default"), q(f"{ATTEMPT}_default")
    bounds = {"start": period.start, "end": period.end}
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor.execute(f"LOCK TABLE {e_default}, {a_default} IN SHARE ROW EXCLUSIVE MODE")
        in_range = "scheduled_for >= %(start)s AND scheduled_for < %(end)s"
        cursor.execute(f"SELECT count(*) FROM {e_default} WHERE {in_range}", bounds)
        moving = cursor.fetchone()[0]
        if moving:
            for table, temp in ((e_default, "_moving_executions"), (a_default, "_moving_attempts")):
                cursor.execute(
                    f"CREATE TEMP TABLE {temp} ON COMMIT DROP AS "
                    f"SELECT * FROM {table} WHERE {in_range}",
                    bounds,
                )
            cursor.execute(f"DELETE FROM {a_default} WHERE {in_range}", bounds)
            cursor.execute(f"DELETE FROM {e_default} WHERE {in_range}", bounds)
        for table in (EXECUTION, ATTEMPT):
            _create(cursor, q, table, period, options=_newest_options(cursor, table))
        if moving:
            cursor.execute(f"INSERT INTO {q(EXECUTION)} SELECT * FROM _moving_executions")
            cursor.execute(f"INSERT INTO {q(ATTEMPT)} SELECT * FROM _moving_attempts")
            cursor.execute("DROP TABLE _moving_executions, _moving_attempts")
    logger.info(
        "history.partition_made period=%s..%s moved=%s",
        period.start.isoformat(),
        period.end.isoformat(),
        moving,
    )


def _newest_options(cursor: Any, table: str) -> list[str]:
    """The storage parameters of ``table``'s newest period (a partitioned table holds none
    itself in PostgreSQL 15): each new period is made as the last one was."""
    cursor.execute(
        """
        SELECT c.reloptions FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = %s::regclass AND c.relname <> %s
         ORDER BY c.relname DESC LIMIT 1
        """,
        [table, f"{table}_default"],
    )
    row = cursor.fetchone()
    return list(row[0] or []) if row else []


def _options_of(cursor: Any, table: str) -> list[str]:
    cursor.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [table])
    return list(cursor.fetchone()[0] or [])


def _create(cursor: Any, q: Any, table: str, period: Period, options: Sequence[str] = ()) -> None:
    storage = f" WITH ({', '.join(options)})" if options else ""
    cursor.execute(
        f"CREATE TABLE {q(period.name(table))} PARTITION OF {q(table)} "
        f"FOR VALUES FROM (%s) TO (%s){storage}",
        [period.start, period.end],
    )


@dataclass
class Dropped:
    period: Period
    executions: int
    attempts: int
    kept: int
    by_job: dict[int | None, int]


#: What ``drop_period`` keeps: given the period's executions by job (read under its lock),
#: a ``SELECT id FROM {partition} e ...`` text (``{partition}`` is replaced by the period's
#: executions partition) and its parameters.
Keepers = Callable[[dict[int | None, int]], tuple[str, dict[str, Any]]]


def drop_period(period: Period, *, keepers: Keepers, using: str = DEFAULT_DB_ALIAS) -> Dropped:
    """Drop one period's partitions of both tables, in one transaction, keeping the executions
    ``keepers`` selects with their attempts: detached first, they go back through the parent,
    into the default partition."""
    q = connections[using].ops.quote_name
    e_part, a_part = q(period.name(EXECUTION)), q(period.name(ATTEMPT))
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        # Checks deferred by the caller's transaction run now: a table with pending ones
        # cannot be dropped.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"LOCK TABLE {e_part}, {a_part} IN ACCESS EXCLUSIVE MODE")
        # All the period's rows by job (read from the one-per-occurrence index), less the
        # few kept: one pass, not a filter of every row against the kept ones.
        cursor.execute(f"SELECT job_id, count(*) FROM {e_part} GROUP BY job_id")
        by_job = dict(cursor.fetchall())
        kept_sql, params = keepers(dict(by_job))
        cursor.execute(
            f"CREATE TEMP TABLE _kept_ids ON COMMIT DROP AS {kept_sql.format(partition=e_part)}",
            params,
        )
        cursor.execute(
            f"CREATE TEMP TABLE _kept_executions ON COMMIT DROP AS SELECT * FROM {e_part} "
            "WHERE id IN (SELECT id FROM _kept_ids)"
        )
        cursor.execute(
            f"CREATE TEMP TABLE _kept_attempts ON COMMIT DROP AS SELECT * FROM {a_part} "
            "WHERE execution_id IN (SELECT id FROM _kept_ids)"
        )
        cursor.execute("SELECT job_id, count(*) FROM _kept_executions GROUP BY job_id")
        for job_id, count in cursor.fetchall():
            by_job[job_id] -= count
        by_job = {job_id: count for job_id, count in by_job.items() if count}
        cursor.execute(f"SELECT count(*) FROM {a_part}")
        attempts = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM _kept_executions")
        kept = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM _kept_attempts")
        attempts -= cursor.fetchone()[0]
        cursor.execute(f"ALTER TABLE {q(ATTEMPT)} DETACH PARTITION {a_part}")
        cursor.execute(f"DROP TABLE {a_part}")
        cursor.execute(f"ALTER TABLE {q(EXECUTION)} DETACH PARTITION {e_part}")
        cursor.execute(f"DROP TABLE {e_part}")
        if kept:
            cursor.execute(f"INSERT INTO {q(EXECUTION)} SELECT * FROM _kept_executions")
            cursor.execute(f"INSERT INTO {q(ATTEMPT)} SELECT * FROM _kept_attempts")
        cursor.execute("DROP TABLE _kept_ids, _kept_executions, _kept_attempts")
    dropped = Dropped(period, sum(by_job.values()), attempts, kept, by_job)
    logger.info(
        "history.partition_dropped period=%s..%s executions=%s attempts=%s kept=%s",
        period.start.isoformat(),
        period.end.isoformat(),
        dropped.executions,
        dropped.attempts,
        kept,
    )
    return dropped


# -- nth_newest: each job's ``keep``-th newest occurrence among the named periods (None: it
#    has fewer), for the jobs of a period about to go. Bounded to the periods, the read leaves
#    out the default partition, so PostgreSQL reads the periods newest first and stops at the
#    ``keep``-th (one step down one index for most jobs), instead of merging every period's
#    index. What the default partition holds is older (rows kept by an earlier drop) or later
#    (due past the periods made): left out, the ``keep``-th newest found is never later than
#    the true one, so no row of a job's latest goes. (Where the range spans a gap between
#    periods, or a period dropped earlier in the same prune, PostgreSQL reads the default
#    partition too: slower, and exact.)
NTH_NEWEST = ledger.Statement(
    postgresql=f"""
    SELECT k.job_id AS job_id,
           (SELECT x.scheduled_for FROM {EXECUTION} x
             WHERE x.job_id = k.job_id
               AND x.scheduled_for >= %(first)s AND x.scheduled_for < %(last)s
             ORDER BY x.scheduled_for DESC OFFSET %(keep)s - 1 LIMIT 1) AS nth
      FROM unnest(%(jobs)s::bigint[]) AS k(job_id)
    """,
    columns=("job_id", "nth"),
)


def nth_newest(
    jobs: Sequence[int], *, keep: int, within: Sequence[Period], using: str = DEFAULT_DB_ALIAS
) -> dict[int, datetime | None]:
    """Each of ``jobs``' ``keep``-th newest ``scheduled_for`` in the periods ``within`` (from
    the first's start to the last's end), or None where it has fewer there."""
    if not jobs:
        return {}
    params = {"jobs": list(jobs), "keep": keep, "first": within[0].start, "last": within[-1].end}
    return {row["job_id"]: row["nth"] for row in ledger.rows(NTH_NEWEST, params, using=using)}


# -- the migration's move: the same rows, keys and indexes in partitioned tables and back ----


def partition(schema_editor: Any, execution: Any, attempt: Any, job: Any, *, days: int) -> None:
    """Move both tables into partitioned ones, in the migration's transaction.

    Both tables are locked for the copy: workers and schedulers wait, and lose nothing. The
    runs that were running get a fresh heartbeat at the end, so the wait is not taken for a
    dead worker. Periods are made from the oldest row's (at most ``MOST_BEHIND`` back) to
    ``AHEAD`` past now; older or later rows go to the default partitions.
    """
    cursor = schema_editor.connection.cursor()
    q = schema_editor.quote_name
    _lock_all(cursor, q)
    options = {}
    for table in (EXECUTION, ATTEMPT):
        options[table] = _options_of(cursor, table)
        storage = f" WITH ({', '.join(options[table])})" if options[table] else ""
        cursor.execute(f"ALTER TABLE {q(table)} RENAME TO {q(table + '_plain')}")
        cursor.execute(
            f"CREATE TABLE {q(table)} (LIKE {q(table + '_plain')} INCLUDING DEFAULTS "
            "INCLUDING IDENTITY INCLUDING CONSTRAINTS) PARTITION BY RANGE (scheduled_for)"
        )
        cursor.execute(
            f"CREATE TABLE {q(table + '_default')} PARTITION OF {q(table)} DEFAULT{storage}"
        )
    cursor.execute(f"SELECT min(scheduled_for), clock_timestamp() FROM {q(EXECUTION + '_plain')}")
    oldest, now = cursor.fetchone()
    start = period_of(now, days).start
    if oldest is not None:
        start = max(
            min(start, period_of(oldest, days).start),
            start - timedelta(days=days * MOST_BEHIND),
        )
    until = period_of(now, days).end + timedelta(days=days * AHEAD)
    while start < until:
        period = Period(start, start + timedelta(days=days))
        for table in (EXECUTION, ATTEMPT):
            _create(cursor, q, table, period, options=options[table])
        start = period.end
    _copy(cursor, q)
    cursor.execute(
        f"UPDATE {q(EXECUTION)} SET last_heartbeat_at = clock_timestamp() WHERE status = 'running'"
    )
    cursor.execute(f"DROP TABLE {q(ATTEMPT + '_plain')}")
    cursor.execute(f"DROP TABLE {q(EXECUTION + '_plain')} CASCADE")  # and the job's reference
    _rename_sequences(cursor, q)
    cursor.execute(f"ALTER TABLE {q(EXECUTION)} ADD PRIMARY KEY (id, scheduled_for)")
    cursor.execute(f"ALTER TABLE {q(ATTEMPT)} ADD PRIMARY KEY (id, scheduled_for)")
    _django_keys(schema_editor, execution, skip_fields=())
    cursor.execute(
        f"ALTER TABLE {q(ATTEMPT)} ADD CONSTRAINT attempt_number_unique "
        "UNIQUE (execution_id, number, scheduled_for)"
    )


def unpartition(schema_editor: Any, execution: Any, attempt: Any, job: Any) -> None:
    """Move both tables back into plain ones, as Django's models declare them."""
    cursor = schema_editor.connection.cursor()
    q = schema_editor.quote_name
    _lock_all(cursor, q)
    for table in (EXECUTION, ATTEMPT):
        options = _newest_options(cursor, table)
        cursor.execute(f"ALTER TABLE {q(table)} RENAME TO {q(table + '_partitioned')}")
        cursor.execute(
            f"CREATE TABLE {q(table)} (LIKE {q(table + '_partitioned')} INCLUDING DEFAULTS "
            "INCLUDING IDENTITY INCLUDING CONSTRAINTS)"
        )
        if options:
            cursor.execute(f"ALTER TABLE {q(table)} SET ({', '.join(options)})")
    _copy(cursor, q, source="_partitioned")
    cursor.execute(
        f"UPDATE {q(EXECUTION)} SET last_heartbeat_at = clock_timestamp() WHERE status = 'running'"
    )
    cursor.execute(f"DROP TABLE {q(ATTEMPT + '_partitioned')}")
    cursor.execute(f"DROP TABLE {q(EXECUTION + '_partitioned')}")
    _rename_sequences(cursor, q)
    cursor.execute(f"ALTER TABLE {q(EXECUTION)} ADD PRIMARY KEY (id)")
    cursor.execute(f"ALTER TABLE {q(ATTEMPT)} ADD PRIMARY KEY (id)")
    _django_keys(schema_editor, execution, skip_fields=())
    cursor.execute(  # none should be: the foreign key below refuses any
        f"DELETE FROM {q(ATTEMPT)} a WHERE NOT EXISTS "
        f"(SELECT 1 FROM {q(EXECUTION)} e WHERE e.id = a.execution_id)"
    )
    _django_keys(schema_editor, attempt, skip_fields=())
    field = job._meta.get_field("current_execution")
    cursor.execute(
        f"UPDATE {q(JOB)} j SET current_execution_id = NULL WHERE current_execution_id IS NOT NULL"
        f" AND NOT EXISTS (SELECT 1 FROM {q(EXECUTION)} e WHERE e.id = j.current_execution_id)"
    )
    schema_editor.execute(schema_editor._create_fk_sql(job, field, _FK_SUFFIX))


def _lock_all(cursor: Any, q: Any) -> None:
    """Lock both tables and the jobs', retrying while running transactions hold them.

    Workers and schedulers take these tables in differing orders, so waiting for all three
    at once can deadlock with one of them; each try gives up after a short wait and starts
    over (in a savepoint), and the running transactions get through in between.
    """
    for _ in range(LOCK_TRIES):
        try:
            with transaction.atomic():
                cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                cursor.execute(
                    f"LOCK TABLE {q(JOB)}, {q(EXECUTION)}, {q(ATTEMPT)} IN ACCESS EXCLUSIVE MODE"
                )
                cursor.execute("SET LOCAL lock_timeout = 0")
            return
        except (OperationalError, DatabaseError) as exc:
            logger.warning("history.migration_lock_retry error=%s", str(exc).splitlines()[0])
    raise RuntimeError(f"could not lock the history tables in {LOCK_TRIES} tries")


def _copy(cursor: Any, q: Any, source: str = "_plain") -> None:
    for table in (EXECUTION, ATTEMPT):
        cursor.execute(
            f"INSERT INTO {q(table)} OVERRIDING SYSTEM VALUE SELECT * FROM {q(table + source)}"
        )


def _rename_sequences(cursor: Any, q: Any) -> None:
    """Give each identity sequence the name Django gives it, and its next value."""
    for table in (EXECUTION, ATTEMPT):
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
        sequence = cursor.fetchone()[0]
        wanted = f"{table}_id_seq"
        if sequence.split(".")[-1].strip('"') != wanted:
            cursor.execute(f"ALTER SEQUENCE {sequence} RENAME TO {q(wanted)}")
        cursor.execute(
            f"SELECT setval(pg_get_serial_sequence(%s, 'id'), "
            f"coalesce((SELECT max(id) FROM {q(table)}), 0) + 1, false)",
            [table],
        )


def _django_keys(schema_editor: Any, model: Any, *, skip_fields: Sequence[str]) -> None:
    """The indexes, unique constraints and foreign keys the model declares, by Django's names
    (check constraints came with the columns)."""
    for sql in schema_editor._model_indexes_sql(model):
        schema_editor.execute(sql)
    for constraint in model._meta.constraints:
        if hasattr(constraint, "fields") and constraint.fields:
            schema_editor.execute(constraint.create_sql(model, schema_editor))
    for field in model._meta.local_fields:
        if field.remote_field and field.db_constraint and field.name not in skip_fields:
            schema_editor.execute(schema_editor._create_fk_sql(model, field, _FK_SUFFIX))
