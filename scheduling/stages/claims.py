"""The claim: take due jobs, create their executions, advance them, in one short transaction.

This is the scheduler's hot path, so it works on plain rows instead of model instances: the
ledger's lock (``Engine.lock_due``: ``FOR NO KEY UPDATE SKIP LOCKED``, the row locks that keep
two schedulers apart), the timing decisions of ``timing.claim_plans.plan_claim``, then one
write (``write_claim``). This module decides; the ledger runs the statements. On PostgreSQL
the locking statement also plans and writes the common case itself (an interval job due once,
moved one interval on: ``plain_claims`` says which rows, and the specification tests check it
against ``plan_claim`` case by case); every other row is planned here. On SQLite every row is
planned here. The claim commits on its own (``atomic(durable=True)``): inside a caller's
transaction its row locks would be held, and its rows invisible to workers, for as long as the
caller runs. Nothing is published here: the scheduler loop (``scheduling.scheduler.loop``) does
that after the commit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from scheduling import conf
from scheduling.ids import uuid7_text
from scheduling.ledger.engines import engine
from scheduling.messages.doorbell import Doorbell
from scheduling.models import OVERLAP_BACKLOG, OVERLAP_HOLDS, ExecutionStatus, JobStatus, Overlap
from scheduling.rules import arguments
from scheduling.rules.arguments import Unreadable, decode
from scheduling.rules.validation import (
    arguments_error,
    awaiting_task_error,
    queue_line,
    target_error,
    unknown_target,
)
from scheduling.stages import failures, overlaps, plain_claims, waiting
from scheduling.timing import claim_plans, readable, schedules
from scheduling.timing.schedules import FiringRule, Misfire, ScheduleError

logger = logging.getLogger("scheduling")

SKIPPED_NOTE = (
    "missed while the scheduler was away or the job was paused; skipped by the misfire policy"
)


@dataclass
class _Due:
    """One locked due job, as plain values, and what the claim decides for it."""

    row: dict[str, Any]
    status: str = JobStatus.ACTIVE
    next_occurrence: datetime | None = None
    next_due: datetime | None = None
    executions: list[dict[str, Any]] = field(default_factory=list)
    current_execution_id: int | None = None
    keep_times: bool = False  # paused for a time it cannot read: leave its times as they are
    pause_reason: str | None = None  # set when the claim pauses the job
    task_unknown_since: datetime | None = None  # left for a process that knows its task
    timing_over_budget: bool = False  # paused: its timing took longer than its budget


@dataclass(frozen=True)
class Claim:
    """One claimed batch: the doorbells to publish, and how many jobs it took (a batch that
    took ``limit`` jobs suggests more are due, whatever number of messages they made)."""

    bells: list[Doorbell]
    jobs: int
    #: Message ids of runs this claim cancelled (``cancel_other``) that a worker was running:
    #: the scheduler stops their bodies (``scheduler.stopper``) before it publishes ``bells``.
    stop: list[str] = field(default_factory=list)
    #: Runs to cancel that another transaction held during the claim (id: reason): the
    #: scheduler cancels them after the commit, then stops them too.
    cancel_after: dict[int, str] = field(default_factory=dict)


def claim_due_jobs(*, now: datetime, limit: int) -> Claim:
    """Claim up to ``limit`` due jobs in one transaction; publish the doorbells after it.

    The ledger locks the batch and, on PostgreSQL, plans in its locking statement every job
    whose claim is the plain one (``plain_claims.sql_planning`` says which). Every other row
    is planned here (``_plan``) and written by ``write_claim`` in the same transaction, so a bad row
    still fails or pauses alone: a job whose schedule or target is broken gets a FAILED
    execution naming the reason (and a broken schedule pauses it); one whose own times cannot
    be read is paused with an error in the log; every other due job in the batch is served.
    """
    grace = timedelta(seconds=conf.get("MISFIRE_GRACE"))
    catch_up_limit = max(1, conf.get("CATCH_UP_LIMIT"))
    unknown_grace = timedelta(seconds=conf.get("UNKNOWN_TASK_GRACE"))
    with transaction.atomic(durable=True):
        rows = engine().lock_due(
            now=now, limit=limit, planning=plain_claims.sql_planning(now, grace)
        )
        if not rows:
            return Claim([], 0)
        bells: list[Doorbell] = []
        rest: list[_Due] = []
        timings: dict[tuple[Any, ...], FiringRule | ScheduleError] = {}
        targets: dict[tuple[Any, ...], str] = {}
        verbose = logger.isEnabledFor(logging.DEBUG)
        for row in rows:
            if not row["planned"]:
                rest.append(_plan(row, now, grace, catch_up_limit, unknown_grace, timings, targets))
                continue
            occurrence = datetime.fromisoformat(row["occurrence"])
            if row["execution_id"] is None:
                _log_exists(row["pk"], occurrence)
                continue
            if row["at_bound"]:  # written SKIPPED: the job has its most waiting executions
                waiting.log_skipped(row["pk"], occurrence, conf.get("MAX_WAITING_PER_JOB"))
                continue
            if verbose:
                _log_execution(row["pk"], row["execution_id"], occurrence, ExecutionStatus.PENDING)
            bells.append(_bell(row, execution_id=row["execution_id"], task_id=row["task_id"]))
        stop: list[str] = []
        cancel_after: dict[int, str] = {}
        if rest:
            replaced = overlaps.runs_to_cancel(winners=_winners(rest))
            _write(rest, now=now)
            if replaced:
                cancelled, cancel_after = overlaps.cancel_replaced(now=now, reasons=replaced)
                stop = [run.task_id for run in cancelled if run.was_running]
                for run in cancelled:
                    logger.info(
                        "execution.cancelled execution=%s reason=%s",
                        run.execution_id,
                        replaced[run.execution_id],
                    )
    _log_claimed(len(rows), len(bells) + sum(len(item.executions) for item in rest))
    # Rows planned in Python follow those planned in SQL: a batch is published as one.
    bells.extend(_bells(rest))
    return Claim(bells, len(rows), stop=stop, cancel_after=cancel_after)


def _winners(due: Sequence[_Due]) -> dict[int, datetime]:
    """The ``cancel_other`` jobs of the batch that get a new run to start: the occurrence of
    each. A job that gets none (its target is gone: a FAILED row) keeps the run in flight."""
    winners = {}
    for item in due:
        if item.row["overlap"] != Overlap.CANCEL_OTHER:
            continue
        made = [
            e["scheduled_for"] for e in item.executions if e["status"] == ExecutionStatus.PENDING
        ]
        if made:
            winners[item.row["pk"]] = max(made)
    return winners


def _log_claimed(jobs: int, executions: int) -> None:
    logger.info("dispatch.claimed jobs=%s executions=%s", jobs, executions)


def _log_execution(job_id: int, execution_id: int, at: datetime, status: str) -> None:
    logger.debug(
        "job.claimed job=%s execution=%s scheduled_for=%s status=%s",
        job_id,
        execution_id,
        at.isoformat(),
        status,
    )


def _log_exists(job_id: int, at: datetime) -> None:
    logger.info("job.occurrence_exists job=%s scheduled_for=%s", job_id, at.isoformat())


def _bells(due: Sequence[_Due]) -> list[Doorbell]:
    """The doorbells of the PENDING executions planned in Python (logged at DEBUG)."""
    verbose = logger.isEnabledFor(logging.DEBUG)
    bells = []
    for item in due:
        for execution in item.executions:
            if verbose:
                _log_execution(
                    item.row["pk"], execution["id"], execution["scheduled_for"], execution["status"]
                )
            if execution["status"] == ExecutionStatus.PENDING:
                bells.append(
                    _bell(item.row, execution_id=execution["id"], task_id=execution["task_id"])
                )
    return bells


def _bell(row: dict[str, Any], *, execution_id: int, task_id: str) -> Doorbell:
    """The message of one PENDING execution of the locked job ``row``."""
    return Doorbell(
        execution_id=execution_id,
        task_id=task_id,
        task=row["task"],
        args=_json(row["args"]),
        kwargs=_json(row["kwargs"]),
        queue=row["queue"],
        priority=row["priority"],
        timeout=row["timeout"],
    )


_EMPTY_JSON: dict[str, Any] = {"[]": [], "{}": {}}


def _json(value: Any) -> Any:
    """A JSON column's value, decoded when it arrived as text (fresh objects every time)."""
    if not isinstance(value, str | bytes):
        return value
    if value in _EMPTY_JSON:
        return type(_EMPTY_JSON[value])()
    return decode(value)


