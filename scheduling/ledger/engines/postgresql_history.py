"""The PostgreSQL engine's partitioned history: periods made, dropped, and the migration's move.

Every statement is in ``sql/postgresql/history.sql``; the identifiers that vary (a period's
partition, a temporary table) are composed with ``psycopg.sql.Identifier`` and its storage
options with ``sql.Literal``, never formatted into the text. What a period is, and which
periods to make, is ``ledger.partitions``' to decide; which rows a drop keeps is retention's
(``stages.retention``), handed here as values (``Latest``).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import DatabaseError, OperationalError, connections, transaction
from psycopg import sql

from scheduling import ledger
from scheduling.ledger import named
from scheduling.ledger.values import Dropped, Latest, Period, period_of

logger = logging.getLogger("scheduling")

STATEMENTS = named.load(
    "scheduling.ledger.engines", "sql/postgresql/history.sql", form="postgresql"
)
EXECUTION = "scheduling_execution"
ATTEMPT = "scheduling_attempt"
JOB = "scheduling_job"
#: How long maintenance waits for a lock before giving up until its next turn.
LOCK_TIMEOUT = "5s"
#: How many times the migration tries to lock the tables it moves.
LOCK_TRIES = 60
#: The suffix of Django's names of foreign keys.
_FK_SUFFIX = "_fk_%(to_table)s_%(to_column)s"
_BOUND = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")


def _instant(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def storage(options: Sequence[str], *, keyword: str = " WITH ") -> sql.Composable:
    """Storage parameters read from the catalog (``name=value``), composed for ``WITH (...)``
    (or, with ``keyword=""``, for ``SET (...)``): names as identifiers, values as literals."""
    if not options:
        return sql.SQL("")
    pairs = [option.split("=", 1) for option in options]
    listed = sql.SQL(", ").join(
        sql.SQL("{} = {}").format(sql.Identifier(name), sql.Literal(value)) for name, value in pairs
    )
    return sql.SQL(keyword + "({})").format(listed) if keyword else listed


class PostgreSQLHistory:
    """The partitioned history's verbs (mixed into ``PostgreSQLEngine``)."""

    using: str
    vendor: str

    def run(
        self,
        verb: str,
        params: Mapping[str, Any] | None = None,
        /,
        *,
        using: str | None = None,
        **identifiers: str | Sequence[str] | sql.Composable,
    ) -> list[dict[str, Any]]:
        """Run the history statement named ``verb`` with ``identifiers`` composed into its text; its
        rows by column name (none for DDL)."""
        alias = using or self.using
        statement = STATEMENTS[verb]
        if identifiers:
            composed = sql.SQL(statement.text(alias)).format(
                **{key: _identifier(value) for key, value in identifiers.items()}
            )
            connection = connections[alias]
            connection.ensure_connection()
            text = composed.as_string(connection.connection)
            statement = dataclasses.replace(statement, postgresql=text, columns=())
        return ledger.rows(statement, params, using=alias)

    def is_partitioned(self) -> bool:
        [found] = self.run("is_partitioned", {"table": EXECUTION})
        return bool(found["partitioned"])

    def periods(self, table: str = EXECUTION) -> list[Period]:
        found = []
        for row in self.run("partition_bounds", {"table": table}):
            match = _BOUND.search(row["bound"])
            if match:
                found.append(Period(_instant(match.group(1)), _instant(match.group(2))))
        return sorted(found, key=lambda p: p.start)

    def newest_options(self, table: str, *, using: str | None = None) -> list[str]:
        """The storage parameters of ``table``'s newest period: each new period is made as
        the last one was."""
        found = self.run(
            "newest_options", {"table": table, "default": f"{table}_default"}, using=using
        )
        return list(found[0]["options"] or []) if found else []

    def make_period(self, period: Period) -> int:
        """Both tables' partitions of ``period``, in one transaction; rows the default
        partitions hold for it (a run deferred to it before it existed) move in first, since
        PostgreSQL refuses a new partition while its default holds such rows."""
        e_default, a_default = f"{EXECUTION}_default", f"{ATTEMPT}_default"
        bounds = {"start": period.start, "end": period.end}
        with transaction.atomic(using=self.using):
            self.run("lock_timeout", {"timeout": LOCK_TIMEOUT})
            self.run("lock_for_moving", executions=e_default, attempts=a_default)
            [counted] = self.run("count_in_period", bounds, table=e_default)
            moving = int(counted["rows"])
            if moving:
                for table, stash in ((e_default, "_moving_executions"),
                                     (a_default, "_moving_attempts")):  # fmt: skip
                    self.run("stash_period", bounds, table=table, stash=stash)
                self.run("delete_period", bounds, table=a_default)
                self.run("delete_period", bounds, table=e_default)
            for table in (EXECUTION, ATTEMPT):
                self.create_period(table, period, self.newest_options(table))
            if moving:
                self.run("insert_all", table=EXECUTION, source="_moving_executions")
                self.run("insert_all", table=ATTEMPT, source="_moving_attempts")
                self.run("drop_tables", tables=["_moving_executions", "_moving_attempts"])
        return moving

    def create_period(
        self, table: str, period: Period, options: Sequence[str], *, using: str | None = None
    ) -> None:
        self.run(
            "create_period",
            {"start": period.start, "end": period.end},
            using=using,
            partition=period.name(table),
            table=table,
            storage=storage(options),
        )

    def drop_period(
        self, period: Period, *, latest: Callable[[dict[int | None, int]], Latest | None]
    ) -> Dropped:
        """Both tables' partitions of ``period`` gone, in one transaction, keeping the
        unfinished executions, the current runs and those ``latest(by_job)`` names, with their
        attempts: copied aside first, they go back through the parent into the default
        partition."""
        e_part, a_part = period.name(EXECUTION), period.name(ATTEMPT)
        with transaction.atomic(using=self.using):
            self.run("lock_timeout", {"timeout": LOCK_TIMEOUT})
            self.run("constraints_immediate")
            self.run("lock_for_dropping", executions=e_part, attempts=a_part)
            # All the period's rows by job (read from the one-per-occurrence index), less the
            # few kept: one pass, not a filter of every row against the kept ones.
            by_job = {
                row["job_id"]: row["executions"] for row in self.run("count_by_job", table=e_part)
            }
            named = latest(dict(by_job))
            if named is None:
                self.run("keep_current", partition=e_part)
            else:
                self.run(
                    "keep_current_and_latest",
                    {"jobs": named.jobs, "nth": named.nth},
                    partition=e_part,
                )
            self.run("stash_kept_executions", partition=e_part)
            self.run("stash_kept_attempts", partition=a_part)
            for row in self.run("count_by_job", table="_kept_executions"):
                by_job[row["job_id"]] -= row["executions"]
            by_job = {job_id: count for job_id, count in by_job.items() if count}
            attempts = self._count(a_part) - self._count("_kept_attempts")
            kept = self._count("_kept_executions")
            self.run("detach_partition", table=ATTEMPT, partition=a_part)
            self.run("drop_tables", tables=[a_part])
            self.run("detach_partition", table=EXECUTION, partition=e_part)
            self.run("drop_tables", tables=[e_part])
            if kept:
                self.run("insert_all", table=EXECUTION, source="_kept_executions")
                self.run("insert_all", table=ATTEMPT, source="_kept_attempts")
            self.run("drop_tables", tables=["_kept_ids", "_kept_executions", "_kept_attempts"])
        return Dropped(period, sum(by_job.values()), attempts, kept, by_job)

    def _count(self, table: str, *, using: str | None = None) -> int:
        [found] = self.run("count_rows", using=using, table=table)
        return int(found["rows"])

    def nth_newest(
        self, jobs: Sequence[int], *, keep: int, within: Sequence[Period]
    ) -> dict[int, datetime | None]:
        if not jobs:
            return {}
        params = {
            "jobs": list(jobs),
            "keep": keep,
            "first": within[0].start,
            "last": within[-1].end,
        }
        return {row["job_id"]: row["nth"] for row in self.run("nth_newest", params)}


