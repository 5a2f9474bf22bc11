"""Named statements: the ``.sql`` files an engine keeps its SQL in, read by name.

Each statement in such a file starts with a header, in procrastinate's manner
(``sql/queries.sql``)::

    -- name: lock_due
    -- Lock up to a batch of due jobs, planning the plain ones in the statement itself.
    -- columns: planned, at_bound, execution_id
    SELECT ...

``name`` is the verb's own name (a grep leads from the method to its text), the second line
says what the statement does, and ``columns`` (optional) declares the result's columns for the
statements a tick or a task sends every time (``Statement.columns``). Parameters are named
(``%(name)s``). Identifiers that vary are ``{placeholders}`` that the engine composes with the
driver's own quoting (``psycopg.sql.Identifier``), never formatted into the text here.
"""

from __future__ import annotations

import re
from importlib import resources
from types import MappingProxyType
from typing import Literal

from scheduling.ledger import Statement

_HEADER = re.compile(r"^-- name: (?P<name>[a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_COLUMNS = re.compile(r"^-- columns: (?P<columns>.+)$", re.MULTILINE)

Form = Literal["postgresql", "sqlite", "shared"]


class BadStatementFile(ValueError):
    """A ``.sql`` file whose statements cannot be read by name."""


def parse(text: str, *, form: Form, source: str = "") -> dict[str, Statement]:
    """Every statement of ``text`` by name, each as a ``Statement`` in the slot ``form``."""
    headers = list(_HEADER.finditer(text))
    if not headers:
        raise BadStatementFile(f"{source}: no '-- name:' header")
    preamble = text[: headers[0].start()].splitlines()
    if any(line.strip() and not line.startswith("--") for line in preamble):
        raise BadStatementFile(f"{source}: SQL before the first '-- name:' header")
    found: dict[str, Statement] = {}
    for header, following in zip(headers, [*headers[1:], None], strict=True):
        name = header["name"]
        body = text[header.end() : following.start() if following else len(text)]
        lines = body.strip("\n").splitlines()
        if not lines or not lines[0].startswith("-- ") or lines[0].startswith("-- columns:"):
            raise BadStatementFile(f"{source}: {name} has no line saying what it does")
        if name in found:
            raise BadStatementFile(f"{source}: {name} is named twice")
        rest = lines[1:]
        declared = _COLUMNS.match(rest[0]) if rest else None
        columns = tuple(c.strip() for c in declared["columns"].split(",")) if declared else ()
        sql = "\n".join(rest[1:] if declared else rest).strip()
        if not sql:
            raise BadStatementFile(f"{source}: {name} has no text")
        found[name] = Statement(columns=columns, name=name, **{form: sql})
    return found


def load(package: str, *files: str, form: Form) -> MappingProxyType[str, Statement]:
    """The statements of ``files`` (inside ``package``) by name, read once at import."""
    found: dict[str, Statement] = {}
    for file in files:
        text = resources.files(package).joinpath(file).read_text(encoding="utf-8")
        for name, statement in parse(text, form=form, source=file).items():
            if name in found:
                raise BadStatementFile(f"{file}: {name} is named in another file too")
            found[name] = statement
    return MappingProxyType(found)
