"""What every page of the emailer's admin shares: the engine's stylesheet, times as the
engine shows them, a run in a few words, a refusal's reasons in one line.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.utils.html import format_html

from emailer.models import SendEmailHistory
from scheduling.api import ADMIN_STYLESHEET, shown_time


class EngineStyles:
    """Every page here loads the engine's admin stylesheet: badges, and lists that fit their
    box with Django's navigation sidebar open (``scheduling.api.ADMIN_STYLESHEET``)."""

    css = {"all": (ADMIN_STYLESHEET,)}


def shown(moment: Any) -> str:
    """A time as the engine's pages show it: the instant to the second, its zone named, and
    the time from now beside it (``scheduling.api.shown_time``)."""
    return shown_time(moment)


def outcome(history: SendEmailHistory | None) -> str:
    """A run in a few words: "completed 12 s ago: 3 sent, 1 failed"."""
    if history is None:
        return "never"
    counts = [
        f"{value} {name}"
        for name in ("sent", "failed", "uncertain", "deferred")
        if (value := getattr(history, name))
    ]
    runs = f" ({history.runs} runs)" if history.runs > 1 else ""
    when = history.last_batch_start_time or history.scheduled_batch_start_time
    return format_html(
        "{}{} {}{}",
        history.status,
        runs,
        shown(when),
        f": {', '.join(counts)}" if counts else "",
    )


def reasons(exc: ValidationError) -> str:
    return "; ".join(f"{field}: {' '.join(why)}" for field, why in exc.message_dict.items())
