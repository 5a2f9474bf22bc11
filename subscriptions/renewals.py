"""Running a due batch: every job in it, the renewals with set-based statements.

A batch's engine execution calls ``run_batch``. Its CreateChildOrder jobs move through the
four steps together (``subscriptions.steps``: ``begin``, ``charge``, ``confirm``), and
``parameter`` records, per job, the last step that succeeded:

1. ``price`` and 2. ``create_order``: one transaction that locks the batch's subscriptions
   (a renewal that starts after a cancel committed sees it and does nothing), prices each
   period from the items in force for it (one query), inserts the missing orders with their
   lines and moves the jobs to PROCESSING;
3. ``charge``: one gateway call per job for the amount its period's order records (never a
   field an operator can edit), with the idempotency key of (subscription, period), outside
   any transaction; each charge that went through is recorded at once. A job that resumes
   past this step asks the gateway what happened under its key instead (``steps._verify``): its
   own record of the charge is not proof of money taken.
   A job that fails here (declined, gateway error) is retried alone, in a later batch, after
   the action's delay, or failed past its maximum; the rest go on;
4. ``confirm``: one transaction confirms the orders, completes the jobs and places the next
   ones (or the Expire).

A run that dies at any point leaves every job at its last recorded step; the engine retries
the batch's execution, and the retry resumes each job after that step (a job found PROCESSING
counts the lost attempt as a failed one). Cancel and Expire jobs, rare and per subscription,
run one by one (``services.end_subscription``).

Every write to a job is conditional on the optimistic counter last read: the rows are
locked, their counters compared with the values this run wrote or read, and a job that
someone else changed meanwhile (an operator in the admin) is left as they made it, and
retried later like a failed attempt.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from scheduling.api import RunContext
from subscriptions import batches, services, steps
from subscriptions.models import (
    JOB_RUNNABLE,
    JobAction,
    JobStep,
    SubscriptionJob,
    UnhandledAction,
)
from subscriptions.signals import renewal_step_done
from subscriptions.steps import Clock, Failures

logger = logging.getLogger("subscriptions")

#: Jobs taken per round of the steps; a batch holds about one block, so this is a bound.
CHUNK = 500


class Tally(Counter[str]):
    """What a run did, in words ("renewed", "retry", "failed", ...), and the errors of the
    jobs that failed, which the run reports to the engine (``RunContext.report_failures``)."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[str] = []

    def record_failure(self, job: SubscriptionJob, exc: BaseException, *, now: datetime) -> None:
        """Record the failed attempt (``services.record_failure``) and keep its error."""
        outcome = services.record_failure(job.pk, exc, now=now)
        self[outcome] += 1
        if outcome in ("retry", "failed"):
            self.errors.append(
                f"{services.describe_error(exc)} (subscription {job.subscription_id}, "
                f"{job.action} job {job.pk}: {outcome})"
            )


class StuckJobs(Exception):
    """Jobs that stayed runnable after their turn in the run (someone keeps changing them)."""


def run_batch(batch_id: int, *, run: RunContext, clock: Clock) -> dict[str, Any]:
    """Run every runnable job of the batch, then close it (see the module docstring)."""
    return _run(lambda: SubscriptionJob.objects.filter(batch_id=batch_id), batch_id, run, clock)


def run_one(job_id: int, *, run: RunContext, clock: Clock) -> dict[str, Any]:
    """Run one job that has an engine job of its own (placed before due batches existed)."""
    # Only while it has no batch: once a retry placed it in one, the batch runs it.
    return _run(
        lambda: SubscriptionJob.objects.filter(pk=job_id, batch__isnull=True), None, run, clock
    )


