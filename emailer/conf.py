"""The emailer's settings, each a Django setting named ``EMAILER_<NAME>`` with its default here.

A host project sets only what it changes; docs/install.md's settings table lists these with
the range each accepts. Read when needed, never at import time, so tests and commands can
override them.

Every setting has a type and a range, written once in ``SETTINGS``: the system checks
(``emailer/checks.py``) report a value outside it as an error naming the setting and the
range, so ``manage.py check`` (and ``runserver``, ``migrate``) refuse a value that would
otherwise surface as an error page or a failed run; ``get`` applies the same rule when a value
is read, so a process started without the checks fails with the same sentence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class Setting:
    """One ``EMAILER_*`` setting: its default, what kind of value it takes, and its range."""

    name: str
    default: Any
    #: "int" (a whole number), "float" (any finite number) or "url" (an http(s) address).
    kind: str
    low: float = 0
    high: float = 0
    #: The system check id that reports a bad value of this setting.
    check_id: str = ""

    @property
    def setting(self) -> str:
        return f"EMAILER_{self.name}"

    def accepted(self) -> str:
        """The accepted values in words: "a whole number from 1 to 10,000"."""
        if self.kind == "url":
            return "an http or https address with a host name, such as https://example.org"
        what = "a whole number" if self.kind == "int" else "a number"
        return f"{what} from {_number(self.low)} to {_number(self.high)}"

    def problem(self, value: Any) -> str:
        """Why ``value`` cannot be this setting, or "" when it can."""
        if self.kind == "url":
            if not isinstance(value, str):
                return f"{self.setting} is {value!r}: it must be {self.accepted()}"
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or (
                parts.fragment
            ):
                return f"{self.setting} is {value!r}: it must be {self.accepted()}"
            return ""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{self.setting} is {value!r}: it must be {self.accepted()}"
        if self.kind == "int" and not isinstance(value, int):
            return f"{self.setting} is {value!r}: it must be {self.accepted()}"
        if not math.isfinite(value) or not self.low <= value <= self.high:
            return f"{self.setting} is {value!r}: it must be {self.accepted()}"
        return ""


def _number(value: float) -> str:
    return f"{value:,}" if float(value).is_integer() and abs(value) >= 1 else f"{value:g}"


MiB = 1024 * 1024

SETTINGS: tuple[Setting, ...] = (
    # The public address of the site, for the unsubscribe link in every message (https in
    # production); its host name also ends each Message-ID.
    Setting("SITE_URL", "http://localhost:8000", "url", check_id="emailer.E001"),
    # Participants claimed and recorded per chunk: also the most a crash can leave uncertain.
    Setting("CHUNK_SIZE", 50, "int", 1, 10_000, "emailer.E002"),
    # Seconds between writes of a run's live counts (0: after every chunk). Keep it well under
    # the engine's SCHEDULING_STALE_AFTER.
    Setting("PROGRESS_INTERVAL", 2.0, "float", 0, 60, "emailer.E003"),
    # "Try later" (SMTP 4xx) handling: first delay, longest delay (s), tries per message.
    Setting("BACKOFF_BASE", 1.0, "float", 0.001, 3600, "emailer.E004"),
    Setting("BACKOFF_MAX", 60.0, "float", 0.001, 86_400, "emailer.E005"),
    Setting("TRIES", 5, "int", 1, 100, "emailer.E006"),
    # What a task's template may be (checked when it is saved): its length in characters, and
    # how deep for loops may nest (emailer/sandbox.py).
    Setting("TEMPLATE_MAX_LENGTH", 100_000, "int", 1_000, 1_000_000, "emailer.E007"),
    Setting("TEMPLATE_MAX_LOOP_DEPTH", 2, "int", 0, 5, "emailer.E008"),
    # What rendering one part of one message may cost: characters produced (every literal,
    # value and filter result, each time round a loop), times round for loops, seconds.
    Setting("RENDER_MAX_CHARS", 1_000_000, "int", 10_000, 50_000_000, "emailer.E009"),
    Setting("RENDER_MAX_LOOPS", 10_000, "int", 0, 1_000_000, "emailer.E010"),
    Setting("RENDER_TIMEOUT", 1.0, "float", 0.01, 60, "emailer.E011"),
    # A participants CSV: its size in bytes and its number of participant rows.
    Setting("IMPORT_MAX_BYTES", 10 * MiB, "int", 1024, 1024 * MiB, "emailer.E012"),
    Setting("IMPORT_MAX_ROWS", 100_000, "int", 1, 10_000_000, "emailer.E013"),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}

#: Each setting's default, by name without the prefix.
DEFAULTS: dict[str, Any] = {s.name: s.default for s in SETTINGS}


def raw(name: str) -> Any:
    """The value of ``EMAILER_<name>`` as set, or its default; unchecked (for the checks)."""
    return getattr(settings, f"EMAILER_{name}", DEFAULTS[name])


def get(name: str) -> Any:
    """The value of ``EMAILER_<name>``, or its default; ``ImproperlyConfigured`` out of range."""
    value = raw(name)
    problem = BY_NAME[name].problem(value)
    if problem:
        raise ImproperlyConfigured(problem)
    return value


def site_url() -> str:
    return str(get("SITE_URL")).rstrip("/")
