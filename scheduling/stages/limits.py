"""Limits on running executions, per job and per owner, kept by the ledger for every worker.

One job due every second with a body of an hour, overlap allowed, would otherwise take every
worker slot, and every other owner's work would wait behind it in the broker. So a job may
cap its own running executions (``max_running``) and the site may cap each owner's
(``SCHEDULING_OWNER_MAX_RUNNING``, with exceptions by username in
``SCHEDULING_OWNER_MAX_RUNNING_OVERRIDES``).

The limit is kept where an execution becomes RUNNING, the one step every execution takes
whatever published it (the claim, a retry, a run-now, a republish): the start of a limited
job takes a lock per job and per owner (an advisory lock on PostgreSQL; SQLite has one
writer), counts what runs, and either starts or moves the execution to WAITING with the
reason. A waiting execution is in the ledger like any other, unfinished (a job whose overlap
is ``forbid`` claims no next occurrence meanwhile), and its message is acknowledged: it
holds no worker slot. The scheduler releases waiting executions, oldest first, as slots free
up (``release_waiting``): back to PENDING, published again.

A backfill (``scheduling.stages.backfill``) writes its occurrences WAITING too, so they run
through this same release. For a job whose overlap is ``forbid`` (or any policy that holds
the job's run: ``models.OVERLAP_HOLDS``, every one but ``allow``), a waiting row that is not
already the job's ``current_execution`` is released only when nothing else of the job is
unfinished, and takes that place (a compare-and-set on the job), so the job's runs go one at a
time, oldest first, and the claim holds the job's own next occurrence back meanwhile.

Jobs without a limit, when no owner limit is set, start as before in one statement; only
limited starts pay for the lock and the counts.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from scheduling import conf
from scheduling.ledger.engines import engine
from scheduling.models import (
    EXECUTION_STARTABLE,
    OVERLAP_HOLDS,
    Execution,
    ExecutionStatus,
)

logger = logging.getLogger("scheduling")

#: Executions that hold, or are about to take, a running slot.
IN_FLIGHT = (ExecutionStatus.PENDING, ExecutionStatus.QUEUED, ExecutionStatus.RUNNING)
#: Executions that keep a forbid job's other waiting runs back: all unfinished but WAITING.
TAKING_TURN = (*EXECUTION_STARTABLE, ExecutionStatus.RUNNING)


def owner_limits_on() -> bool:
    """Whether any owner has a limit (then every start of a job is a limited start)."""
    if conf.get("OWNER_MAX_RUNNING") > 0:
        return True
    return any(int(value) > 0 for value in conf.get("OWNER_MAX_RUNNING_OVERRIDES").values())


def owner_limit(username: str) -> int | None:
    """How many of ``username``'s executions may run at once; None for no limit."""
    overrides = conf.get("OWNER_MAX_RUNNING_OVERRIDES")
    value = int(overrides[username]) if username in overrides else conf.get("OWNER_MAX_RUNNING")
    return value if value > 0 else None


@dataclass(frozen=True)
class Slot:
    """What a limited start needs to know of its execution's job and owner."""

    execution_id: int
    job_id: int
    job_name: str
    job_limit: int | None
    owner_id: int
    owner: str
    owner_limit: int | None


def limited_slot(execution_id: int) -> Slot | None:
    """The execution's limits, if it is startable and the one-statement start leaves it to the
    limited start (its job has a limit, or owner limits are on); else None."""
    row = (
        Execution.objects.startable()
        .filter(pk=execution_id)
        .values("job_id", "job__name", "job__max_running", "job__owner_id", "job__owner__username")
        .first()
    )
    if row is None or row["job_id"] is None:
        return None
    username = row["job__owner__username"]
    slot = Slot(
        execution_id=execution_id,
        job_id=row["job_id"],
        job_name=row["job__name"],
        job_limit=row["job__max_running"],
        owner_id=row["job__owner_id"],
        owner=username,
        owner_limit=owner_limit(username),
    )
    return slot if slot.job_limit or owner_limits_on() else None


def lock(slot: Slot) -> None:
    """Serialise limited starts of the slot's job and owner until this transaction ends.

    Must run inside the transaction that counts and starts. PostgreSQL: advisory locks, the
    job's before the owner's in every process, so two starts never wait on each other in a
    circle. SQLite: one writer at a time; a write first takes it before anything is counted.
    """
    engine().lock_slot(
        job_id=slot.job_id,
        limit_job=bool(slot.job_limit),
        owner_id=slot.owner_id if slot.owner_limit else None,
    )