def _run(
    jobs: Callable[[], Any], batch_id: int | None, run: RunContext, clock: Clock
) -> dict[str, Any]:
    tally = Tally()
    stuck: set[int] = set()
    while True:
        chunk = list(
            jobs().filter(status__in=JOB_RUNNABLE).exclude(pk__in=stuck).order_by("pk")[:CHUNK]
        )
        if chunk:
            reported = len(tally.errors)
            try:
                _run_chunk(chunk, clock=clock, tally=tally, stuck=stuck)
            finally:
                _report(run, tally.errors[reported:])
            run.progress()
            continue
        pending = [] if batch_id is None else batches.close_if_done(batch_id, now=clock())
        if not pending:
            return {word: count for word, count in sorted(tally.items()) if count}
        if stuck.issuperset(pending):
            # Closing now would strand them; the engine retries the batch after its delay.
            raise StuckJobs(
                f"subscription jobs {', '.join(map(str, sorted(pending)))} of batch {batch_id}"
                " are still runnable after their turn; the batch is retried"
            )


def _report(run: RunContext, errors: Sequence[str]) -> None:
    """Tell the engine how many jobs of the run failed, with the last few errors."""
    if errors:
        run.report_failures(len(errors), "; ".join(errors[-5:]))


def _unhandled(job: SubscriptionJob) -> str:
    raise UnhandledAction(
        f"{job.action!r} is not an action this app runs (CreateChildOrder, Cancel, Expire)"
    )


def _run_chunk(
    chunk: Sequence[SubscriptionJob],
    *,
    clock: Clock,
    tally: Tally,
    stuck: set[int],
) -> None:
    renewals = [j for j in chunk if j.action == JobAction.CREATE_CHILD_ORDER]
    for job in chunk:
        if job.action in services.ENDINGS:
            _guarded(job, lambda j: services.end_subscription(j, clock=clock), clock, tally)
        elif job.action != JobAction.CREATE_CHILD_ORDER:
            _guarded(job, _unhandled, clock, tally)
    if renewals:
        _renew(renewals, clock=clock, tally=tally)
    # A job still runnable after its turn is not taken again by this run (see ``_run``).
    still = SubscriptionJob.objects.filter(
        pk__in=[j.pk for j in chunk], status__in=JOB_RUNNABLE, batch_id=chunk[0].batch_id
    ).values_list("pk", flat=True)
    stuck.update(still)


def _guarded(
    job: SubscriptionJob, work: Callable[[SubscriptionJob], str], clock: Clock, tally: Tally
) -> None:
    try:
        tally[work(job)] += 1
    except SoftTimeLimitExceeded:
        raise  # the run's time is up: the job did nothing wrong
    except Exception as exc:
        tally.record_failure(job, exc, now=clock())


# --- the renewal steps (``subscriptions.steps``) --------------------------------------------


def _renew(chunk: Sequence[SubscriptionJob], *, clock: Clock, tally: Tally) -> None:
    failed: Failures = []
    try:
        renewals = steps.begin(chunk, clock=clock, failed=failed, tally=tally)
        _step_done(renewals, JobStep.CREATE_ORDER)
        renewals = steps.charge(renewals, clock=clock, failed=failed, tally=tally)
        _step_done(renewals, JobStep.CHARGE)
        steps.confirm(renewals, clock=clock, failed=failed, tally=tally)
    finally:
        # Also when the run is being stopped (its time limit): what failed is written down,
        # so a retry waits its delay instead of counting a lost run on top.
        for job, exc in failed:
            tally.record_failure(job, exc, now=clock())


def _step_done(renewals: Sequence[steps.Renewal], step: str) -> None:
    """Tell ``renewal_step_done``'s receivers that these renewals' ``step`` has committed."""
    if not renewals:
        return
    for receiver, outcome in renewal_step_done.send_robust(
        sender=SubscriptionJob, jobs=[r.job for r in renewals], step=step
    ):
        if isinstance(outcome, SoftTimeLimitExceeded):
            raise outcome  # the run's time is up, wherever it ran out
        if isinstance(outcome, Exception):
            logger.error("renewal.step_receiver_failed receiver=%r error=%r", receiver, outcome)
