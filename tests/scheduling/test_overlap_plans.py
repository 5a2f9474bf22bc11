"""The overlap policies' arithmetic: what a claim runs of the occurrences that came due while
a run was in flight (``claim_plans.plan_claim`` with a ``Backlog``). Pure: no database, no clock.

The claim of a job whose run just ended sees its next occurrence in the past, ``due``; every
occurrence from there to ``now`` came due while it waited.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from scheduling.models import OVERLAP_BACKLOG, OVERLAP_HOLDS, Overlap
from scheduling.timing.claim_plans import ClaimPlan, plan_claim
from scheduling.timing.schedules import (
    Backlog,
    FiringRule,
    Misfire,
    parse_cron,
    parse_duration,
)

T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
GRACE = timedelta(seconds=60)


def every(text: str, **window: datetime) -> FiringRule:
    return FiringRule(interval=parse_duration(text), **window)


def plan(
    backlog: Backlog,
    *,
    late_by: timedelta,
    misfire: Misfire = Misfire.CATCH_UP,
    limit: int = 100,
    timing: FiringRule | None = None,
) -> ClaimPlan:
    return plan_claim(
        timing or every("PT1M"),
        anchor=T0,
        due=T0,
        now=T0 + late_by,
        misfire=misfire,
        allow_overlap=False,
        grace=GRACE,
        catch_up_limit=limit,
        backlog=backlog,
    )


def test_each_policy_names_its_backlog_and_only_allow_runs_side_by_side() -> None:
    assert OVERLAP_BACKLOG == {
        Overlap.FORBID: Backlog.MISFIRE,
        Overlap.ALLOW: Backlog.MISFIRE,
        Overlap.BUFFER_ONE: Backlog.LATEST,
        Overlap.BUFFER_ALL: Backlog.ALL,
        Overlap.CANCEL_OTHER: Backlog.LATEST,
    }
    assert set(OVERLAP_HOLDS) == set(Overlap) - {Overlap.ALLOW}


@pytest.mark.parametrize("backlog", [Backlog.ALL, Backlog.LATEST])
@pytest.mark.parametrize("misfire", list(Misfire))
def test_an_on_time_claim_runs_the_due_occurrence_alone(backlog: Backlog, misfire: Misfire) -> None:
    result = plan(backlog, late_by=timedelta(seconds=5), misfire=misfire)
    assert result == ClaimPlan(run=(T0,), skipped=None, next_occurrence=T0 + MINUTE)


@pytest.mark.parametrize("misfire", list(Misfire))
def test_buffer_all_runs_the_oldest_waiting_occurrence_and_leaves_the_rest_due(
    misfire: Misfire,
) -> None:
    result = plan(Backlog.ALL, late_by=10 * MINUTE, misfire=misfire)
    assert result == ClaimPlan(run=(T0,), skipped=None, next_occurrence=T0 + MINUTE)


def test_buffer_all_is_what_forbid_with_catch_up_does() -> None:
    buffered = plan(Backlog.ALL, late_by=10 * MINUTE, misfire=Misfire.SKIP)
    forbid = plan(Backlog.MISFIRE, late_by=10 * MINUTE, misfire=Misfire.CATCH_UP)
    assert buffered == forbid


@pytest.mark.parametrize("misfire", list(Misfire))
def test_buffer_one_runs_the_latest_due_and_supersedes_the_ones_before_it(
    misfire: Misfire,
) -> None:
    result = plan(Backlog.LATEST, late_by=3 * MINUTE + timedelta(seconds=10), misfire=misfire)
    assert result.run == (T0 + 3 * MINUTE,)
    assert result.superseded == (T0, T0 + MINUTE, T0 + 2 * MINUTE)
    assert result.skipped is None
    assert result.next_occurrence == T0 + 4 * MINUTE


def test_an_occurrence_due_exactly_now_is_the_latest() -> None:
    result = plan(Backlog.LATEST, late_by=2 * MINUTE)
    assert result.run == (T0 + 2 * MINUTE,)
    assert result.superseded == (T0, T0 + MINUTE)


def test_a_long_gap_records_the_first_superseded_and_still_finds_the_latest() -> None:
    result = plan(Backlog.LATEST, late_by=timedelta(days=1, seconds=30), limit=5)
    assert result.run == (T0 + timedelta(days=1),)
    assert result.superseded == tuple(T0 + i * MINUTE for i in range(5))
    assert result.next_occurrence == T0 + timedelta(days=1) + MINUTE


def test_the_latest_of_a_cron_schedule_is_found_past_the_limit() -> None:
    weekdays_at_nine = FiringRule(cron=parse_cron("0 9 * * 1-5"), zone=ZoneInfo("Europe/Berlin"))
    due = datetime(2030, 1, 7, 8, 0, tzinfo=UTC)  # Monday 09:00 in Berlin
    result = plan_claim(
        weekdays_at_nine,
        anchor=due,
        due=due,
        now=datetime(2030, 2, 2, 12, 0, tzinfo=UTC),  # a Saturday
        misfire=Misfire.SKIP,
        allow_overlap=False,
        grace=GRACE,
        catch_up_limit=3,
        backlog=Backlog.LATEST,
    )
    assert result.run == (datetime(2030, 2, 1, 8, 0, tzinfo=UTC),)  # Friday 09:00 in Berlin
    assert result.superseded == (due, due + timedelta(days=1), due + timedelta(days=2))
    assert result.next_occurrence == datetime(2030, 2, 4, 8, 0, tzinfo=UTC)


def test_the_latest_before_the_schedule_ends_runs_and_the_job_is_over() -> None:
    timing = every("PT1M", end=T0 + 2 * MINUTE)
    result = plan(Backlog.LATEST, late_by=10 * MINUTE, timing=timing)
    assert result.run == (T0 + 2 * MINUTE,)
    assert result.superseded == (T0, T0 + MINUTE)
    assert result.next_occurrence is None


@pytest.mark.parametrize("late_by", [timedelta(0), 7 * MINUTE, timedelta(hours=5)])
def test_latest_never_loses_or_repeats_an_occurrence(late_by: timedelta) -> None:
    """Every occurrence up to ``now`` is either run or superseded, once, in order."""
    result = plan(Backlog.LATEST, late_by=late_by, limit=10_000)
    seen = [*result.superseded, *result.run]
    expected = [T0 + i * MINUTE for i in range(int(late_by / MINUTE) + 1)]
    assert seen == expected
    assert result.next_occurrence == expected[-1] + MINUTE