def _timing(row: dict[str, Any], cache: dict[tuple[Any, ...], FiringRule | ScheduleError]) -> Any:
    bad = {k: v for k, v in row.get("bad_times", {}).items() if k.startswith("schedule__")}
    if bad:
        name, value = next(iter(bad.items()))
        return ScheduleError(name.removeprefix("schedule__"), _UNREADABLE.format(value=value))
    key = (
        row["schedule__interval"],
        row["schedule__cron"],
        row["schedule__timezone"],
        row["schedule__run_at"],
        row["schedule__starts_at"],
        row["schedule__ends_at"],
        row["schedule__rrule"],
    )
    if key not in cache:
        try:
            timing = cache[key] = schedules.timing_from(
                *key[:6], rrule=key[6], budget=conf.timing_budget()
            )
        except ScheduleError as exc:
            cache[key] = exc
        else:
            if timing.interval is not None:
                plain_claims.STEPS.learn(row["schedule__interval"], timing.interval)
    return cache[key]


def _target_error(row: dict[str, Any], cache: dict[tuple[Any, ...], str]) -> str:
    key = (row["task"], row["task_table"], row["task_row_id"])
    if key not in cache:
        cache[key] = target_error(
            task=row["task"], task_table=row["task_table"], task_row_id=row["task_row_id"]
        )
    return cache[key]


