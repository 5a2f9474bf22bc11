"""The engine's ledger: the interface to the database, its engines, and the one runner.

The ORM writes much of the ledger; the stages reach all of it through the verbs of
``engine.Engine``, answered by one engine per database (``engines/``: PostgreSQL's named
statements, the ORM's forms for SQLite and any other). Hand-written SQL lives in named
``.sql`` files (``named``), where one round trip instead of several, a lock the ORM cannot
say, or text instead of driver-decoded values is the difference the benchmarks measure.

This module is the runner: cursors are opened here and nowhere else, rows come back decoded by
column name, as dictionaries or as the dataclass a caller names (``rows(..., into=Planned)``),
and a family of engines (``Engines``) asks which database a connection is (``dialect``) once
per connection. No code branches on the answer: a difference between databases is a verb of
an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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


class NoEngine(NotImplementedError):
    """No engine of a family answers for this connection's database."""


class Engines(Generic[T]):
    """A family of engines, one per database, each made once per connection and kept on it.

    ``Engines("scheduling", postgresql=PostgreSQLEngine, sqlite=SQLiteEngine)`` is called
    like ``engine(using)``: the one place a family asks which database a connection is. A
    database is one more name (``register``). Each maker is handed the connection's alias.
    """

    def __init__(self, family: str, **makers: Callable[[str], T]) -> None:
        self.family = family
        self.makers: dict[str, Callable[[str], T]] = dict(makers)
        self._cached = f"_duecourse_engine_{family}"

    def register(self, vendor: str, maker: Callable[[str], T]) -> None:
        """Answer for one more database (``connection.vendor``)."""
        self.makers[vendor] = maker

    def __call__(self, using: str | Any = DEFAULT_DB_ALIAS) -> T:
        """The engine of the connection ``using`` (an alias, or a connection itself, as a
        ``connection_created`` receiver is handed)."""
        wrapper = connections[using] if isinstance(using, str) else using
        found = wrapper.__dict__.get(self._cached)
        if found is None:
            vendor = dialect(wrapper)
            if vendor not in self.makers:
                raise NoEngine(f"no {self.family} engine for {vendor}")
            found = self.makers[vendor](wrapper.alias)
            wrapper.__dict__[self._cached] = found
        return found


@dataclass(frozen=True)
class Statement:
    """One hand-written statement: its PostgreSQL text and, where it has one, its SQLite text."""

    postgresql: str | None = None
    sqlite: str | None = None
    #: The names of its result's columns, in order, for the statements a tick or a task sends
    #: every time: their rows are decoded by these names without asking the driver for its
    #: description, which costs more than the rest of an idle tick's Python. The names are
    #: checked against the description the first time the statement runs in a process.
    columns: tuple[str, ...] = ()
    #: The one text, whatever the database: a statement an engine already chose for its own
    #: database (``named``), or one the same words run everywhere (``portable``).
    shared: str | None = None
    #: Its name in the ``.sql`` file it was loaded from (``ledger.named``), for errors and logs.
    name: str = ""

    @classmethod
    def portable(cls, text: str, columns: tuple[str, ...] = ()) -> Statement:
        """A statement whose one text runs as it is on every database the ledger supports."""
        return cls(shared=text, columns=columns)

    def text(self, using: str | Any = DEFAULT_DB_ALIAS) -> str:
        """This statement's text for the connection ``using`` (an alias or a connection)."""
        if self.shared is not None:
            return self.shared
        found = dialect(using)
        form = self.postgresql if found == POSTGRESQL else self.sqlite if found == SQLITE else None
        if form is None:
            raise NoForm(f"this statement has no form for {found}")
        return form


_CHECKED: set[int] = set()


class ColumnsDiffer(AssertionError):
    """A statement's declared ``columns`` are not the columns its text returns."""


def names_of(statement: Statement, cursor: Any) -> tuple[str, ...]:
    """The column names of ``statement``'s result on ``cursor``: declared (checked against the
    driver's description once per process), or described."""
    if statement.columns and id(statement) in _CHECKED:
        return statement.columns
    described = tuple(column[0] for column in cursor.description)
    if statement.columns:
        if described != statement.columns:
            raise ColumnsDiffer(f"declared {statement.columns}, returned {described}")
        _CHECKED.add(id(statement))
    return described


def _run(statement: Statement, params: Params | None, using: str) -> Any:
    """A cursor of the connection ``using`` that has run ``statement`` (close it after)."""
    wrapper = connections[using]
    cursor = wrapper.cursor()
    try:
        cursor.execute(statement.text(wrapper), params if params is not None else {})
    except BaseException:
        cursor.close()
        raise
    return cursor


def rows(
    statement: Statement,
    params: Params | None = None,
    *,
    into: Callable[..., T] | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> list[Any]:
    """Every row of ``statement``, each decoded by column name (a dict, or ``into(**row)``)."""
    with _run(statement, params, using) as cursor:
        if not statement.columns and cursor.description is None:
            return []
        names = names_of(statement, cursor)
        made = into or dict
        return [made(**dict(zip(names, values, strict=True))) for values in cursor.fetchall()]


def row(
    statement: Statement,
    params: Params | None = None,
    *,
    into: Callable[..., T] | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> Any:
    """The first row of ``statement`` decoded by column name, or None."""
    with _run(statement, params, using) as cursor:
        if not statement.columns and cursor.description is None:
            return None
        first = cursor.fetchone()
        if first is None:
            return None
        found = dict(zip(names_of(statement, cursor), first, strict=True))
        return found if into is None else into(**found)


def value(
    statement: Statement, params: Params | None = None, *, using: str = DEFAULT_DB_ALIAS
) -> Any:
    """The first column of the first row of ``statement``, or None."""
    with _run(statement, params, using) as cursor:
        first = cursor.fetchone() if cursor.description is not None else None
        return None if first is None else first[0]


def execute(
    statement: Statement, params: Params | None = None, *, using: str = DEFAULT_DB_ALIAS
) -> int:
    """Run ``statement`` for its effect; the number of rows it changed."""
    with _run(statement, params, using) as cursor:
        return int(cursor.rowcount)