def over_limit(slot: Slot) -> str | None:
    """Why the slot's execution may not start now (its job's or owner's limit), or None."""
    running = Execution.objects.running()
    if slot.job_limit:
        count = running.filter(job_id=slot.job_id).count()
        if count >= slot.job_limit:
            return (
                f"waiting: job {slot.job_name!r} has {count} of {slot.job_limit} running "
                "(max_running)"
            )
    if slot.owner_limit:
        count = running.filter(job__owner_id=slot.owner_id).count()
        if count >= slot.owner_limit:
            return (
                f"waiting: owner {slot.owner!r} has {count} of {slot.owner_limit} running "
                "(SCHEDULING_OWNER_MAX_RUNNING)"
            )
    return None


def hold(slot: Slot, *, reason: str, now: datetime) -> bool:
    """Move the slot's execution to WAITING with the reason; False if it is no longer
    startable (another message started it meanwhile)."""
    held = engine().hold_waiting(slot.execution_id, reason=reason, now=now)
    if held:
        logger.info("execution.waiting execution=%s reason=%s", slot.execution_id, reason)
    return bool(held)


def release_waiting(*, now: datetime, limit: int) -> list[int]:
    """Release waiting executions, oldest first, for which their job and owner have room.

    Room counts the executions in flight (running, or released and not yet started), so a
    release is not undone at its start by the releases before it; a start still checks the
    limit itself, and one that loses a race with another start waits again. Returns the ids
    made PENDING, for the scheduler to publish.

    A waiting row of a forbid job that is not its ``current_execution`` (a backfilled one)
    needs the job's turn as well (``_take_turn``).
    """
    with transaction.atomic(durable=True):
        waiting = engine().lock_waiting(limit=limit)
        if not waiting:
            return []
        jobs = {row["job_id"] for row in waiting}
        owners = {row["job__owner_id"] for row in waiting}
        flying = Execution.objects.filter(status__in=IN_FLIGHT)
        per_job = Counter(
            flying.filter(job_id__in=jobs).values_list("job_id", flat=True).iterator()
        )
        per_owner = Counter(
            flying.filter(job__owner_id__in=owners)
            .values_list("job__owner_id", flat=True)
            .iterator()
        )
        turns = _busy_forbid_jobs(waiting)
        released: list[int] = []
        for row in waiting:
            pk, job_id, job_limit = row["pk"], row["job_id"], row["job__max_running"]
            owner_id = row["job__owner_id"]
            room_for_owner = owner_limit(row["job__owner__username"])
            if job_limit and per_job[job_id] >= job_limit:
                continue
            if room_for_owner and per_owner[owner_id] >= room_for_owner:
                continue
            if not _take_turn(row, turns):
                continue
            released.append(pk)
            per_job[job_id] += 1
            per_owner[owner_id] += 1
        if released:
            engine().release_waiting(released, now=now)
    if released:
        logger.info("executions.released count=%s", len(released))
    return released


def _busy_forbid_jobs(waiting: list[dict[str, Any]]) -> set[int]:
    """The forbid jobs (any overlap but allow) among ``waiting`` rows that have an execution
    taking its turn (queued, running, due to retry: anything unfinished but waiting)."""
    forbid = {row["job_id"] for row in waiting if row["job__overlap"] in OVERLAP_HOLDS}
    if not forbid:
        return set()
    return set(
        Execution.objects.filter(job_id__in=forbid, status__in=TAKING_TURN)
        .values_list("job_id", flat=True)
        .distinct()
    )


def _take_turn(row: dict[str, Any], busy: set[int]) -> bool:
    """Whether the waiting ``row`` may run now as far as its job's overlap goes.

    A job that allows overlap, or a row that already is its forbid job's current execution
    (held by a limit after the claim), may. Any other row of a forbid job (a backfilled one)
    runs only while nothing else of its job is unfinished, and then becomes the job's current
    execution by a compare-and-set, so the claim and a second release cannot start another run
    of the job beside it; ``busy`` then holds the job for the rest of this release.
    """
    job_id = row["job_id"]
    if row["job__overlap"] not in OVERLAP_HOLDS or row["job__current_execution_id"] == row["pk"]:
        return True
    if job_id in busy or row["job__current_execution_id"] is not None:
        return False
    taken = engine().take_turn(job_id, execution_id=row["pk"])
    busy.add(job_id)
    return bool(taken)
