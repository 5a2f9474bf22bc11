"""History retention: delete old finished executions in small batches, keeping the latest.

The execution table grows by one row per occurrence forever unless something trims it. One
``DELETE ... WHERE scheduled_for < X`` over millions of rows would hold its locks and bloat the
table for minutes, so ``prune_history`` deletes a bounded batch per short transaction, walking
``execution_recent_idx`` from the oldest row forward. Only finished executions go (never a
pending, queued, retrying or running one), and the latest ``keep_last`` of every job stay
whatever their age, so a job that ran once a year still shows its last run.

The one-off jobs the engine made for a domain app on its own (``tasktables.internal_jobs``:
subscriptions' due batches) would otherwise pile up, one per batch: once such a job is
completed, its instant is older than the cutoff and nothing of it is unfinished, it goes with
its whole history (``finished_one_offs``) and its schedule.

The audit trail of jobs (``scheduling.stages.audit``) has a retention of its own,
``SCHEDULING_AUDIT_RETENTION`` (365 days by default; None keeps it forever): each run also
deletes the changes older than that, whatever ``older_than`` says of executions, and
``older_than`` never reaches the trail.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery

from scheduling import conf
from scheduling.ledger import partitions
from scheduling.ledger.engines import engine
from scheduling.models import (
    EXECUTION_FINISHED,
    Attempt,
    Execution,
    Job,
    JobStatus,
)
from scheduling.rules import tasktables
from scheduling.stages import audit
from scheduling.timing.schedules import MAX_DURATION_TEXT, ScheduleError, parse_duration

logger = logging.getLogger("scheduling")

_SHORT = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$", re.IGNORECASE)
#: The most executions one transaction deletes: a larger batch holds its locks for longer
#: than a short transaction should.
MAX_BATCH = 100_000
#: The most executions kept per job; what is kept is read with an OFFSET of this many rows.
MAX_KEEP_LAST = 1_000_000
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str, *, field: str = "older_than") -> timedelta:
    """``30d``, ``12h``, ``90m``, ``2w`` or an ISO-8601 duration such as ``P30D``."""
    short = _SHORT.match(text)
    if short:
        try:
            value = timedelta(**{_UNITS[short.group(2).lower()]: int(short.group(1))})
        except OverflowError:
            raise ValidationError({field: f"{text!r} is longer than any history"}) from None
        if value <= timedelta(0):
            raise ValidationError({field: f"{text!r} must be longer than zero"})
        return value
    try:
        return parse_duration(text, field=field)
    except ScheduleError as exc:
        # An ISO-8601 duration says what is wrong with it (too long, months); anything else
        # is not a duration at all.
        looks_iso = text.strip().upper().startswith("P") and len(text) <= MAX_DURATION_TEXT
        reason = exc.reason if looks_iso else f"{text!r} is not a duration such as 30d, 12h or P30D"
        raise ValidationError({field: reason}) from exc


@dataclass
class PruneReport:
    """What one pruning run removed (or, dry, would remove)."""

    cutoff: datetime
    keep_last: int
    executions: int = 0
    attempts: int = 0
    batches: int = 0
    finished: bool = True
    one_offs: int = 0
    #: Periods of the partitioned history dropped whole (PostgreSQL).
    periods: int = 0
    #: Rows of the audit trail older than ``SCHEDULING_AUDIT_RETENTION`` (None: kept forever).
    audit_changes: int = 0
    audit_retention: timedelta | None = None
    by_job: Counter[int | None] = field(default_factory=Counter)
    #: How long the run took, the whole periods apart (what an operator compares runs by).
    seconds: float = 0.0
    periods_seconds: float = 0.0

    def as_dict(self, names: dict[int, str]) -> dict[str, object]:
        return {
            "cutoff": self.cutoff.isoformat(),
            "keep_last": self.keep_last,
            "executions": self.executions,
            "attempts": self.attempts,
            "batches": self.batches,
            "finished": self.finished,
            "one_offs": self.one_offs,
            "periods_dropped": self.periods,
            "seconds": round(self.seconds, 3),
            "periods_seconds": round(self.periods_seconds, 3),
            "audit_changes": self.audit_changes,
            "audit_retention_days": (
                None
                if self.audit_retention is None
                else self.audit_retention.total_seconds() / 86_400
            ),
            "jobs": {
                (names.get(job_id, f"#{job_id}") if job_id else "(ad hoc)"): count
                for job_id, count in self.by_job.most_common()
            },
        }


def prunable(*, cutoff: datetime, keep_last: int) -> QuerySet[Execution]:
    """Finished executions due before ``cutoff`` that are not among their job's latest."""
    rows = Execution.objects.filter(scheduled_for__lt=cutoff, status__in=EXECUTION_FINISHED)
    if keep_last > 0:
        # The keep_last-th newest occurrence of the row's job, read backwards along the
        # unique (job, scheduled_for) index; NULL (nothing pruned) for a job with fewer.
        nth_newest = (
            Execution.objects.filter(job_id=OuterRef("job_id"))
            .order_by("-scheduled_for")
            .values("scheduled_for")[keep_last - 1 : keep_last]
        )
        rows = rows.filter(Q(job__isnull=True) | Q(scheduled_for__lt=Subquery(nth_newest)))
    return rows.exclude(
        pk__in=Job.objects.filter(current_execution__isnull=False).values("current_execution_id")
    )


