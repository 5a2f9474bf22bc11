"""A job operated: paused, resumed, run now; its executions cancelled or retried by hand.

The admin's actions, the command line and ``scheduling.api`` come here, each verb taking the
job (or the execution's id) and ``by`` (who, for the audit trail; code when None). The stage
decides what the job's or execution's new state is and writes its row of the trail in the
same transaction; the ledger's engine locks the rows and writes the state (``pause_job``,
``lock_job``, ``resume_job``, ``add_occurrence``, ``lock_execution``,
``retry_failed_execution``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction

from scheduling.ledger.engines import engine
from scheduling.models import (
    EXECUTION_UNFINISHED,
    Execution,
    ExecutionStatus,
    Job,
    JobChangeAction,
    JobStatus,
    PauseKind,
)
from scheduling.rules.validation import check_reason, check_target
from scheduling.stages import attempts, audit
from scheduling.stages.audit import Actor
from scheduling.stages.jobs import plan_from

logger = logging.getLogger("scheduling")


def pause_job(*, job: Job, now: datetime, reason: str = "", by: Actor | None = None) -> bool:
    """Stop an active job from firing, with a reason shown until it is resumed.

    The reason is refused (ValidationError on ``reason``) when it cannot be stored as one line:
    it goes into the log as ``job.paused … reason=…``. The pause is a person's or code's
    (``PauseKind.MANUAL``), recorded in the audit trail with ``by`` (code when None).
    """
    check_reason(reason)
    with transaction.atomic():
        changed = engine().pause_job(job.pk, reason=reason, kind=PauseKind.MANUAL, now=now)
        if changed:
            audit.paused(
                job=job,
                by=by or audit.CODE,
                now=now,
                reason=reason,
                before=job.pause_reason,
                kind=PauseKind.MANUAL.value,
            )
    if changed:
        logger.info("job.paused job=%s reason=%s", job.pk, reason or "-")
    return bool(changed)


def resume_job(*, job: Job, now: datetime, by: Actor | None = None) -> bool:
    """Make a paused job active again; its misfire policy decides what the pause missed.

    Its count of failed occurrences in a row starts again from zero (``stages.failures``),
    whoever paused it; the resume is recorded in the audit trail with ``by`` (code when None).
    """
    with transaction.atomic():
        locked = engine().lock_job(job.pk, status=JobStatus.PAUSED)
        if locked is None:
            return False
        reason, kind, failed = locked.pause_reason, locked.pause_kind, locked.consecutive_failures
        locked.status = JobStatus.ACTIVE
        locked.pause_reason = ""
        locked.pause_kind = PauseKind.NONE
        locked.consecutive_failures = 0
        if locked.next_occurrence_at is None:
            plan_from(locked, locked.schedule.timing(), now=now)
        engine().resume_job(locked)
        changes = {
            "status": {"from": JobStatus.PAUSED.value, "to": JobStatus.ACTIVE.value},
            "pause_reason": {"from": reason, "to": ""},
            "pause_kind": {"from": kind, "to": PauseKind.NONE.value},
        }
        if failed:
            changes["consecutive_failures"] = {"from": failed, "to": 0}
        audit.record(
            job=locked,
            action=JobChangeAction.RESUMED,
            by=by or audit.CODE,
            now=now,
            changes=changes,
        )
    logger.info("job.resumed job=%s next_due_at=%s", job.pk, locked.next_due_at)
    job.refresh_from_db()
    return True


def run_job_now(*, job: Job, now: datetime, by: Actor | None = None) -> Execution:
    """Create one extra occurrence at ``now``, PENDING like a claimed one, with its row of
    the trail (``run_now``, by ``by``; code when None).

    The caller publishes it after the commit (``scheduling.api.run_now``); if that fails, the
    scheduler publishes it once the pending grace has passed, as after any claim.
    """
    check_target(job)
    with transaction.atomic():
        execution = engine().add_occurrence(job, scheduled_for=now, now=now)
        audit.execution_changed(
            job_id=job.pk,
            job_name=job.name,
            execution_id=execution.pk,
            action=JobChangeAction.RAN_NOW,
            before=None,
            after=ExecutionStatus.PENDING.value,
            by=by or audit.CODE,
            now=now,
        )
    logger.info("job.run_now job=%s execution=%s", job.pk, execution.pk)
    return execution


def cancel_job(*, job_id: int, now: datetime, reason: str, by: Actor | None = None) -> int:
    """Cancel every unfinished execution of the job (``cancel_execution``, each with its row
    of the trail by ``by``, code when None).

    Taken by id: only the executions are touched, and a job that is gone has none left to
    cancel (0). The reason becomes each execution's ``last_error`` and a log line: it must be
    one line of printable text (ValidationError on ``reason`` otherwise).
    """
    check_reason(reason)
    ids = Execution.objects.filter(job_id=job_id, status__in=EXECUTION_UNFINISHED).values_list(
        "pk", flat=True
    )
    return sum(cancel_execution(execution_id=i, now=now, reason=reason, by=by) for i in list(ids))


def cancel_execution(
    *, execution_id: int, now: datetime, reason: str, by: Actor | None = None
) -> bool:
    """A person's or code's cancel of one unfinished execution (``attempts.cancel_execution``),
    with its row of the trail (``cancelled``: the execution's status from and to, and the
    reason; by ``by``, code when None) in the same transaction; False when it was not
    unfinished. A Django task run (no job) has no trail.

    The row is locked first, as ``attempts.cancel_execution`` locks it, so the status
    recorded is the one it had when it was cancelled.
    """
    check_reason(reason)
    with transaction.atomic():
        found = engine().lock_execution(execution_id, statuses=EXECUTION_UNFINISHED)
        if found is None:
            return False
        status, job_id = found.status, found.job_id
        if not attempts.cancel_execution(execution_id=execution_id, now=now, reason=reason):
            return False
        _execution_changed(
            job_id=job_id,
            execution_id=execution_id,
            action=JobChangeAction.CANCELLED,
            before=status,
            after=ExecutionStatus.CANCELLED.value,
            by=by,
            now=now,
            reason=reason,
        )
    return True


def _execution_changed(*, job_id: int | None, by: Actor | None, **values: Any) -> None:
    """``audit.execution_changed`` for an execution of a job (none for a Django task run)."""
    if job_id is None:
        return
    name = Job.objects.filter(pk=job_id).values_list("name", flat=True).first()
    if name is not None:
        audit.execution_changed(job_id=job_id, job_name=name, by=by or audit.CODE, **values)


def retry_execution(*, execution_id: int, now: datetime, by: Actor | None = None) -> bool:
    """Give a failed execution of a job one more attempt; False when it is not failed.

    The row goes back to RETRY, due now, so the scheduler's next tick publishes it like any
    retry; its attempts so far stay in its history and the next one is numbered after them.
    The retry is a row of the job's trail (``retried``, by ``by``; code when None), written
    in the same transaction.
    """
    with transaction.atomic():
        changed = engine().retry_failed_execution(execution_id, now=now)
        if changed:
            _execution_changed(
                job_id=Execution.objects.filter(pk=execution_id)
                .values_list("job_id", flat=True)
                .first(),
                execution_id=execution_id,
                action=JobChangeAction.RETRIED,
                before=ExecutionStatus.FAILED.value,
                after=ExecutionStatus.RETRY.value,
                by=by,
                now=now,
            )
    if changed:
        logger.info("execution.retried execution=%s by=hand", execution_id)
    return bool(changed)


def retry_failed(
    *, job: Job, now: datetime, since: datetime | None = None, by: Actor | None = None
) -> int:
    """``retry_execution`` for each failed execution of the job (due since ``since``)."""
    rows = Execution.objects.filter(job=job, status=ExecutionStatus.FAILED)
    if since is not None:
        rows = rows.filter(scheduled_for__gte=since)
    ids = list(rows.values_list("pk", flat=True))
    return sum(retry_execution(execution_id=pk, now=now, by=by) for pk in ids)