def _identifier(value: str | Sequence[str] | sql.Composable) -> sql.Composable:
    """A name as a quoted identifier, several as a list of them; composed text as it is."""
    if isinstance(value, sql.Composable):
        return value
    if isinstance(value, str):
        return sql.Identifier(value)
    return sql.SQL(", ").join(sql.Identifier(name) for name in value)


class PostgreSQLHistoryMove:
    """The migration's move of an existing installation: the same rows, keys and indexes in
    partitioned tables, and back (mixed into ``PostgreSQLEngine`` with the history)."""

    run: Callable[..., list[dict[str, Any]]]
    newest_options: Callable[..., list[str]]
    create_period: Callable[..., None]

    def partition_history(
        self,
        schema_editor: Any,
        execution: Any,
        *,
        days: int,
        ahead: int,
        most_behind: int,
    ) -> None:
        """Move both tables into partitioned ones, in the migration's transaction.

        Both tables are locked for the copy: workers and schedulers wait, and lose nothing.
        The runs that were running get a fresh heartbeat at the end, so the wait is not taken
        for a dead worker. Periods are made from the oldest row's (at most ``most_behind``
        back) to ``ahead`` past now; older or later rows go to the default partitions.
        """
        alias = schema_editor.connection.alias
        self._lock_all(alias)
        options = {}
        for table in (EXECUTION, ATTEMPT):
            [found] = self.run("table_options", {"table": table}, using=alias)
            options[table] = list(found["options"] or [])
            self.run("rename_table", using=alias, table=table, name=f"{table}_plain")
            self.run("create_partitioned_like", using=alias, table=table, source=f"{table}_plain")
            self.run(
                "create_default",
                using=alias,
                partition=f"{table}_default",
                table=table,
                storage=storage(options[table]),
            )
        [found] = self.run("oldest_and_now", using=alias, table=f"{EXECUTION}_plain")
        oldest, now = found["oldest"], found["now"]
        start = period_of(now, days).start
        if oldest is not None:
            start = max(
                min(start, period_of(oldest, days).start),
                start - timedelta(days=days * most_behind),
            )
        until = period_of(now, days).end + timedelta(days=days * ahead)
        while start < until:
            period = Period(start, start + timedelta(days=days))
            for table in (EXECUTION, ATTEMPT):
                self.create_period(table, period, options[table], using=alias)
            start = period.end
        self._copy(alias, source="_plain")
        self.run("refresh_heartbeats", using=alias, table=EXECUTION)
        self.run("drop_tables", using=alias, tables=[f"{ATTEMPT}_plain"])
        self.run("drop_table_cascade", using=alias, table=f"{EXECUTION}_plain")  # the job's key
        self._rename_sequences(alias)
        self.run("add_period_primary_key", using=alias, table=EXECUTION)
        self.run("add_period_primary_key", using=alias, table=ATTEMPT)
        _django_keys(schema_editor, execution)
        self.run("add_attempt_number_unique", using=alias, table=ATTEMPT)

    def unpartition_history(
        self, schema_editor: Any, execution: Any, attempt: Any, job: Any
    ) -> None:
        """Move both tables back into plain ones, as Django's models declare them."""
        alias = schema_editor.connection.alias
        self._lock_all(alias)
        for table in (EXECUTION, ATTEMPT):
            options = self.newest_options(table, using=alias)
            self.run("rename_table", using=alias, table=table, name=f"{table}_partitioned")
            self.run("create_plain_like", using=alias, table=table, source=f"{table}_partitioned")
            if options:
                self.run("set_storage", using=alias, table=table,
                         options=storage(options, keyword=""))  # fmt: skip
        self._copy(alias, source="_partitioned")
        self.run("refresh_heartbeats", using=alias, table=EXECUTION)
        self.run("drop_tables", using=alias, tables=[f"{ATTEMPT}_partitioned"])
        self.run("drop_tables", using=alias, tables=[f"{EXECUTION}_partitioned"])
        self._rename_sequences(alias)
        self.run("add_plain_primary_key", using=alias, table=EXECUTION)
        self.run("add_plain_primary_key", using=alias, table=ATTEMPT)
        _django_keys(schema_editor, execution)
        self.run("delete_orphan_attempts", using=alias, attempts=ATTEMPT, executions=EXECUTION)
        _django_keys(schema_editor, attempt)
        self.run("clear_missing_current", using=alias, jobs=JOB, executions=EXECUTION)
        field = job._meta.get_field("current_execution")
        schema_editor.execute(schema_editor._create_fk_sql(job, field, _FK_SUFFIX))

    def _lock_all(self, alias: str) -> None:
        """Lock both tables and the jobs', retrying while running transactions hold them.

        Workers and schedulers take these tables in differing orders, so waiting for all
        three at once can deadlock with one of them; each try gives up after a short wait and
        starts over (in a savepoint), and the running transactions get through in between.
        """
        for _ in range(LOCK_TRIES):
            try:
                with transaction.atomic(using=alias):
                    self.run("lock_timeout", {"timeout": LOCK_TIMEOUT}, using=alias)
                    self.run("lock_history", using=alias, jobs=JOB, executions=EXECUTION,
                             attempts=ATTEMPT)  # fmt: skip
                    self.run("lock_timeout", {"timeout": "0"}, using=alias)
                return
            except (OperationalError, DatabaseError) as exc:
                logger.warning("history.migration_lock_retry error=%s", str(exc).splitlines()[0])
        raise RuntimeError(f"could not lock the history tables in {LOCK_TRIES} tries")

    def _copy(self, alias: str, *, source: str) -> None:
        for table in (EXECUTION, ATTEMPT):
            self.run("copy_all", using=alias, table=table, source=table + source)

    def _rename_sequences(self, alias: str) -> None:
        """Give each identity sequence the name Django gives it, and its next value."""
        for table in (EXECUTION, ATTEMPT):
            [found] = self.run("identity_sequence", {"table": table}, using=alias)
            parts = [part.strip('"') for part in found["sequence"].split(".")]
            wanted = f"{table}_id_seq"
            if parts[-1] != wanted:
                self.run("rename_sequence", using=alias, sequence=sql.Identifier(*parts),
                         name=wanted)  # fmt: skip
            self.run("restart_identity", {"table": table}, using=alias, table=table)


def _django_keys(schema_editor: Any, model: Any) -> None:
    """The indexes, unique constraints and foreign keys the model declares, by Django's names
    (check constraints came with the columns): Django's schema editor writes them."""
    for statement in schema_editor._model_indexes_sql(model):
        schema_editor.execute(statement)
    for constraint in model._meta.constraints:
        if hasattr(constraint, "fields") and constraint.fields:
            schema_editor.execute(constraint.create_sql(model, schema_editor))
    for field in model._meta.local_fields:
        if field.remote_field and field.db_constraint:
            schema_editor.execute(schema_editor._create_fk_sql(model, field, _FK_SUFFIX))