def finished_one_offs(*, cutoff: datetime) -> QuerySet[Job]:
    """Internal one-off jobs that are done: completed, due before ``cutoff``, and with no
    execution that is unfinished or due since."""
    recent = Execution.objects.filter(job_id=OuterRef("pk")).filter(
        ~Q(status__in=EXECUTION_FINISHED) | Q(scheduled_for__gte=cutoff)
    )
    return Job.objects.filter(
        tasktables.internal_jobs(),
        status=JobStatus.COMPLETED,
        schedule__run_at__lt=cutoff,
        current_execution__isnull=True,
    ).exclude(Exists(recent))


def prune_history(
    *,
    older_than: timedelta,
    keep_last: int,
    now: datetime,
    batch_size: int = 1000,
    max_seconds: float | None = None,
    dry_run: bool = False,
    partitions_only: bool = False,
) -> PruneReport:
    """Delete prunable executions (and their attempts) one batch per transaction.

    On PostgreSQL's partitioned history, every period that ends before the cutoff goes first,
    whole (``drop_periods``); the batches then delete what is left before the cutoff (in the
    period the cutoff falls in, and in the default partition), unless ``partitions_only``.
    Stops when nothing is left, or before starting a batch once ``max_seconds`` have passed
    (``finished`` is then false; the next run goes on where this one stopped).
    """
    if keep_last < 0:
        raise ValidationError({"keep_last": "must be zero or more"})
    if keep_last > MAX_KEEP_LAST:
        raise ValidationError({"keep_last": f"must be at most {MAX_KEEP_LAST:,}"})
    if batch_size < 1:
        raise ValidationError({"batch_size": "must be at least 1"})
    if batch_size > MAX_BATCH:
        raise ValidationError({"batch_size": f"must be at most {MAX_BATCH:,}"})
    if max_seconds is not None and not 0 < max_seconds < math.inf:
        raise ValidationError({"max_seconds": "must be a positive number of seconds"})
    try:
        cutoff = now - older_than
    except OverflowError:
        raise ValidationError(
            {"older_than": f"{older_than.days} days reaches back before the year 1"}
        ) from None
    report = PruneReport(cutoff=cutoff, keep_last=keep_last)
    report.audit_retention = conf.get("AUDIT_RETENTION")
    rows = prunable(cutoff=report.cutoff, keep_last=keep_last)
    one_offs = finished_one_offs(cutoff=cutoff)
    if dry_run:
        if report.audit_retention is not None:
            report.audit_changes = audit.prune_trail(
                now=now, older_than=report.audit_retention, dry_run=True
            )
        report.one_offs = one_offs.count()
        for job_id, count in Counter(rows.values_list("job_id", flat=True).iterator()).items():
            report.by_job[job_id] = count
        report.executions = sum(report.by_job.values())
        report.attempts = Attempt.objects.filter(execution__in=rows).count()
        return report
    started = time.monotonic()
    if partitions.is_partitioned():
        drop_periods(report, cutoff=cutoff, keep_last=keep_last, started=started,
                     max_seconds=max_seconds)  # fmt: skip
        report.periods_seconds = time.monotonic() - started
    since: datetime | None = None
    while report.finished and not partitions_only:
        if max_seconds is not None and time.monotonic() - started > max_seconds:
            report.finished = False
            break
        page = rows if since is None else rows.filter(scheduled_for__gte=since)
        batch = list(
            page.order_by("scheduled_for").values_list("pk", "job_id", "scheduled_for")[:batch_size]
        )
        if not batch:
            break
        ids = [pk for pk, _, _ in batch]
        executions, attempts = engine().delete_history(ids)
        report.executions += executions
        report.attempts += attempts
        report.by_job.update(job_id for _, job_id, _ in batch)
        report.batches += 1
        since = batch[-1][2]
        if len(batch) < batch_size:
            break
    while report.finished:
        if max_seconds is not None and time.monotonic() - started > max_seconds:
            report.finished = False
            break
        ids = list(one_offs.order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not ids:
            break
        executions, attempts = engine().remove_jobs(ids)
        report.executions += executions
        report.attempts += attempts
        report.one_offs += len(ids)
        report.batches += 1
    if report.audit_retention is not None:
        # The trail last, within what is left of the same time budget.
        left = None if max_seconds is None else max_seconds - (time.monotonic() - started)
        report.audit_changes = audit.prune_trail(
            now=now,
            older_than=report.audit_retention,
            batch_size=batch_size,
            max_seconds=left,
        )
    report.seconds = time.monotonic() - started
    logger.info(
        "history.pruned executions=%s attempts=%s one_offs=%s audit_changes=%s batches=%s "
        "cutoff=%s keep_last=%s seconds=%.3f",
        report.executions,
        report.attempts,
        report.one_offs,
        report.audit_changes,
        report.batches,
        report.cutoff.isoformat(),
        keep_last,
        report.seconds,
    )
    return report


def drop_periods(
    report: PruneReport,
    *,
    cutoff: datetime,
    keep_last: int,
    started: float,
    max_seconds: float | None,
) -> None:
    """Drop every period of the partitioned history that ends before ``cutoff``, oldest first,
    keeping what ``prunable`` would keep (moved to the default partition)."""
    named = partitions.periods()
    due = [period for period in named if period.end <= cutoff]
    if not due:
        return
    nth: dict[int, datetime | None] = {}  # each job's keep-th newest, read once per prune
    for period in due:
        if max_seconds is not None and time.monotonic() - started > max_seconds:
            report.finished = False
            return
        dropped = partitions.drop_period(
            period,
            latest=lambda by_job, period=period: _latest(
                period, by_job, keep_last=keep_last, nth=nth, named=named
            ),
        )
        report.executions += dropped.executions
        report.attempts += dropped.attempts
        report.by_job.update(dropped.by_job)
        report.periods += 1


def _latest(
    period: partitions.Period,
    by_job: dict[int | None, int],
    *,
    keep_last: int,
    nth: dict[int, datetime | None],
    named: list[partitions.Period],
) -> partitions.Latest | None:
    """Which jobs' latest executions ``prunable`` keeps of ``period`` (whose executions by job
    are ``by_job``), each with its ``keep_last``-th newest occurrence; None when no job's
    latest can be in it. The period's unfinished executions and current runs are kept
    whatever this says (``partitions.drop_period``)."""
    if keep_last == 0:
        return None
    jobs = [job for job in by_job if job is not None]
    nth.update(
        partitions.nth_newest([job for job in jobs if job not in nth], keep=keep_last, within=named)
    )
    # Only a job whose keep-th newest is in or before the period (or that has fewer) can have
    # one of its latest in it: most jobs ran since, and are left out.
    latest = [(job, at) for job in jobs if (at := nth[job]) is None or at < period.end]
    if not latest:
        return None
    return partitions.Latest(jobs=[job for job, _ in latest], nth=[at for _, at in latest])


def job_names(job_ids: list[int | None]) -> dict[int, str]:
    return engine().job_names([i for i in job_ids if i is not None])
