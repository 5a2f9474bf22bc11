"""The next occurrences of a job, or of a timing not yet saved: reads, never writes.

``jobs next``, ``scheduling.api.next_occurrences`` and the admin's preview come here; the
arithmetic is ``scheduling.timing.previews``. A job's occurrences count from its creation (the
anchor of intervals and of a calendar's ``INTERVAL``), as the claim counts them.
"""

from __future__ import annotations

from datetime import datetime

from scheduling.models import Job, Schedule
from scheduling.timing.previews import Preview, preview


def job_preview(job: Job, *, count: int, now: datetime) -> Preview:
    """The job's next ``count`` occurrences from ``now``, whatever its status (a paused job's
    timing is previewed as if it were resumed now)."""
    return preview(job.schedule.timing(), now=now, anchor=job.created_at, count=count)


def timing_preview(
    schedule: Schedule, *, count: int, now: datetime, anchor: datetime | None = None
) -> Preview:
    """The next ``count`` occurrences of an unsaved (already validated) schedule; ``anchor``
    is the creation of the job it is for (``now`` for a job still to be made)."""
    return preview(schedule.timing(), now=now, anchor=anchor or now, count=count)
