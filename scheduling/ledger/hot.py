"""The runner of the statements a worker sends for every task, prepared on the server.

A worker process sends the same few statements (the start, the completion) thousands of times.
Prepared on the server, each is planned once per connection instead of on every call, where
planning was half of the statement's server time; Django's cursors bind parameters on the
client and never prepare. So ``run_hot`` runs a plain psycopg cursor on Django's own
connection: the same transaction, with errors mapped to Django's as any query's are.
``SCHEDULING_PREPARE_STATEMENTS`` off (for a pooler that cannot keep prepared statements) takes
Django's cursor instead. PostgreSQL only: the statements it runs have their SQLite forms in
their own modules.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections
from psycopg.types.json import Jsonb
from psycopg.types.numeric import Int8

from scheduling import conf
from scheduling.ledger import Params, Statement, names_of

HOT_PREPARE_THRESHOLD = 5


def _named(statement: Statement, cursor: Any) -> dict[str, Any] | None:
    found = cursor.fetchone()
    if found is None:
        return None
    return dict(zip(names_of(statement, cursor), found, strict=True))


def run_hot(statement: Statement, params: Params) -> dict[str, Any] | None:
    """Run a hot statement (PostgreSQL); its first row by column name, or None."""
    # A dict is a JSON document (a Django task's call or result): sent as jsonb on either path.
    text = statement.text(connections[DEFAULT_DB_ALIAS])
    django_connection = connections[DEFAULT_DB_ALIAS]
    if not conf.get("PREPARE_STATEMENTS"):
        with django_connection.cursor() as cursor:
            cursor.execute(text, {k: Jsonb(v) if type(v) is dict else v for k, v in params.items()})
            return _named(statement, cursor)
    django_connection.ensure_connection()
    raw = django_connection.connection
    if (
        raw.prepare_threshold is None
        and django_connection.settings_dict["OPTIONS"].get("server_side_binding") is not True
    ):
        # Django turns psycopg's statement cache off. Its own cursors bind on the client and
        # are never prepared, so turning the cache on touches only the statements sent here
        # (with server-side binding configured, the project's own threshold is left alone).
        raw.prepare_threshold = HOT_PREPARE_THRESHOLD
    # Integers go as int8 whatever their size, so each statement is prepared once, not once
    # per combination of int2/int4/int8 parameters.
    values = {
        k: Int8(v) if type(v) is int else Jsonb(v) if type(v) is dict else v
        for k, v in params.items()
    }
    with django_connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        cursor.execute(text, values, prepare=True)
        return _named(statement, cursor)
