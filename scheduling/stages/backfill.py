"""Backfill: make the past occurrences of a job that the ledger does not hold, once each.

An operator who paused a job through an outage, or who adds a job whose work should have run
since last month, asks for the occurrences of ``[start, end)``: the nominal instants of the
job's own timing (``FiringRule.next_after``, so its window, cron's rules at a change of the
clocks and the interval's anchor are the claim's), each due at its time plus the job's
jitter (``schedules.due_time``, as the claim computes it). Every instant the ledger does not
hold yet gets an execution row under the one-per-occurrence key; one that exists (run by the
scheduler, or by an earlier backfill) is left alone, so a second identical backfill makes
none, and two at once make each occurrence once (``ledger.backfill.insert_waiting``).

The rows are written WAITING, the state of a run that waits for a running slot, and nothing
is published here: the scheduler releases waiting rows oldest first as the job's limits allow
(``limits.release_waiting``: ``max_running``, the owner's limit, and for ``overlap=forbid``
one run of the job at a time, taken as its ``current_execution`` so that the job's own next
occurrence waits for it as for any of its runs), then publishes them like any other PENDING
execution. There is no second way to dispatch.

What it refuses, each naming the field: an instant without an offset, a ``start`` before
``EARLIEST`` (the Unix epoch: no job ran earlier, and a walk from the calendar's first day
would step past its edge), ``end`` not after ``start``, ``end`` later than ``now``
(occurrences from now on are the scheduler's to claim, so a backfill never races the claim
for them), a range holding more occurrences than
``SCHEDULING_BACKFILL_MAX`` (counted without listing more than one past the cap), a schedule
or target that cannot run. An occurrence in the range whose jittered due time is still ahead
of ``now`` is left to the scheduler too, and counted as not yet due.

A backfill that made any occurrence is a row of the job's audit trail (``backfilled``: the
range, how many were made, the first and the last; by whoever asked), written in the
transaction that makes them; a dry run, or one that found every occurrence held, writes none.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from scheduling import conf
from scheduling.ledger.engines import engine
from scheduling.models import Job, JobChangeAction
from scheduling.rules.validation import target_error
from scheduling.stages import audit
from scheduling.timing import ranges, readable, schedules
from scheduling.timing.schedules import ScheduleError, require_aware

logger = logging.getLogger("scheduling")

#: ``last_error`` of a backfilled row until the scheduler releases it.
BACKFILLED = "waiting: backfilled; runs as the job's overlap policy and running limits allow"
SETTING = "SCHEDULING_BACKFILL_MAX"
#: The earliest instant a backfill reaches back to: the Unix epoch.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class BackfillResult:
    """What one backfill made (or, on a dry run, would make).

    ``instants`` are the occurrences made (would be made), oldest first; ``held`` those of
    the range the ledger already had; ``not_due`` those whose jittered due time is still
    ahead, left to the scheduler.
    """

    job_id: int
    job: str
    owner: str
    start: datetime
    end: datetime
    dry_run: bool
    instants: tuple[datetime, ...]
    held: int
    not_due: int

    @property
    def count(self) -> int:
        return len(self.instants)

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON values, instants as ISO-8601 in UTC."""
        return {
            "job": self.job,
            "owner": self.owner,
            "from": self.start.isoformat(),
            "to": self.end.isoformat(),
            "dry_run": self.dry_run,
            "made": 0 if self.dry_run else self.count,
            "would_make": self.count if self.dry_run else 0,
            "already_held": self.held,
            "not_yet_due": self.not_due,
            "instants": [at.isoformat() for at in self.instants],
        }


