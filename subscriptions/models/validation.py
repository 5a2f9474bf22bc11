"""The rules every model's fields share: plain text in names, notes and reasons, and
instants that carry a time zone.

Their own module because subscriptions, jobs, orders and the test gateway all apply them (and
the migrations name ``validate_plain_text`` as a field validator).
"""

from __future__ import annotations

import unicodedata
from datetime import datetime

from django.core.exceptions import ValidationError
from django.utils import timezone

#: Line and paragraph separators, and the bidirectional embeddings, overrides and isolates that
#: make a name read on screen in another order than it is stored.
_INVISIBLE_CONTROLS = frozenset(
    "\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
#: Unicode categories no name, note or reason holds: control characters (NUL, escape, tab,
#: newline, DEL, the C1 range) and lone surrogates (not text at all: bytes read in the wrong
#: encoding, which no database column can store).
_CONTROL_CATEGORIES = frozenset({"Cc", "Cs"})


def _control_character(value: str) -> tuple[int, str] | None:
    for index, char in enumerate(value):
        if char in _INVISIBLE_CONTROLS or unicodedata.category(char) in _CONTROL_CATEGORIES:
            return index, char
    return None


def validate_plain_text(value: str) -> None:
    """Names and notes are one line of plain text: no control characters.

    A NUL cannot be stored at all (PostgreSQL refuses it), a lone surrogate cannot be encoded,
    and the others (an escape sequence, a newline, a right-to-left override) would break the
    one-line command output and logs, or show an operator something other than what is stored.
    """
    found = _control_character(value or "")
    if found is not None:
        index, char = found
        raise ValidationError(
            f"holds the control character U+{ord(char):04X} at position {index + 1}; names and "
            "notes are one line of plain text"
        )


def one_line(text: str, *, limit: int) -> str:
    """A reason written by the app itself (an exception's message, the gateway's reply) as it
    is stored and shown: one line, control characters dropped, at most ``limit`` characters."""
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if char.isspace() or category == "Cc":
            kept.append(" ")  # a newline, a tab, an escape: a word break at most
        elif char not in _INVISIBLE_CONTROLS and category != "Cs":
            kept.append(char)
    line = " ".join("".join(kept).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def check_aware(value: datetime | None, field: str, errors: dict[str, str]) -> None:
    """Record in ``errors`` that ``field`` holds a naive instant: every instant the app
    stores or computes periods from is aware, so a naive one is refused, never guessed at."""
    if value is not None and timezone.is_naive(value):
        errors[field] = "must carry a time zone offset, such as 2030-01-31T09:00:00Z"