def _argument_error(row: dict[str, Any]) -> str:
    """Why the job's ``args`` or ``kwargs`` cannot be sent, or "" (rows written by raw SQL):
    their type, their depth or size (``scheduling.rules.arguments``), or text nested deeper than
    Python can read."""
    values = {}
    for name in ("args", "kwargs"):
        try:
            values[name] = _json(row[name])
        except Unreadable as exc:
            return f"{name}: is {exc}; the limit is {arguments.limits()[0]} levels"
    return arguments_error(values["args"], values["kwargs"])


MAX_PAUSE_REASON = 500
_UNREADABLE = "{value!r} is not a time the scheduler can use"


def _unreadable(bad: dict[str, str]) -> str:
    return "; ".join(f"{name}: {_UNREADABLE.format(value=value)}" for name, value in bad.items())


def _execution(row: dict[str, Any], at: datetime, status: str) -> dict[str, Any]:
    return {
        "job_id": row["pk"],
        "task": row["task"],
        "scheduled_for": at,
        "status": status,
        "task_id": uuid7_text(),
        "last_error": "",
    }


def _plan(
    row: dict[str, Any],
    now: datetime,
    grace: timedelta,
    catch_up_limit: int,
    unknown_grace: timedelta,
    timings: dict[tuple[Any, ...], FiringRule | ScheduleError],
    targets: dict[tuple[Any, ...], str],
) -> _Due:
    """Plan one locked job; a job that cannot be planned is paused alone, naming the field.

    Everything that can go wrong with one row's values (a time at the end of Python's range
    whose next occurrence cannot be computed, say) is caught here, before the batch is
    written, so the rest of the batch is claimed as usual.
    """
    try:
        return _plan_row(row, now, grace, catch_up_limit, unknown_grace, timings, targets)
    except (ArithmeticError, ValueError, TypeError) as exc:
        value = row.get("next_occurrence_at") or row.get("next_due_at")
        reason = (
            f"next_occurrence_at: {readable.instant(value)} cannot be planned "
            f"({type(exc).__name__}: {exc}); the job is paused"
        )
        return _paused(row, reason)


def _paused(row: dict[str, Any], reason: str) -> _Due:
    """A job paused by the claim for a row it cannot use; its times stay as they are."""
    logger.error("job.paused job=%s error=%s", row["pk"], reason)
    item = _Due(row=row, status=JobStatus.PAUSED, keep_times=True)
    item.pause_reason = reason[:MAX_PAUSE_REASON]
    return item


