"""Times in templates as ``scheduling.timing.readable`` writes them, for the engine's pages and any
app's: ``{% load duecourse_times %}``.

- ``{{ moment|when }}``: "2026-11-25 11:35:07 EST (in 5 min)" in a ``<time>`` element (the
  admin's columns write times the same way, ``scheduling.pages.times.shown``);
- ``{{ moment|instant }}``: "2026-11-25 11:35:07 EST";
- ``{{ moment|ago }}``: "in 5 min", "3 h ago", a date beyond 30 days;
- ``{% times_caption %}``: "Times in America/New_York", once on a page.
"""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.safestring import SafeString

from scheduling.pages.times import shown
from scheduling.timing import readable

register = template.Library()


@register.filter
def ago(moment: datetime | None) -> str:
    """``{{ job.next_due_at|ago }}``: "in 12 s", "3 min ago"."""
    return readable.ago(moment, timezone.now())


@register.filter
def instant(moment: datetime | None) -> str:
    """``{{ execution.scheduled_for|instant }}``: "2030-01-31 04:00:05 EST"."""
    return readable.instant(moment)


@register.filter
def when(moment: datetime | None) -> SafeString | str:
    """``{{ execution.scheduled_for|when }}``: "2030-01-31 04:00:05 EST (in 3 min)"."""
    return shown(moment)


@register.simple_tag
def times_caption() -> str:
    """``{% times_caption %}``: "Times in America/New_York"."""
    return readable.caption()
