"""What typed text may hold: names, addresses, subjects and notes are one line of plain text.

A control character in a name or a subject is never meant: it arrives from a pasted
spreadsheet cell or a crafted CSV, and then breaks a header, a log line or the database (a NUL
byte is refused by PostgreSQL with an error page). Each model's ``clean`` and the CSV import
refuse it with one sentence naming the character; bodies may hold line breaks and tabs.

Text the emailer writes itself from someone else's words (an SMTP server's reply, an error
message in a run's note) is made one line with ``one_line`` instead of being refused.
"""

from __future__ import annotations

import re

#: C0 controls, DEL and C1 controls, and the Unicode line and paragraph separators.
_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: The same, but for tab, line feed and carriage return (bodies are text over many lines).
_MULTILINE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029]")

_NAMES = {
    "\x00": "a NUL byte",
    "\t": "a tab",
    "\n": "a line break",
    "\r": "a carriage return",
    "\u2028": "a line separator (U+2028)",
    "\u2029": "a paragraph separator (U+2029)",
}


def control_character_error(value: str, *, multiline: bool = False) -> str:
    """Why ``value`` cannot be stored, or "": the first control character and where it is.

    ``multiline`` allows tab, line feed and carriage return (a body); otherwise the value is
    one line (a name, an address, a subject, a note).
    """
    found = (_MULTILINE if multiline else _ONE_LINE).search(value or "")
    if found is None:
        return ""
    char = found.group()
    what = _NAMES.get(char, f"the control character U+{ord(char):04X}")
    if not multiline and char in "\n\r\u2028\u2029":
        return f"must be one line: it holds {what} at character {found.start() + 1}"
    return f"holds {what} at character {found.start() + 1}; only printable text is taken"


def one_line(text: str, *, limit: int) -> str:
    """``text`` with each run of control characters and whitespace made one space, cut to
    ``limit`` characters: for reasons the emailer records from someone else's words."""
    flat = " ".join(_ONE_LINE.sub(" ", text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
