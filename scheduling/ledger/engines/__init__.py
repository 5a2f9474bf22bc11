"""The engines: one per database, each answering the ledger's verbs (``ledger.engine``).

``engine(using)`` is the one place that asks which database a connection is; the answer is
kept on the connection (each thread has its own), so the question costs one dictionary read.
A database is one more module here and one more name in ``engine`` (``engine.register``): a
MySQL/MariaDB engine subclasses ``orm.OrmEngine``, overriding the claim's lock
(``select_for_update(skip_locked=True)``) and the advisory locks (``GET_LOCK``).
"""

from __future__ import annotations

from typing import Any

from django.db.backends.signals import connection_created
from django.dispatch import receiver

from scheduling.ledger import Engines, NoEngine
from scheduling.ledger.engine import Engine
from scheduling.ledger.engines.postgresql import PostgreSQLEngine
from scheduling.ledger.engines.sqlite import SQLiteEngine

#: Each database's engine, by Django's ``connection.vendor``: ``engine(using)``.
engine: Engines[Engine] = Engines(
    "scheduling",
    **{PostgreSQLEngine.vendor: PostgreSQLEngine, SQLiteEngine.vendor: SQLiteEngine},
)


@receiver(connection_created, dispatch_uid="scheduling.ledger.engines.prepare")
def prepare_connection(sender: Any, connection: Any, **_: Any) -> None:
    """Each database's engine prepares its new connections (PostgreSQL: a row holding
    ``infinity`` must not break every reader of its table, ``ledger.pgtimes``)."""
    engine(connection).on_connect(connection.connection)


__all__ = ["Engine", "NoEngine", "engine"]
