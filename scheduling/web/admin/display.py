"""How the admin shows things: status badges, a job's target in words, counts in sentences."""

from __future__ import annotations

from datetime import UTC

from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import ngettext

from scheduling import readable
from scheduling.changelists import breakable as breakable  # the lists' one rule for wrapping
from scheduling.models import Job
from scheduling.rules import tasktables
from scheduling.stages import pauses

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


def describe_target(job: Job) -> str:
    """What a job runs, as a person reads it: the task's name, or the task-table row by its
    own name ("SendEmailTask: invitation"), or why the row cannot be found."""
    if not job.task_table:
        return job.shown_task
    try:
        model = tasktables.get(job.task_table).model
    except LookupError:
        return f"{job.task_table} #{job.task_row_id} (not a task table)"
    row = model._default_manager.filter(pk=job.task_row_id).first()
    name = model._meta.verbose_name
    if row is None:
        return f"{name} #{job.task_row_id} (gone)"
    return f"{name}: {row}"


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
