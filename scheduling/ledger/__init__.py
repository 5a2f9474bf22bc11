"""The engine's ledger: every hand-written statement, and the one place that runs them.

The ORM writes most of the ledger. The statements in this package are the ones where one round
trip instead of several, a lock the ORM cannot say, or text instead of driver-decoded values is
the difference the benchmarks measure. Each module holds one stage's statements (``claim``,
``publish``, ``attempt``, ``liveness``, ``probe``, ``reads``, ``runs``, ``limits``), and each
statement sits beside the function that runs it, headed by that function's name and one line
on what it does, with named parameters only (``%(name)s``) and, where the embedded default
needs a different text, its SQLite form in the same ``Statement``.

This module is the runner: which database a connection is (``dialect``) is decided here and
nowhere else, cursors are opened here and nowhere else, and rows come back decoded by column
name, as dictionaries or as the dataclass a caller names (``rows(..., into=Planned)``). A
third database is a third text in each ``Statement`` and a name in ``DIALECTS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections

T = TypeVar("T")
Params = Mapping[str, Any]

POSTGRESQL = "postgresql"
SQLITE = "sqlite"
#: The databases the ledger's statements are written for.
DIALECTS = (POSTGRESQL, SQLITE)
_CACHED = "_duecourse_dialect"


class NoForm(NotImplementedError):
    """A statement has no text for this connection's database."""


def dialect(using: str | Any = DEFAULT_DB_ALIAS) -> str:
    """Which database a connection is: ``"postgresql"``, ``"sqlite"`` or another.

    ``using`` is an alias of ``DATABASES`` or a connection itself (a ``connection_created``
    receiver is handed connections that no alias names). Asked once per connection object
    (each thread has its own), then remembered on it.
    """
    wrapper = connections[using] if isinstance(using, str) else using
    found = wrapper.__dict__.get(_CACHED)
    if found is None:
        found = str(wrapper.vendor)
        wrapper.__dict__[_CACHED] = found
    return found


def on_postgresql(using: str | Any = DEFAULT_DB_ALIAS) -> bool:
    return dialect(using) == POSTGRESQL


def on_sqlite(using: str | Any = DEFAULT_DB_ALIAS) -> bool:
    return dialect(using) == SQLITE


@dataclass(frozen=True)
class Statement:
    """One hand-written statement: its PostgreSQL text and, where it has one, its SQLite text."""

    postgresql: str
    sqlite: str | None = None

    @classmethod
    def portable(cls, text: str) -> Statement:
        """A statement whose one text runs as it is on every database the ledger supports."""
        return cls(postgresql=text, sqlite=text)

    def text(self, using: str = DEFAULT_DB_ALIAS) -> str:
        form = self.sqlite if dialect(using) == SQLITE else self.postgresql
        if form is None or dialect(using) not in DIALECTS:
            raise NoForm(f"this statement has no form for {dialect(using)}")
        return form


def _decoded(
    description: Any, found: list[tuple[Any, ...]], into: Callable[..., T] | None
) -> list[Any]:
    names = [column[0] for column in description]
    made = into or dict
    return [made(**dict(zip(names, values, strict=True))) for values in found]


def rows(
    statement: Statement,
    params: Params | None = None,
    *,
    into: Callable[..., T] | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> list[Any]:
    """Every row of ``statement``, each decoded by column name (a dict, or ``into(**row)``)."""
    with connections[using].cursor() as cursor:
        cursor.execute(statement.text(using), dict(params or {}))
        if cursor.description is None:
            return []
        return _decoded(cursor.description, cursor.fetchall(), into)


def row(
    statement: Statement,
    params: Params | None = None,
    *,
    into: Callable[..., T] | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> Any:
    """The first row of ``statement`` decoded by column name, or None."""
    with connections[using].cursor() as cursor:
        cursor.execute(statement.text(using), dict(params or {}))
        if cursor.description is None:
            return None
        first = cursor.fetchone()
        return None if first is None else _decoded(cursor.description, [first], into)[0]


def value(
    statement: Statement, params: Params | None = None, *, using: str = DEFAULT_DB_ALIAS
) -> Any:
    """The first column of the first row of ``statement``, or None."""
    with connections[using].cursor() as cursor:
        cursor.execute(statement.text(using), dict(params or {}))
        first = cursor.fetchone() if cursor.description is not None else None
        return None if first is None else first[0]


def execute(
    statement: Statement, params: Params | None = None, *, using: str = DEFAULT_DB_ALIAS
) -> int:
    """Run ``statement`` for its effect; the number of rows it changed."""
    with connections[using].cursor() as cursor:
        cursor.execute(statement.text(using), dict(params or {}))
        return int(cursor.rowcount)