def _plan_row(
    row: dict[str, Any],
    now: datetime,
    grace: timedelta,
    catch_up_limit: int,
    unknown_grace: timedelta,
    timings: dict[tuple[Any, ...], FiringRule | ScheduleError],
    targets: dict[tuple[Any, ...], str],
) -> _Due:
    item = _Due(row=row)
    bad = {k: v for k, v in row.get("bad_times", {}).items() if not k.startswith("schedule__")}
    if bad:
        # Without a readable occurrence there is nothing to record an execution for.
        return _paused(row, _unreadable(bad))
    occurrence = row["next_occurrence_at"] or row["next_due_at"]
    if row["next_due_at"] is not None and occurrence > row["next_due_at"]:
        # The engine always writes next_due_at = next_occurrence_at + jitter (never earlier);
        # a due row whose occurrence lies ahead of it was changed behind the scheduler, and
        # running that occurrence now would run it early (or in the year 9999).
        return _paused(
            row,
            f"next_occurrence_at: {readable.instant(occurrence)} is later than next_due_at "
            f"{readable.instant(row['next_due_at'])}; the row was changed behind the scheduler",
        )
    timing = _timing(row, timings)
    if isinstance(timing, schedules.OverTimingBudget):
        # Its calendar's proof that it fires costs more than the budget now: the occurrence
        # that was due runs and the job is paused, as when its next occurrence does (below).
        return _over_budget(row, item, occurrence, timing, targets)
    if isinstance(timing, ScheduleError):
        failed = _execution(row, occurrence, ExecutionStatus.FAILED)
        failed["last_error"] = f"schedule is invalid: {timing}"
        logger.error("execution.failed job=%s error=%s", row["pk"], failed["last_error"])
        item.executions.append(failed)
        item.status = JobStatus.PAUSED
        item.pause_reason = failed["last_error"][:MAX_PAUSE_REASON]
        item.next_occurrence, item.next_due = row["next_occurrence_at"], row["next_due_at"]
        return item
    unknown = unknown_target(task=row["task"], task_table=row["task_table"])
    awaited = ""
    if unknown:
        since = row["task_unknown_since"] or now
        if now - since < unknown_grace:
            return _awaiting(
                row, occurrence, since=since, target=unknown, now=now, grace=unknown_grace
            )
        awaited = awaiting_task_error(unknown, grace=unknown_grace.total_seconds())
    plan = claim_plans.plan_claim(
        timing,
        anchor=row["created_at"],
        due=occurrence,
        now=now,
        misfire=Misfire(row["misfire"]),
        allow_overlap=row["overlap"] == Overlap.ALLOW,
        grace=grace,
        catch_up_limit=catch_up_limit,
        backlog=OVERLAP_BACKLOG[Overlap(row["overlap"])],
    )
    error = _target_error(row, targets) or _argument_error(row) or queue_line(row["queue"])
    if awaited:
        error = f"{error}; {awaited}" if error else awaited
    for at in plan.run:
        if error:
            failed = _execution(row, at, ExecutionStatus.FAILED)
            failed["last_error"] = error
            logger.error("execution.failed job=%s scheduled_for=%s error=%s", row["pk"], at, error)
            item.executions.append(failed)
        else:
            item.executions.append(_execution(row, at, ExecutionStatus.PENDING))
    if plan.skipped is not None:
        skipped = _execution(row, plan.skipped, ExecutionStatus.SKIPPED)
        skipped["last_error"] = SKIPPED_NOTE
        item.executions.append(skipped)
    for at in plan.superseded:
        superseded = _execution(row, at, ExecutionStatus.SUPERSEDED)
        superseded["last_error"] = overlaps.superseded_note(plan.run[0])
        item.executions.append(superseded)
    item.next_occurrence = plan.next_occurrence
    if isinstance(plan.error, schedules.OverTimingBudget):
        # Its timing costs more than any job's may: it runs what was due and is paused here,
        # so it never delays the other jobs' claims again (resuming it plans it afresh).
        item.status = JobStatus.PAUSED
        item.pause_reason = f"paused by the scheduler: {plan.error}"[:MAX_PAUSE_REASON]
        item.timing_over_budget = True
        logger.error("job.paused job=%s error=%s", row["pk"], plan.error)
        return item
    if plan.error is not None:
        # The schedule runs off the calendar after this claim: it ends here, and says why.
        logger.warning("job.schedule_ended job=%s reason=%s", row["pk"], plan.error)
    if plan.next_occurrence is None:
        item.status = JobStatus.COMPLETED
    else:
        item.next_due = schedules.due_time(row["pk"], plan.next_occurrence, row["jitter"])
    return item


