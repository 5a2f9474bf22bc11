"""Times in the engine's pages as ``scheduling.readable`` writes them: "12 s ago", "in 3 min"."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone

from scheduling import readable

register = template.Library()


@register.filter
def ago(moment: datetime | None) -> str:
    """``{{ job.next_due_at|ago }}``: "in 12 s", "3 min ago"."""
    return readable.ago(moment, timezone.now())


@register.filter
def instant(moment: datetime | None) -> str:
    """``{{ execution.scheduled_for|instant }}``: "2030-01-31 09:00:05 UTC"."""
    return readable.instant(moment)
