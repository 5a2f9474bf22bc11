"""The engines: one per database, each answering the ledger's verbs (``ledger.engine``).

``engine(using)`` is the one place that asks which database a connection is; the answer is
kept on the connection (each thread has its own), so the question costs one dictionary read.
A database is one more module here and one more name in ``ENGINES``: a MySQL/MariaDB engine
subclasses ``orm.OrmEngine``, overriding the claim's lock (``select_for_update(skip_locked=
True)``) and the advisory locks (``GET_LOCK``).
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.signals import connection_created
from django.dispatch import receiver

from scheduling.ledger import dialect
from scheduling.ledger.engine import Engine
from scheduling.ledger.engines.postgresql import PostgreSQLEngine
from scheduling.ledger.engines.sqlite import SQLiteEngine

#: Each database's engine, by Django's ``connection.vendor``.
ENGINES: dict[str, type[Engine]] = {
    PostgreSQLEngine.vendor: PostgreSQLEngine,
    SQLiteEngine.vendor: SQLiteEngine,
}
_CACHED = "_duecourse_engine"


class NoEngine(NotImplementedError):
    """No engine answers for this connection's database."""


def engine(using: str | Any = DEFAULT_DB_ALIAS) -> Engine:
    """The engine of the connection ``using`` (an alias of ``DATABASES``, or a connection
    itself, as a ``connection_created`` receiver is handed), made once per connection."""
    wrapper = connections[using] if isinstance(using, str) else using
    found = wrapper.__dict__.get(_CACHED)
    if found is None:
        vendor = dialect(wrapper)
        if vendor not in ENGINES:
            raise NoEngine(f"no ledger engine for {vendor}")
        found = ENGINES[vendor](wrapper.alias)
        wrapper.__dict__[_CACHED] = found
    return found


@receiver(connection_created, dispatch_uid="scheduling.ledger.engines.prepare")
def prepare_connection(sender: Any, connection: Any, **_: Any) -> None:
    """Each database's engine prepares its new connections (PostgreSQL: a row holding
    ``infinity`` must not break every reader of its table, ``ledger.pgtimes``)."""
    engine(connection).on_connect(connection.connection)


__all__ = ["ENGINES", "Engine", "NoEngine", "engine"]
