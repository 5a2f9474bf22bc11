"""The overlap policies' decisions that are not timing: what a replaced occurrence is told,
and which runs a claim of ``cancel_other`` jobs cancels.

The timing (which occurrences run, which are superseded) is ``claim_plans.plan_claim``'s, from
the job's ``models.OVERLAP_BACKLOG``. What is left here:

- ``buffer_one`` and ``cancel_other`` record each occurrence a later one replaced as
  SUPERSEDED, saying which (``superseded_note``);
- a claim of a ``cancel_other`` job whose run is still in flight cancels that run in the same
  transaction (CANCELLED, its attempt ``cancelled``, never retried), saying by which
  occurrence (``cancelled_note``); the scheduler then stops its body through Celery's control
  (``scheduler.stopper``) before it publishes the new run. The run's own end can no longer be
  written (every end is a compare-and-set from RUNNING), and its worker's heartbeat finds it
  taken, so the lease fence stops a body that outlives the signal.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from scheduling.ledger.engines import engine
from scheduling.ledger.values import Cancelled
from scheduling.timing import readable


def superseded_note(winner: datetime) -> str:
    """The reason an occurrence did not run: ``winner`` ran in its place (the instant as an
    operator reads every time, ``scheduling.timing.readable``)."""
    return f"superseded by the occurrence of {readable.instant(winner)} (overlap policy)"


def cancelled_note(winner: datetime) -> str:
    """The reason a run was stopped: the occurrence ``winner`` came due (cancel_other)."""
    return f"cancelled by the occurrence of {readable.instant(winner)} (overlap cancel_other)"


def runs_to_cancel(*, winners: Mapping[int, datetime]) -> dict[int, str]:
    """For jobs (id: the occurrence the claim just made) the run each holds, with its reason.

    Read before the claim writes: the write makes the new run the job's current one.
    """
    if not winners:
        return {}
    held = engine().current_runs(job_ids=winners)
    return {execution_id: cancelled_note(winners[job_id]) for job_id, execution_id in held.items()}


def cancel_replaced(
    *, now: datetime, reasons: Mapping[int, str]
) -> tuple[list[Cancelled], dict[int, str]]:
    """Cancel the replaced runs in the claim's transaction; returns those cancelled, and those
    whose row was busy (id: reason), for the scheduler to cancel after the commit."""
    cancelled, busy = engine().cancel_runs(now=now, reasons=reasons)
    return cancelled, {pk: reasons[pk] for pk in busy}
