"""What one claim of a due job does about its occurrences: which run now, which the misfire
policy skips, which a later one supersedes under ``Backlog.LATEST``, and where the job goes
next (``plan_claim``).

Pure like ``scheduling.timing.schedules``, whose ``FiringRule`` walks the occurrences: plain
values in, aware UTC datetimes out, a fixed ``now``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from scheduling.timing.schedules import Backlog, FiringRule, Misfire, ScheduleError

#: The smallest step between two instants.
_EPSILON = timedelta(microseconds=1)


@dataclass(frozen=True)
class ClaimPlan:
    """What one claim of a due job does.

    ``run`` are the occurrences to execute now, ``skipped`` the first missed occurrence when the
    skip policy dropped some (recorded once so the history shows the gap), and ``next_occurrence``
    where the job goes next (None: its schedule is over). ``error`` says why there is no next
    occurrence when one could not be computed (a row saved around the rules whose schedule runs
    off the calendar): the job ends there instead of failing every claim it is part of.
    """

    run: tuple[datetime, ...]
    skipped: datetime | None
    next_occurrence: datetime | None
    error: ScheduleError | None = None
    #: Occurrences a later one (``run[0]``) replaced under ``Backlog.LATEST``, oldest first.
    superseded: tuple[datetime, ...] = ()


def plan_claim(
    timing: FiringRule,
    *,
    anchor: datetime,
    due: datetime,
    now: datetime,
    misfire: Misfire,
    allow_overlap: bool,
    grace: timedelta,
    catch_up_limit: int,
    backlog: Backlog = Backlog.MISFIRE,
) -> ClaimPlan:
    """Decide which occurrences a claim at ``now`` runs for a job whose next one is ``due``.

    ``backlog`` other than ``MISFIRE`` (the overlap policies ``buffer_one``, ``buffer_all``,
    ``cancel_other``) decides instead of the misfire policy, late or not:

    - ``ALL`` runs ``due`` alone and moves the job to the occurrence after it, so every
      occurrence runs, one per claim, in order (what ``forbid`` with ``catch_up`` does).
    - ``LATEST`` runs the newest occurrence at or before ``now`` and records the ones from
      ``due`` up to it as ``superseded`` (at most ``catch_up_limit`` of them, the oldest; the
      newest is found all the same), then moves the job to the occurrence after it.

    Otherwise the misfire policy decides:

    - On time (within ``grace``) every policy runs ``due``.
    - ``catch_up`` runs every missed occurrence in order. With overlap forbidden they come one
      claim at a time (each waits for the previous one to finish);
      with overlap allowed a single claim creates up to ``catch_up_limit`` of them.
    - ``coalesce`` runs once for all missed occurrences (recorded at the first missed one), then
      waits for the next future occurrence.
    - ``skip`` runs nothing for missed occurrences; an occurrence that is itself on time (within
      ``grace`` of ``now``) still runs, and then the job waits for the next one.
    - A next occurrence that cannot be computed ends the schedule there, with ``error`` set.
    """
    failures: list[ScheduleError] = []

    def following(after: datetime) -> datetime | None:
        try:
            return timing.next_after(after, anchor=anchor)
        except ScheduleError as exc:
            failures.append(exc)
            return None

    if backlog is Backlog.ALL:
        plan = ClaimPlan(run=(due,), skipped=None, next_occurrence=following(due))
    elif backlog is Backlog.LATEST:
        plan = _plan_latest(following, due=due, now=now, record_limit=catch_up_limit)
    else:
        plan = _plan_claim(
            following,
            due=due,
            now=now,
            misfire=misfire,
            allow_overlap=allow_overlap,
            grace=grace,
            catch_up_limit=catch_up_limit,
        )
    return replace(plan, error=failures[0]) if failures else plan


def _plan_latest(
    following: Callable[[datetime], datetime | None],
    *,
    due: datetime,
    now: datetime,
    record_limit: int,
) -> ClaimPlan:
    """``Backlog.LATEST``: the newest occurrence at or before ``now`` runs, the rest are
    superseded (the first ``record_limit`` of them recorded)."""
    passed = [due]
    nxt = following(due)
    while nxt is not None and nxt <= now and len(passed) <= record_limit:
        passed.append(nxt)
        nxt = following(nxt)
    if nxt is not None and nxt <= now:
        # More than the limit came due: find the newest by halving the time between, never
        # walking every occurrence of a long gap (a cron rule has no step to divide by).
        latest = _latest_at_or_before(following, start=passed[-1], now=now)
        return ClaimPlan(
            run=(latest,),
            skipped=None,
            next_occurrence=following(latest),
            superseded=tuple(passed[:record_limit]),
        )
    return ClaimPlan(
        run=(passed[-1],), skipped=None, next_occurrence=nxt, superseded=tuple(passed[:-1])
    )


def _latest_at_or_before(
    following: Callable[[datetime], datetime | None], *, start: datetime, now: datetime
) -> datetime:
    """The newest occurrence at or before ``now``, given ``start``, an occurrence at or before
    it: a search over the time between, about 40 steps for a day in microseconds."""
    latest, low, high = start, start, now
    while high - low > _EPSILON:
        middle = low + (high - low) / 2
        found = following(middle)
        if found is not None and found <= now:
            latest, low = max(latest, found), middle
        else:
            high = middle
    return latest


def _plan_claim(
    following: Callable[[datetime], datetime | None],
    *,
    due: datetime,
    now: datetime,
    misfire: Misfire,
    allow_overlap: bool,
    grace: timedelta,
    catch_up_limit: int,
) -> ClaimPlan:
    late = now - due > grace
    if not late or misfire is Misfire.CATCH_UP:
        runs = [due]
        nxt = following(due)
        if allow_overlap:
            while nxt is not None and nxt <= now and len(runs) < catch_up_limit:
                runs.append(nxt)
                nxt = following(nxt)
        return ClaimPlan(run=tuple(runs), skipped=None, next_occurrence=nxt)
    after_now = following(now)
    if misfire is Misfire.COALESCE:
        return ClaimPlan(run=(due,), skipped=None, next_occurrence=after_now)
    recent = following(max(due, now - grace))
    if recent is not None and recent <= now:
        # The latest occurrence is on time: only the ones before it were missed.
        return ClaimPlan(run=(recent,), skipped=due, next_occurrence=following(recent))
    return ClaimPlan(run=(), skipped=due, next_occurrence=after_now)

