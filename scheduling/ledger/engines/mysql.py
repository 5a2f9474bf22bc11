"""The MySQL and MariaDB engine: the ORM's forms, with what those databases say otherwise.

MySQL 8.0+ and MariaDB 10.6+ (Django's ``mysql`` vendor covers both) take the ORM's path of
every verb (``engines.orm``), with real row locks where SQLite has one writer. What they need
beyond that is here:

- ``row_locks``: neither has ``FOR NO KEY UPDATE`` (the full lock waits a little more and
  guards the same); MariaDB has no ``FOR UPDATE OF`` and locks the rows of every joined table:
  more than asked, never less. Both have ``SKIP LOCKED``, so schedulers claim side by side.
- ``upsert_target``: MySQL's ``ON DUPLICATE KEY UPDATE`` names no conflict target (a conflict
  on any unique key updates the row), and Django refuses one there.
- ``lock_declarations``: a named lock held until the transaction commits. MySQL's named
  locks (``GET_LOCK``) belong to the session, so it is let go by an on-commit hook; after a
  rollback it stays held until this session asks for it again or the connection closes.
- ``lock_slot``: the job's row, then the owner's user row, locked in that order in every
  process, so two starts never wait on each other in a circle.
- ``insert_waiting``: writers do not queue for one lock, so another backfill may insert an
  occurrence between this one's read and its insert: its row wins the unique key and this
  one's is left out (``INSERT IGNORE``, which waits for the other transaction as PostgreSQL's
  ``ON CONFLICT`` does); what this one wrote is read back by its task ids.
- ``bound_statements``, ``bound_connection``: MariaDB's ``max_statement_time`` (MySQL's
  ``max_execution_time``, reads only) for the rest of the session, and the driver's connect,
  read and write timeouts.
- The system checks' questions: ``case_blind_columns`` (``scheduling.W015``), ``clock_offset``
  (``scheduling.E017``), ``json_depth_limit`` (``scheduling.W016``).

The history is one table, trimmed by batched deletes as on SQLite: MariaDB forbids foreign
keys on partitioned tables (docs/operations.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connections, transaction
from django.db.models import F

from scheduling import ledger
from scheduling.ledger.engines.orm import OrmEngine
from scheduling.models import Execution, Job

#: MariaDB's JSON check (``JSON_VALID``) refuses JSON nested 32 levels deep or more, and the
#: audit trail keeps a job's arguments two levels down (``{"kwargs": {"to": …}}``): arguments
#: nested deeper than this are refused by the database, not by the engine's rules.
MARIADB_ARGS_DEPTH = 29

# -- the named lock: GET_LOCK waits up to its timeout (seconds) and answers 1 when granted; a
#    lock this session still holds from a transaction that rolled back is let go first (MySQL
#    counts a session's locks of one name, so it would otherwise be held twice).
_HELD_HERE = ledger.Statement.portable("SELECT IS_USED_LOCK(%(name)s) = CONNECTION_ID() AS held")
_GET_LOCK = ledger.Statement.portable("SELECT GET_LOCK(%(name)s, %(timeout)s) AS locked")
_RELEASE_LOCK = ledger.Statement.portable("SELECT RELEASE_LOCK(%(name)s) AS released")
_MARIADB_TIMEOUT = ledger.Statement.portable("SET SESSION max_statement_time = %(seconds)s")
_MYSQL_TIMEOUT = ledger.Statement.portable("SET SESSION max_execution_time = %(milliseconds)s")
# -- the ledger's text columns whose collation ignores case.
_TEXT_COLLATIONS = ledger.Statement.portable(
    """
    SELECT TABLE_NAME AS table_name, COLUMN_NAME AS column_name, COLLATION_NAME AS collation
      FROM information_schema.COLUMNS
     WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'scheduling\\_%%'
       AND COLLATION_NAME LIKE '%%\\_ci'
     ORDER BY TABLE_NAME, ORDINAL_POSITION""",
    columns=("table_name", "column_name", "collation"),
)
# -- the session's clock (NOW, which CURRENT_TIMESTAMP is) against UTC's.
_CLOCK_OFFSET = ledger.Statement.portable(
    "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW()) AS offset_seconds"
)


class LockTimeout(RuntimeError):
    """A named lock was not granted within its timeout."""


class MySQLEngine(OrmEngine):
    """MySQL 8.0+ and MariaDB 10.6+: see the module docstring."""

    vendor = "mysql"
    parallel_claims = True

    @property
    def _connection(self) -> Any:
        return connections[self.using]

    def is_mariadb(self) -> bool:
        return bool(self._connection.mysql_is_mariadb)

    def row_locks(
        self, *, skip_locked: bool = False, no_key: bool = False, of: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        features = self._connection.features
        return {
            "skip_locked": skip_locked,
            "no_key": False,
            "of": of if features.has_select_for_update_of else (),
        }

    def upsert_target(self, *fields: str) -> list[str] | None:
        return None

    def lock_slot(self, *, job_id: int, limit_job: bool, owner_id: int | None) -> None:
        if limit_job:
            Job.objects.using(self.using).filter(pk=job_id).update(updated_at=F("updated_at"))
        if owner_id is not None:
            users = get_user_model().objects.using(self.using)
            list(users.select_for_update().filter(pk=owner_id).values("pk"))

    def lock_declarations(self) -> None:
        self.lock_name("duecourse.declarations")

    def lock_name(self, name: str, *, timeout: int = 60) -> None:
        """Hold the lock ``name`` until the current transaction commits (see the module
        docstring). The server's named locks are shared by all its databases: each is named
        in its own; names longer than MySQL's 64 characters are hashed."""
        name = f"{self._connection.settings_dict['NAME']}.{name}"
        key = name if len(name) <= 64 else hashlib.sha256(name.encode()).hexdigest()
        if ledger.value(_HELD_HERE, {"name": key}, using=self.using):
            ledger.value(_RELEASE_LOCK, {"name": key}, using=self.using)
        granted = ledger.value(_GET_LOCK, {"name": key, "timeout": timeout}, using=self.using)
        if granted != 1:
            raise LockTimeout(f"the lock {name!r} was not granted within {timeout} s")
        transaction.on_commit(
            lambda: ledger.value(_RELEASE_LOCK, {"name": key}, using=self.using),
            using=self.using,
            robust=True,
        )

    def insert_waiting(
        self, *, job_id: int, task: str, instants: Sequence[datetime], reason: str, now: datetime
    ) -> list[datetime]:
        if not instants:
            return []
        executions = Execution.objects.using(self.using)
        with transaction.atomic(using=self.using):
            rows = self.waiting_rows(
                job_id=job_id, task=task, instants=instants, reason=reason, now=now
            )
            executions.bulk_create(rows, ignore_conflicts=True)
            written = executions.filter(task_id__in=[row.task_id for row in rows])
            return sorted(written.values_list("scheduled_for", flat=True))

    def bound_statements(self, seconds: float) -> None:
        """A session setting, not a transaction's: the heartbeat that asks for it asks again
        before each beat, with the same bound."""
        if self.is_mariadb():
            ledger.execute(_MARIADB_TIMEOUT, {"seconds": max(0.001, seconds)}, using=self.using)
        else:
            milliseconds = max(1, round(seconds * 1000))
            ledger.execute(_MYSQL_TIMEOUT, {"milliseconds": milliseconds}, using=self.using)

    def bound_connection(self, seconds: int) -> None:
        """The driver has a connect timeout and read and write timeouts, no keepalive
        settings; the connection is closed and the next query opens it with them."""
        connection = self._connection
        options = dict(connection.settings_dict.get("OPTIONS") or {})
        options.update(connect_timeout=seconds, read_timeout=seconds, write_timeout=seconds)
        connection.close()
        connection.settings_dict = {**connection.settings_dict, "OPTIONS": options}

    def case_blind_columns(self) -> list[dict[str, str]]:
        """Where the collation compares without case (``…_ci``), two job names, task names
        or queue names that differ only in case are one: a unique name refuses the second
        and a lookup finds the other, unlike PostgreSQL and SQLite."""
        return ledger.rows(_TEXT_COLLATIONS, using=self.using)

    def clock_offset(self) -> int:
        """0 when the session's ``time_zone`` is UTC (``'+00:00'``, as docs/install.md sets
        it), the zone's offset otherwise."""
        return int(ledger.value(_CLOCK_OFFSET, using=self.using))

    def json_depth_limit(self) -> int | None:
        return MARIADB_ARGS_DEPTH if self.is_mariadb() else None
