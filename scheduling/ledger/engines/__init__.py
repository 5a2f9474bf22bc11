"""The engines: one per database, each answering the ledger's verbs (``ledger.engine``).

``engine(using)`` is the one place that asks which database a connection is; the answer is
kept on the connection (each thread has its own), so the question costs one dictionary read.
A database is one more module here and one more name in ``engine`` (``engine.register``): the
MySQL/MariaDB engine (``mysql.MySQLEngine``) subclasses ``orm.OrmEngine``, overriding the row
locks those databases can say, the advisory locks (``GET_LOCK``) and the statement bounds.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.signals import connection_created
from django.dispatch import receiver

from scheduling.ledger import Engines, NoEngine
from scheduling.ledger.engine import Engine
from scheduling.ledger.engines.mysql import MySQLEngine
from scheduling.ledger.engines.postgresql import PostgreSQLEngine
from scheduling.ledger.engines.sqlite import SQLiteEngine

#: Each database's engine, by Django's ``connection.vendor``: ``engine(using)``.
engine: Engines[Engine] = Engines(
    "scheduling",
    **{
        PostgreSQLEngine.vendor: PostgreSQLEngine,
        SQLiteEngine.vendor: SQLiteEngine,
        MySQLEngine.vendor: MySQLEngine,
    },
)


def row_locks(
    *, skip_locked: bool = False, no_key: bool = False, of: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``select_for_update``'s options for a lock, as far as the default connection's
    database can say them (``scheduling.api.row_locks``, for the domain apps' own locks)."""
    return engine().row_locks(skip_locked=skip_locked, no_key=no_key, of=of)


@receiver(connection_created, dispatch_uid="scheduling.ledger.engines.prepare")
def prepare_connection(sender: Any, connection: Any, **_: Any) -> None:
    """Each database's engine prepares its new connections (PostgreSQL: a row holding
    ``infinity`` must not break every reader of its table, ``ledger.pgtimes``)."""
    engine(connection).on_connect(connection.connection)


__all__ = ["Engine", "NoEngine", "engine", "row_locks"]
