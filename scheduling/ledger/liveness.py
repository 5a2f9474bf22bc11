"""Liveness's database pieces: the clock a heartbeat stamps, and the bounds of its connection.

- ``database_now``: the database's clock at the start of the transaction, as an expression;
- ``bound_statements``: a statement timeout for the rest of this transaction (PostgreSQL);
- ``bound_connection``: timeouts on every layer of this thread's connection (PostgreSQL).
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import DateTimeField, Func
from django.db.models.functions import Now

from scheduling import ledger


class _TransactionStart(Func):
    """The database's clock at the start of this transaction (one value for all its rows)."""

    template = "CURRENT_TIMESTAMP"
    output_field = DateTimeField()


def database_now() -> Any:
    """The database's own clock, for a write to stamp: one instant per transaction on
    PostgreSQL (so every row of a beat gets the same), the statement's on SQLite."""
    return _TransactionStart() if ledger.on_postgresql() else Now()


# -- bound_statements: this transaction's statements fail after ``timeout`` instead of hanging
#    on a server that does not answer (``SET LOCAL`` as a function, which a pooler in
#    transaction mode accepts). SQLite is in-process: nothing to bound.
STATEMENT_TIMEOUT = ledger.Statement(
    postgresql="SELECT set_config('statement_timeout', %(timeout)s, true)"
)


def bound_statements(seconds: float) -> None:
    """Bound the rest of this transaction's statements to ``seconds`` (PostgreSQL)."""
    if ledger.on_postgresql():
        ledger.value(STATEMENT_TIMEOUT, {"timeout": f"{max(1, round(seconds * 1000))}ms"})


def bound_connection(seconds: int) -> None:
    """Give this thread's connection a connect timeout and TCP keepalives with a user timeout.

    The settings dictionary is replaced on this thread's connection alone; the host's settings
    and the task's own connection keep theirs. The connection is closed, and the next query
    opens it with these options. PostgreSQL only (SQLite has no link to lose).
    """
    if not ledger.on_postgresql():
        return
    connection = connections[DEFAULT_DB_ALIAS]
    options = dict(connection.settings_dict.get("OPTIONS") or {})
    options.update(
        connect_timeout=seconds,
        keepalives=1,
        keepalives_idle=max(1, seconds // 2),
        keepalives_interval=1,
        keepalives_count=max(1, seconds // 2),
        tcp_user_timeout=seconds * 1000,
    )
    connection.close()
    connection.settings_dict = {**connection.settings_dict, "OPTIONS": options}