def _over_budget(
    row: dict[str, Any],
    item: _Due,
    occurrence: datetime,
    over: schedules.OverTimingBudget,
    targets: dict[tuple[Any, ...], str],
) -> _Due:
    """A job whose calendar cannot be parsed within the timing budget: what was due runs (or
    fails naming a bad target, as in any claim) and the job is paused naming the reason."""
    error = _target_error(row, targets) or _argument_error(row) or queue_line(row["queue"])
    run = _execution(row, occurrence, ExecutionStatus.FAILED if error else ExecutionStatus.PENDING)
    if error:
        run["last_error"] = error
        logger.error(
            "execution.failed job=%s scheduled_for=%s error=%s", row["pk"], occurrence, error
        )
    item.executions.append(run)
    item.status = JobStatus.PAUSED
    item.pause_reason = f"paused by the scheduler: {over}"[:MAX_PAUSE_REASON]
    item.timing_over_budget = True  # no next occurrence: resuming it plans it afresh
    logger.error("job.paused job=%s error=%s", row["pk"], over)
    return item


def _awaiting(
    row: dict[str, Any],
    occurrence: datetime,
    *,
    since: datetime,
    target: str,
    now: datetime,
    grace: timedelta,
) -> _Due:
    """A job whose task (or task table) this process does not know: left for one that does.

    A rolling deploy runs the previous release beside the new one, and only the new one knows
    a task it declares. The old scheduler writes no execution (so nothing is failed, and no
    message goes to a worker that could not run it either), keeps the occurrence the job owes
    (``next_occurrence_at``), marks since when it waits, and moves the job's due time a little
    on (``schedules.awaiting_delay``), so it looks at the row again only now and then: the
    claim's cost keeps following the due jobs. A scheduler that knows the task claims the
    occurrence as usual once it is due and clears the mark; after the grace the old one fails
    it, naming the task.
    """
    delay = schedules.awaiting_delay(waited=now - since, grace=grace)
    logger.warning(
        "job.awaiting_task job=%s task=%s since=%s look_again_in=%s",
        row["pk"],
        target,
        since.isoformat(),
        delay.total_seconds(),
    )
    item = _Due(row=row, next_occurrence=occurrence, task_unknown_since=since)
    item.next_due = max(now + delay, row["next_due_at"] or now)
    return item


def _write(due: Sequence[_Due], *, now: datetime) -> None:
    """Write what was planned for ``due`` (``write_claim``) and keep the executions made.

    An occurrence that already has its execution (a manual ``jobs run`` at that very instant)
    is left as it is and dropped from the plan instead of failing the batch on the
    one-per-occurrence constraint.
    """
    waiting.skip_past_bound(due)
    executions = [
        {
            "job_id": execution["job_id"],
            "task": execution["task"],
            "scheduled_for": execution["scheduled_for"],
            "status": execution["status"],
            "task_id": execution["task_id"],
            "last_error": execution["last_error"],
        }
        for item in due
        for execution in item.executions
    ]
    jobs = [
        {
            "id": item.row["pk"],
            "next_due_at": item.next_due,
            "next_occurrence_at": item.next_occurrence,
            "status": item.status,
            "hold": item.row["overlap"] in OVERLAP_HOLDS,
            "keep": item.keep_times,
            "reason": item.pause_reason,
            "unknown_since": item.task_unknown_since,
        }
        for item in due
    ]
    _keep_inserted(due, engine().write_claim(now=now, executions=executions, jobs=jobs))
    for item in due:
        if item.timing_over_budget and item.pause_reason:
            failures.record_claim_pause(job_id=item.row["pk"], reason=item.pause_reason, now=now)
        for execution in item.executions:
            if execution["status"] == ExecutionStatus.FAILED:
                # An occurrence the claim failed (its target or arguments refused) is a failed
                # occurrence like any other (``failures``); the job's row is locked here.
                failures.count_failure(
                    job_id=item.row["pk"], error=execution["last_error"], now=now
                )


def _keep_inserted(due: Sequence[_Due], ids: dict[str, int]) -> None:
    """Give each planned execution its id; drop those whose occurrence already existed."""
    for item in due:
        kept = []
        for row in item.executions:
            pk = ids.get(row["task_id"])
            if pk is None:
                _log_exists(row["job_id"], row["scheduled_for"])
                continue
            row["id"] = pk
            kept.append(row)
        item.executions = kept
