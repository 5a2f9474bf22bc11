"""Why a job is paused, and when it is next due, as every reader shows it: the admin's list and
page, the dashboard and ``manage.py jobs``.

A paused job is not due. Its ``next_due_at`` keeps the occurrence that was due when it paused,
for the misfire policy to judge on resume, so it soon lies in the past; a reader that printed
it would show a "next due" that never comes. ``next_due`` answers None for it, and
``not_due_word`` says what to show instead ("paused").

A job is paused by one of four hands, told apart by what the pause stored:

- a person, or code through ``scheduling.api`` (``pause_kind`` ``manual``): who, and when, are
  the audit trail's latest ``paused`` row (``with_pauses`` reads them for a whole page at once);
- its failure counter (``pause_kind`` ``failures``, ``scheduling.stages.failures``);
- the code that declared it, when the declaration disappeared (a ``manual`` pause of a declared
  job whose fingerprint the reconciliation emptied, ``scheduling.stages.declarations``);
- the scheduler, for a row it could not plan (``pause_kind`` empty), and among those a calendar
  whose next occurrence could not be found within the timing budget.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from django.db.models import Case, CharField, DateTimeField, OuterRef, QuerySet, Subquery, When

from scheduling.models import Job, JobChange, JobChangeAction, JobStatus, PauseKind

#: Words of the scheduler's pause reason when a calendar exceeded the timing budget
#: (``scheduling.timing.schedules.OverTimingBudget``).
_OVER_BUDGET = "timing budget"


class Planned(Protocol):
    """A job's row, or its plain values (``scheduling.stages.jobs.JobInfo``)."""

    @property
    def status(self) -> str: ...

    @property
    def next_due_at(self) -> datetime | None: ...


def next_due(job: Planned) -> datetime | None:
    """When the job fires next: its ``next_due_at`` while it is active; None for a paused job
    (not due until resumed) and a completed one (nothing left)."""
    return job.next_due_at if job.status == JobStatus.ACTIVE else None


def not_due_word(job: Planned) -> str:
    """What a reader shows in place of a next due time ``next_due`` does not give: the status
    of a job that is not active ("paused", "completed"), else "-"."""
    return "-" if job.status == JobStatus.ACTIVE else str(job.status)


def with_pauses(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """``jobs`` with who paused each paused one and when (``paused_by``, ``paused_at``): the
    audit trail's latest ``paused`` row, read only for paused jobs (the trail's ``(job, at)``
    index answers each)."""
    latest = JobChange.objects.filter(job=OuterRef("pk"), action=JobChangeAction.PAUSED).order_by(
        "-at"
    )
    paused = JobStatus.PAUSED
    return jobs.annotate(
        paused_by=Case(
            When(status=paused, then=Subquery(latest.values("who")[:1])),
            default=None,
            output_field=CharField(),
        ),
        paused_at=Case(
            When(status=paused, then=Subquery(latest.values("at")[:1])),
            default=None,
            output_field=DateTimeField(),
        ),
    )


def paused_by(job: Job) -> str | None:
    """Who or what paused the job, in words, or None when it is not paused: "by alice", "by
    its failure counter", "removed from code", "by the timing budget", "by the scheduler".

    A person's name comes from ``with_pauses``; without it (the trail pruned, or a job read
    without it) a manual pause reads "by a person or code".
    """
    if job.status != JobStatus.PAUSED:
        return None
    if job.pause_kind == PauseKind.FAILURES:
        return "by its failure counter"
    if job.pause_kind == PauseKind.NONE:
        return "by the timing budget" if _OVER_BUDGET in job.pause_reason else "by the scheduler"
    if job.declared_in and not job.declared_fingerprint:
        return "removed from code"
    who = getattr(job, "paused_by", None)
    return f"by {who}" if who else "by a person or code"


def paused_since(job: Job) -> datetime | None:
    """When the job was paused, where the audit trail recorded it (``with_pauses``)."""
    return getattr(job, "paused_at", None) if job.status == JobStatus.PAUSED else None
