"""Pause after failures: a job that failed ``pause_after_failures`` occurrences in a row
pauses itself, saying how many and the last error.

What counts as a failed occurrence: an execution of the job that reaches FAILED through
``attempts.fail_attempt``, its retries spent or its error permanent. That one door covers an
error the task raised, a timeout, an attempt lost with its worker and found by the reaper
(``liveness.reap_execution``), and a message the publisher refused to send
(``publishing.reclaim_for_publish``); and the other door, an occurrence the claim writes
FAILED because it refuses its target or arguments (``claims._write``, in the claim's
transaction). An attempt that is retried is not a failure yet; an occurrence SKIPPED
(misfire, ``expires``) or CANCELLED by a person counts neither way; a COMPLETED one sets the
count back to zero (``Engine.complete_attempt``, in the statement that completes it), and so
does resuming the job (``controls.resume_job``).

The count is kept in the ledger, in the transaction that fails the execution: one
``UPDATE … SET consecutive_failures = consecutive_failures + 1`` takes the job's row lock, so
two executions of one job failing at once (``overlap=allow``) are counted one after the other,
never both from the same value. The pause is a compare-and-set from ACTIVE, written with its
row of the audit trail (by ``system``, source ``system``, with the reason and
``pause_kind`` ``failures``; a person's pause says ``manual``) in the same transaction; a job
already paused by a person keeps that pause and its reason.
"""

from __future__ import annotations

import logging
from datetime import datetime

from scheduling.ledger.engines import engine
from scheduling.messages.errors import MAX_ERROR, headline
from scheduling.models import Job, JobStatus, PauseKind
from scheduling.stages import audit

logger = logging.getLogger("scheduling")

#: What ``Job.pause_reason`` holds.
MAX_PAUSE_REASON = Job._meta.get_field("pause_reason").max_length


def reason_for(count: int, error: str) -> str:
    """The pause reason: the count and the last error's type and message, cut to fit."""
    first = headline(error) or "(no message)"
    text = f"paused after {count} failed occurrences in a row; last error: {first}"
    text = "".join(c if c.isprintable() else " " for c in text[:MAX_ERROR])
    return text[: MAX_PAUSE_REASON or 500]


def count_failure(*, job_id: int, error: str, now: datetime) -> bool:
    """Count one failed occurrence of the job; pause it when it reached its limit.

    Runs inside the caller's transaction (``fail_attempt``'s), which then holds the job's row
    lock until it commits. Returns True when this failure paused the job.
    """
    if not engine().count_failure(job_id):
        return False
    job = (
        Job.objects.filter(pk=job_id)
        .only(
            "pk", "name", "status", "pause_after_failures", "consecutive_failures", "pause_reason"
        )
        .first()
    )
    if job is None or job.pause_after_failures is None:
        return False
    if job.status != JobStatus.ACTIVE or job.consecutive_failures < job.pause_after_failures:
        return False
    reason = reason_for(job.consecutive_failures, error)
    paused = engine().pause_job(job_id, reason=reason, kind=PauseKind.FAILURES, now=now)
    if not paused:
        return False
    audit.paused(
        job=job,
        by=audit.ENGINE,
        now=now,
        reason=reason,
        before=job.pause_reason,
        kind=PauseKind.FAILURES.value,
    )
    logger.warning(
        "job.paused_after_failures job=%s failures=%s reason=%s",
        job_id,
        job.consecutive_failures,
        reason,
    )
    return True


def record_claim_pause(*, job_id: int, reason: str, now: datetime) -> None:
    """The audit row of a pause the claim wrote in its transaction (a job whose timing took
    longer than ``SCHEDULING_TIMING_BUDGET_MS``, a row it could not plan): by ``system``,
    with the reason, like a pause after failures."""
    job = Job.objects.filter(pk=job_id).only("pk", "name", "status").first()
    if job is None or job.status != JobStatus.PAUSED:
        return
    audit.paused(job=job, by=audit.ENGINE, now=now, reason=reason, before="", kind=None)
    logger.warning("job.paused job=%s reason=%s", job_id, reason)
