"""The emailer's settings, each a Django setting named ``EMAILER_<NAME>`` with its default here.

A host project sets only what it changes; docs/install.md's settings table lists these. Read
when needed, never at import time, so tests and commands can override them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # The public address of the site, for the unsubscribe link in every message (https in
    # production); its host name also ends each Message-ID.
    "SITE_URL": "http://localhost:8000",
    # Participants claimed and recorded per chunk: also the most a crash can leave uncertain.
    "CHUNK_SIZE": 50,
    # Seconds between writes of a run's live counts.
    "PROGRESS_INTERVAL": 2.0,
    # "Try later" (SMTP 4xx) handling: first delay, longest delay (s), tries per message.
    "BACKOFF_BASE": 1.0,
    "BACKOFF_MAX": 60.0,
    "TRIES": 5,
}


def get(name: str) -> Any:
    """The value of ``EMAILER_<name>``, or its default."""
    return getattr(settings, f"EMAILER_{name}", DEFAULTS[name])


def site_url() -> str:
    return str(get("SITE_URL")).rstrip("/")