def check_range(*, start: Any, end: Any, now: datetime) -> tuple[datetime, datetime]:
    """``start`` and ``end`` in UTC, or ValidationError naming ``start`` or ``end``."""
    errors: dict[str, str] = {}
    found: dict[str, datetime] = {}
    for name, value in (("start", start), ("end", end)):
        try:
            found[name] = require_aware(value, field=name)
        except ScheduleError as exc:
            errors[name] = exc.reason
    if errors:
        raise ValidationError(errors)
    start, end = found["start"], found["end"]
    if end > now:
        raise ValidationError(
            {
                "end": f"{readable.typed(end)} is after now ({readable.instant(now)}); "
                "occurrences from now on are the scheduler's, so a backfill ends at now at the "
                "latest"
            }
        )
    if start < EARLIEST:
        raise ValidationError(
            {
                "start": f"{readable.typed(start)} is before {EARLIEST.isoformat()}; a backfill "
                "reaches back to the Unix epoch at the earliest, and ends at now at the latest"
            }
        )
    if start >= end:
        raise ValidationError(
            {"start": f"{readable.typed(start)} is not before the end {readable.typed(end)}"}
        )
    return start, end


def too_many(*, counted: int | None, cap: int) -> str:
    """The refusal of a range over the cap; ``counted`` None when only "more than" is known."""
    count = f"{counted:,}" if counted is not None else f"more than {cap:,}"
    return f"{count} occurrences exceed {SETTING} ({cap:,}); narrow the range or raise the setting"


def backfill_job(
    *,
    job: Job,
    start: datetime,
    end: datetime,
    now: datetime,
    dry_run: bool = False,
    by: audit.Actor | None = None,
) -> BackfillResult:
    """Make the job's occurrences in ``[start, end)`` the ledger does not hold, WAITING for
    the scheduler to release them (module docstring); with ``dry_run``, only say which.
    ``by`` is who asked, for the audit trail (code when None)."""
    start, end = check_range(start=start, end=end, now=now)
    try:
        timing = job.schedule.timing()
    except ScheduleError as exc:
        raise ValidationError({"schedule": f"{exc}; fix it before backfilling"}) from None
    refused = target_error(task=job.task, task_table=job.task_table, task_row_id=job.task_row_id)
    if refused:
        raise ValidationError({"task": refused})
    cap = conf.get("BACKFILL_MAX")
    anchor = ranges.grid_anchor(timing, anchor=job.created_at, start=start)
    found = ranges.occurrences_in(timing, anchor=anchor, start=start, end=end, limit=cap)
    if len(found) > cap:
        counted = ranges.count_interval(timing, anchor=anchor, start=start, end=end)
        raise ValidationError({"range": too_many(counted=counted, cap=cap)})
    due = [at for at in found if schedules.due_time(job.pk, at, job.jitter) <= now]
    if dry_run:
        held = engine().held_instants(job_id=job.pk, instants=due)
        instants = [at for at in due if at not in held]
    else:
        with transaction.atomic():
            instants = engine().insert_waiting(
                job_id=job.pk, task=job.task, instants=due, reason=BACKFILLED, now=now
            )
            if instants:
                audit.record(
                    job=job,
                    action=JobChangeAction.BACKFILLED,
                    by=by or audit.CODE,
                    now=now,
                    changes={
                        "start": {"from": None, "to": audit.as_json(start)},
                        "end": {"from": None, "to": audit.as_json(end)},
                        "occurrences": {"from": None, "to": len(instants)},
                        "first": {"from": None, "to": audit.as_json(instants[0])},
                        "last": {"from": None, "to": audit.as_json(instants[-1])},
                    },
                )
        logger.info(
            "job.backfilled job=%s made=%s held=%s not_due=%s start=%s end=%s",
            job.pk,
            len(instants),
            len(due) - len(instants),
            len(found) - len(due),
            start.isoformat(),
            end.isoformat(),
        )
    return BackfillResult(
        job_id=job.pk,
        job=job.name,
        owner=job.owner.get_username(),
        start=start,
        end=end,
        dry_run=dry_run,
        instants=tuple(instants),
        held=len(due) - len(instants),
        not_due=len(found) - len(due),
    )
