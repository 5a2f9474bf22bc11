"""How the admin shows things: status badges, who paused a job, counts in sentences.

A job's target in words is ``selectors.describe_target``, shared with the command line."""

from __future__ import annotations

from datetime import UTC

from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import ngettext

from scheduling.models import Job
from scheduling.pages.changelists import breakable as breakable  # the lists' one rule for wrapping
from scheduling.stages import pauses
from scheduling.timing import readable

#: Badges with a colour of their own in ``scheduling/duecourse.css``; any other is grey.
BADGE_KINDS = frozenset(
    {
        "active",
        "failing",
        "late",
        "completed",
        "failed",
        "retry",
        "running",
        "skipped",
        "superseded",
        "cancelled",
    }
)


def badge(text: str, *, title: str = "") -> str:
    """A status as a coloured badge: a class, never a ``style`` attribute, so the page needs no
    inline style under its Content-Security-Policy."""
    kind = text if text in BADGE_KINDS else "other"
    return format_html(
        '<span class="duecourse-badge duecourse-badge-{}" title="{}">{}</span>', kind, title, text
    )




def pause_note(job: Job) -> str:
    """Who or what paused a job, and when where recorded, under its status: "by alice, 3 h
    ago" (the exact instant on hover), "by its failure counter", "removed from code"."""
    words = breakable(pauses.paused_by(job) or "")  # a username may be a long address
    since = pauses.paused_since(job)
    if since is None:
        return format_html('<span class="duecourse-pause-origin">{}</span>', words)
    return format_html(
        '<span class="duecourse-pause-origin">{}, <time datetime="{}" title="{}">{}</time></span>',
        words,
        since.astimezone(UTC).isoformat(timespec="seconds"),
        readable.instant(since),
        readable.ago(since, timezone.now()),
    )


def say(count: int, singular: str, plural: str) -> str:
    """An action's count in a sentence, singular or plural as ``count`` says."""
    return ngettext(singular, plural, count) % {"count": count}
