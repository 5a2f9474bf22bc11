"""Schedule arithmetic as a specification: durations, occurrences, windows, misfires, jitter.

Everything here is pure (no database, no clock): plain values in, aware UTC datetimes out.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.timing.claim_plans import ClaimPlan, plan_claim
from scheduling.timing.cron import CronExpression
from scheduling.timing.schedules import (
    FiringRule,
    Misfire,
    ScheduleError,
    check_savable,
    format_duration,
    jitter_offset,
    parse_cron,
    parse_duration,
    parse_zone,
    require_aware,
    retry_delay,
)

pytestmark = pytest.mark.pure

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
GRACE = timedelta(seconds=60)


def every(text: str, **window: datetime) -> FiringRule:
    return FiringRule(interval=parse_duration(text), **window)


# --- durations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PT3H", timedelta(hours=3)),
        ("P1DT12H", timedelta(days=1, hours=12)),
        ("P1W", timedelta(weeks=1)),
        ("PT30S", timedelta(seconds=30)),
        ("PT1.5S", timedelta(seconds=1.5)),
        ("PT2,25S", timedelta(seconds=2.25)),
        ("PT0.5M", timedelta(seconds=30)),
        ("P0.5D", timedelta(hours=12)),
        ("PT1H30M15S", timedelta(hours=1, minutes=30, seconds=15)),
        ("  pt10m ", timedelta(minutes=10)),
    ],
)
def test_iso_8601_durations_parse_to_exact_elapsed_time(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("PT0S", "shorter than one second"),
        ("PT0.5S", "shorter than one second"),
        ("-PT1H", "negative"),
        ("3 hours", "not an ISO-8601 duration"),
        ("P1M", "months or years"),
        ("P1Y", "months or years"),
        ("P1Y2DT3H", "months or years"),
        ("", "not an ISO-8601 duration"),
        ("P", "not an ISO-8601 duration"),
        ("PT", "not an ISO-8601 duration"),
        ("1H", "not an ISO-8601 duration"),
    ],
)
def test_bad_durations_are_refused_naming_the_field_and_reason(text: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_duration(text)
    assert caught.value.field == "interval"
    assert reason in caught.value.reason
    assert str(caught.value).startswith("interval: ")


def test_duration_errors_name_the_field_the_caller_gives() -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_duration("PT0S", field="every")
    assert caught.value.field == "every"


@given(st.integers(min_value=1, max_value=60 * 60 * 24 * 400))
def test_canonical_duration_spelling_parses_back_to_the_same_length(seconds: int) -> None:
    value = timedelta(seconds=seconds)
    assert parse_duration(format_duration(value)) == value


def test_unknown_zone_and_bad_cron_are_refused_naming_the_field() -> None:
    with pytest.raises(ScheduleError) as zone:
        parse_zone("Mars/Olympus_Mons")
    assert zone.value.field == "timezone"
    assert "not a known IANA time zone" in zone.value.reason
    with pytest.raises(ScheduleError) as cron:
        parse_cron("61 * * * *")
    assert cron.value.field == "cron"
    assert cron.value.reason


def test_naive_datetimes_are_refused_and_aware_ones_become_utc() -> None:
    with pytest.raises(ScheduleError) as caught:
        require_aware(datetime(2030, 1, 1, 9, 0), field="start")
    assert caught.value.field == "start"
    assert "time zone offset" in caught.value.reason
    assert require_aware(datetime(2030, 1, 1, 10, 0, tzinfo=BERLIN), field="start") == T0.replace(
        day=1
    )


# --- FiringRule: what a schedule is -------------------------------------------------------------


def test_a_timing_has_exactly_one_kind() -> None:
    with pytest.raises(ScheduleError, match="exactly one"):
        FiringRule()
    with pytest.raises(ScheduleError, match="exactly one"):
        FiringRule(interval=MINUTE, at=T0)


def test_a_window_must_end_after_it_starts() -> None:
    with pytest.raises(ScheduleError) as caught:
        every("PT1M", start=T0, end=T0)
    assert caught.value.field == "end"


def test_a_one_off_instant_must_lie_inside_its_window() -> None:
    with pytest.raises(ScheduleError) as before:
        FiringRule(at=T0, start=T0 + MINUTE)
    assert before.value.field == "at"
    with pytest.raises(ScheduleError) as after:
        FiringRule(at=T0, end=T0 - MINUTE)
    assert after.value.field == "at"


def test_naive_window_is_refused_by_timing() -> None:
    with pytest.raises(ScheduleError) as caught:
        every("PT1M", start=datetime(2030, 1, 7, 9, 0))
    assert caught.value.field == "start"


# --- FiringRule.next_after: interval --------------------------------------------------------------


def test_interval_counts_from_the_anchor_without_a_start() -> None:
    timing = every("PT1H")
    assert timing.next_after(T0 - MINUTE, anchor=T0) == T0
    assert timing.next_after(T0, anchor=T0) == T0 + timedelta(hours=1)
    assert timing.next_after(T0 + timedelta(minutes=30), anchor=T0) == T0 + timedelta(hours=1)
    assert timing.next_after(T0 + timedelta(hours=5), anchor=T0) == T0 + timedelta(hours=6)


def test_interval_counts_from_the_start_rather_than_the_anchor() -> None:
    start = T0 + timedelta(minutes=17)
    timing = every("PT1H", start=start)
    assert timing.next_after(T0, anchor=T0) == start
    assert timing.next_after(start, anchor=T0) == start + timedelta(hours=1)


def test_occurrence_at_or_after_includes_the_instant_itself() -> None:
    timing = every("PT1H")
    assert timing.occurrence_at_or_after(T0, anchor=T0) == T0
    assert timing.occurrence_at_or_after(T0 + MINUTE, anchor=T0) == T0 + timedelta(hours=1)


def test_window_nothing_before_start_nothing_after_end() -> None:
    start, end = T0 + timedelta(hours=1), T0 + timedelta(hours=3)
    timing = every("PT1H", start=start, end=end)
    assert list(timing.occurrences(T0 - timedelta(days=1), anchor=T0)) == [
        start,
        start + timedelta(hours=1),
        end,
    ]
    assert timing.next_after(end, anchor=T0) is None
    assert timing.next_after(end + timedelta(days=30), anchor=T0) is None


def test_results_are_in_utc() -> None:
    timing = every("PT1H", start=datetime(2030, 1, 7, 10, 0, tzinfo=BERLIN))
    result = timing.next_after(T0 - MINUTE, anchor=T0)
    assert result == T0
    assert result is not None and result.utcoffset() == timedelta(0)


# --- FiringRule.next_after: cron and one-off ----------------------------------------------------


def test_cron_follows_the_wall_clock_of_its_zone() -> None:
    timing = FiringRule(cron=parse_cron("0 9 * * *"), zone=BERLIN)
    # 09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer.
    assert timing.next_after(T0, anchor=T0) == datetime(2030, 1, 8, 8, 0, tzinfo=UTC)
    summer = datetime(2030, 6, 3, 12, 0, tzinfo=UTC)
    assert timing.next_after(summer, anchor=T0) == datetime(2030, 6, 4, 7, 0, tzinfo=UTC)


def test_cron_timing_delegates_to_the_cron_module() -> None:
    expression = CronExpression.parse("*/20 8-17 * * MON-FRI")
    timing = FiringRule(cron=expression, zone=BERLIN)
    after = datetime(2030, 1, 11, 16, 50, tzinfo=UTC)  # a Friday evening in Berlin
    for moment in (T0, after, after + timedelta(days=60)):
        assert timing.next_after(moment, anchor=T0) == expression.next_after(moment, BERLIN)


def test_cron_window_bounds_its_occurrences() -> None:
    timing = FiringRule(
        cron=parse_cron("0 * * * *"), start=T0 + timedelta(minutes=30), end=T0 + timedelta(hours=2)
    )
    assert list(timing.occurrences(T0 - timedelta(days=1), anchor=T0)) == [
        T0 + timedelta(hours=1),
        T0 + timedelta(hours=2),
    ]


def test_one_off_fires_once_at_its_instant() -> None:
    timing = FiringRule(at=T0)
    assert timing.next_after(T0 - timedelta(days=1), anchor=T0) == T0
    assert timing.next_after(T0, anchor=T0) is None
    assert list(timing.occurrences(T0 - timedelta(days=1), anchor=T0)) == [T0]


# --- intervals across daylight-saving changes -------------------------------------------------

DST_2030 = [
    # (zone, the UTC instant the offset changes)
    (BERLIN, datetime(2030, 3, 31, 1, 0, tzinfo=UTC)),
    (BERLIN, datetime(2030, 10, 27, 1, 0, tzinfo=UTC)),
    (NEW_YORK, datetime(2030, 3, 10, 7, 0, tzinfo=UTC)),
    (NEW_YORK, datetime(2030, 11, 3, 6, 0, tzinfo=UTC)),
]


@pytest.mark.parametrize(("zone", "change"), DST_2030, ids=str)
@pytest.mark.parametrize("interval", ["PT30M", "P1D"])
def test_interval_schedule_never_runs_twice_or_skips_across_dst(
    zone: ZoneInfo, change: datetime, interval: str
) -> None:
    step = parse_duration(interval)
    # The start is given in local time of the zone, as a person would type it.
    start = (change - timedelta(days=3)).astimezone(zone).replace(minute=0, second=0)
    assert start.utcoffset() != (change + timedelta(days=3)).astimezone(zone).utcoffset()
    timing = FiringRule(interval=step, zone=zone, start=start)
    horizon = change + timedelta(days=3)
    expected_count = int((horizon - start) / step) + 1
    got = list(islice(timing.occurrences(start - MINUTE, anchor=T0), expected_count))
    assert got[0] == start
    assert all(b - a == step for a, b in pairwise(got))
    assert len(set(got)) == len(got)
    assert got[-1] - got[0] == step * (len(got) - 1)
    assert got[-1] <= horizon < got[-1] + step


def test_p1d_is_24_hours_so_its_wall_time_moves_with_dst() -> None:
    start = datetime(2030, 3, 9, 9, 0, tzinfo=NEW_YORK)  # 09:00 EST
    timing = FiringRule(interval=parse_duration("P1D"), zone=NEW_YORK, start=start)
    days = list(islice(timing.occurrences(start - MINUTE, anchor=T0), 3))
    assert [d.astimezone(NEW_YORK).hour for d in days] == [9, 10, 10]
    assert {d.astimezone(UTC).hour for d in days} == {14}


def test_half_hourly_interval_on_berlin_transition_days_runs_by_elapsed_time() -> None:
    timing = FiringRule(interval=parse_duration("PT30M"), zone=BERLIN, start=T0)

    def runs_on(day: int, month: int) -> int:
        midnight = datetime(2030, month, day, tzinfo=BERLIN)
        tomorrow = midnight.date() + timedelta(days=1)
        next_midnight = datetime(tomorrow.year, tomorrow.month, tomorrow.day, tzinfo=BERLIN)
        runs = islice(timing.occurrences(midnight - MINUTE, anchor=T0), 60)
        return sum(1 for t in runs if midnight <= t < next_midnight)

    assert runs_on(31, 3) == 46  # a 23-hour day
    assert runs_on(27, 10) == 50  # a 25-hour day
    assert runs_on(8, 1) == 48


# --- plan_claim -------------------------------------------------------------------------------


def plan(
    *,
    late_by: timedelta,
    misfire: Misfire,
    allow_overlap: bool = False,
    catch_up_limit: int = 100,
    timing: FiringRule | None = None,
) -> ClaimPlan:
    return plan_claim(
        timing or every("PT1M"),
        anchor=T0,
        due=T0,
        now=T0 + late_by,
        misfire=misfire,
        allow_overlap=allow_overlap,
        grace=GRACE,
        catch_up_limit=catch_up_limit,
    )


@pytest.mark.parametrize("misfire", list(Misfire))
@pytest.mark.parametrize("late_by", [timedelta(0), timedelta(seconds=30), GRACE])
def test_on_time_claim_runs_the_due_occurrence_under_every_policy(
    misfire: Misfire, late_by: timedelta
) -> None:
    result = plan(late_by=late_by, misfire=misfire)
    assert result == ClaimPlan(run=(T0,), skipped=None, next_occurrence=T0 + MINUTE)


def test_catch_up_with_forbidden_overlap_runs_one_missed_occurrence_per_claim() -> None:
    result = plan(late_by=timedelta(minutes=10), misfire=Misfire.CATCH_UP)
    assert result.run == (T0,)
    assert result.skipped is None
    assert result.next_occurrence == T0 + MINUTE  # still in the past: the next claim takes it


def test_catch_up_with_allowed_overlap_runs_every_missed_occurrence_at_once() -> None:
    result = plan(late_by=timedelta(minutes=10), misfire=Misfire.CATCH_UP, allow_overlap=True)
    assert result.run == tuple(T0 + MINUTE * i for i in range(11))
    assert result.next_occurrence == T0 + MINUTE * 11


def test_catch_up_with_allowed_overlap_is_capped_by_the_limit() -> None:
    result = plan(
        late_by=timedelta(minutes=10),
        misfire=Misfire.CATCH_UP,
        allow_overlap=True,
        catch_up_limit=4,
    )
    assert result.run == (T0, T0 + MINUTE, T0 + 2 * MINUTE, T0 + 3 * MINUTE)
    assert result.next_occurrence == T0 + 4 * MINUTE


@pytest.mark.parametrize("allow_overlap", [False, True])
def test_coalesce_runs_once_for_all_missed_then_waits_for_the_next_future_slot(
    allow_overlap: bool,
) -> None:
    result = plan(
        late_by=timedelta(minutes=10, seconds=30),
        misfire=Misfire.COALESCE,
        allow_overlap=allow_overlap,
    )
    assert result == ClaimPlan(run=(T0,), skipped=None, next_occurrence=T0 + MINUTE * 11)


@pytest.mark.parametrize("allow_overlap", [False, True])
def test_skip_runs_nothing_for_missed_and_waits_for_the_next_future_slot(
    allow_overlap: bool,
) -> None:
    result = plan(
        late_by=timedelta(minutes=25),
        misfire=Misfire.SKIP,
        allow_overlap=allow_overlap,
        timing=every("PT10M"),
    )
    assert result == ClaimPlan(run=(), skipped=T0, next_occurrence=T0 + MINUTE * 30)


@pytest.mark.parametrize("allow_overlap", [False, True])
def test_skip_still_runs_the_latest_occurrence_when_it_is_on_time(allow_overlap: bool) -> None:
    result = plan(
        late_by=timedelta(minutes=10, seconds=30),
        misfire=Misfire.SKIP,
        allow_overlap=allow_overlap,
    )
    assert result == ClaimPlan(
        run=(T0 + MINUTE * 10,), skipped=T0, next_occurrence=T0 + MINUTE * 11
    )


def test_late_means_beyond_the_grace() -> None:
    just_late = plan(
        late_by=GRACE + timedelta(seconds=1), misfire=Misfire.SKIP, timing=every("PT10M")
    )
    assert just_late.run == ()
    on_time = plan(late_by=GRACE, misfire=Misfire.SKIP)
    assert on_time.run == (T0,)


@pytest.mark.parametrize("misfire", list(Misfire))
def test_a_claim_past_the_end_leaves_no_next_occurrence(misfire: Misfire) -> None:
    timing = every("PT1M", start=T0, end=T0 + 2 * MINUTE)
    result = plan(late_by=timedelta(hours=1), misfire=misfire, allow_overlap=True, timing=timing)
    assert result.next_occurrence is None
    if misfire is Misfire.CATCH_UP:
        assert result.run == (T0, T0 + MINUTE, T0 + 2 * MINUTE)


def test_one_off_claim_runs_once_and_is_over() -> None:
    result = plan(late_by=timedelta(days=2), misfire=Misfire.CATCH_UP, timing=FiringRule(at=T0))
    assert result == ClaimPlan(run=(T0,), skipped=None, next_occurrence=None)


# --- jitter -----------------------------------------------------------------------------------


def test_jitter_is_within_its_window_and_stable_per_job_and_occurrence() -> None:
    jitter = timedelta(seconds=60)
    offsets = [jitter_offset(job_id, T0, jitter) for job_id in range(1, 2001)]
    assert all(timedelta(0) <= o < jitter for o in offsets)
    assert offsets == [jitter_offset(job_id, T0, jitter) for job_id in range(1, 2001)]
    assert len(set(offsets)) > 1990  # different jobs land at different offsets
    assert min(offsets) < timedelta(seconds=3) and max(offsets) > timedelta(seconds=57)


def test_jitter_differs_between_occurrences_of_one_job() -> None:
    jitter = timedelta(seconds=60)
    offsets = {jitter_offset(7, T0 + MINUTE * i, jitter) for i in range(100)}
    assert len(offsets) > 95


def test_jitter_does_not_depend_on_the_zone_the_occurrence_is_written_in() -> None:
    jitter = timedelta(seconds=60)
    assert jitter_offset(7, T0, jitter) == jitter_offset(7, T0.astimezone(BERLIN), jitter)


def test_zero_jitter_gives_zero_offset() -> None:
    assert jitter_offset(7, T0, timedelta(0)) == timedelta(0)


@settings(max_examples=200, deadline=None)
@given(
    job_id=st.integers(min_value=1, max_value=2**62),
    minutes=st.integers(min_value=0, max_value=10**7),
    jitter_us=st.integers(min_value=1, max_value=10**10),
)
def test_jitter_is_always_in_bounds_and_repeatable(
    job_id: int, minutes: int, jitter_us: int
) -> None:
    jitter = timedelta(microseconds=jitter_us)
    occurrence = T0 + MINUTE * minutes
    offset = jitter_offset(job_id, occurrence, jitter)
    assert timedelta(0) <= offset < jitter
    assert offset == jitter_offset(job_id, occurrence, jitter)


# --- retry backoff ----------------------------------------------------------------------------


@pytest.mark.parametrize("attempt", range(1, 15))
def test_retry_delay_is_capped_exponential_with_jitter(attempt: int) -> None:
    base, cap = 5.0, 600.0
    nominal = min(cap, base * 2 ** (attempt - 1))
    for key in range(50):
        delay = retry_delay(attempt=attempt, base=base, cap=cap, key=key).total_seconds()
        assert 0.5 * nominal <= delay <= nominal
        assert delay == retry_delay(attempt=attempt, base=base, cap=cap, key=key).total_seconds()


def test_retry_delay_grows_then_stops_at_the_cap() -> None:
    delays = [retry_delay(attempt=n, base=1.0, cap=60.0, key=3).total_seconds() for n in (1, 8)]
    assert delays[0] <= 1.0
    assert 30.0 <= delays[1] <= 60.0
    spread = {retry_delay(attempt=3, base=10.0, cap=600.0, key=k) for k in range(100)}
    assert len(spread) > 90  # a burst of failures does not come back as a burst


# --- properties of occurrences ----------------------------------------------------------------

CRONS = ["* * * * *", "*/7 * * * *", "30 2 * * *", "0 9 * * 1-5", "15 */3 1,15 * *", "@hourly"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
instants = st.datetimes(
    min_value=datetime(2029, 1, 1), max_value=datetime(2031, 12, 31), timezones=st.just(UTC)
)


@st.composite
def timings(draw: st.DrawFn) -> tuple[FiringRule, datetime]:
    anchor = draw(instants)
    start = draw(st.none() | instants)
    end = draw(st.none() | instants)
    if start is not None and end is not None and end <= start:
        start, end = end, (start if start != end else start + timedelta(seconds=1))
    zone = ZoneInfo(draw(st.sampled_from(ZONES)))
    kind = draw(st.sampled_from(["interval", "cron", "at"]))
    if kind == "interval":
        seconds = draw(st.integers(min_value=1, max_value=3 * 86400))
        # The window may be written in any zone; arithmetic must still be elapsed time.
        if start is not None:
            start = start.astimezone(zone)
        rule = FiringRule(interval=timedelta(seconds=seconds), zone=zone, start=start, end=end)
        return rule, anchor
    if kind == "cron":
        cron = parse_cron(draw(st.sampled_from(CRONS)))
        return FiringRule(cron=cron, zone=zone, start=start, end=end), anchor
    low = start or datetime(2029, 1, 1, tzinfo=UTC)
    high = end or datetime(2031, 12, 31, tzinfo=UTC)
    at = draw(st.datetimes(min_value=low.replace(tzinfo=None), max_value=high.replace(tzinfo=None)))
    return FiringRule(at=at.replace(tzinfo=UTC), start=start, end=end), anchor


@settings(max_examples=150, deadline=None)
@given(timing_anchor=timings(), after=instants)
def test_occurrences_strictly_increase_within_the_window(
    timing_anchor: tuple[FiringRule, datetime], after: datetime
) -> None:
    timing, anchor = timing_anchor
    got = list(islice(timing.occurrences(after, anchor=anchor), 40))
    assert all(a < b for a, b in pairwise(got))
    assert all(t > after for t in got)
    assert all(t.utcoffset() == timedelta(0) for t in got)
    if timing.start is not None:
        assert all(t >= timing.start for t in got)
    if timing.end is not None:
        assert all(t <= timing.end for t in got)
    if timing.interval is not None:
        assert all(b - a == timing.interval for a, b in pairwise(got))


# --- the end of the calendar and the rules for saving -----------------------------------------

END_OF_9999 = datetime(9999, 12, 31, 23, 30, tzinfo=UTC)


def test_an_interval_running_off_the_calendar_is_a_schedule_error_naming_it() -> None:
    timing = every("P99999999D")
    with pytest.raises(ScheduleError) as caught:
        timing.next_after(T0, anchor=T0)
    assert caught.value.field == "interval"
    assert caught.value.reason == "P99999999D puts the next occurrence beyond the year 9999"


def test_a_cron_expression_running_off_the_calendar_is_a_schedule_error_naming_it() -> None:
    timing = FiringRule(cron=parse_cron("@yearly"), zone=BERLIN)
    with pytest.raises(ScheduleError) as caught:
        timing.next_after(END_OF_9999, anchor=T0)
    assert caught.value.field == "cron"
    assert "no firing time after 9999-12-31" in caught.value.reason


@pytest.mark.parametrize(
    ("values", "field", "words"),
    [
        (("P99999999D", "", "UTC", None, None, None), "interval", "beyond the year 9999"),
        (("PT1H", "", "UTC", None, END_OF_9999, None), "interval", "beyond the year 9999"),
        (("", "0 0 1 1 *", "UTC", None, END_OF_9999, None), "cron", "no firing time"),
        (("PT1H", "", "Europe/Berlin", None, None, None), "timezone", "an interval counts"),
        (("", "", "Asia/Tokyo", T0, None, None), "timezone", "an instant carries its offset"),
        (("PT0S", "", "UTC", None, None, None), "interval", "shorter than one second"),
    ],
)
def test_check_savable_refuses_naming_the_stored_field(
    values: tuple[Any, ...], field: str, words: str
) -> None:
    with pytest.raises(ScheduleError) as caught:
        check_savable(*values, now=T0)
    assert caught.value.field == field
    assert words in caught.value.reason


def test_check_savable_accepts_what_can_run() -> None:
    assert check_savable("P1000D", "", "UTC", None, None, None, now=T0).interval is not None
    assert check_savable("", "0 9 * * *", "Europe/Berlin", None, None, None, now=T0).cron
    # A one-off already past, or a window already over: nothing left to run, nothing to refuse.
    assert check_savable("", "", "UTC", T0 - MINUTE, None, None, now=T0).at == T0 - MINUTE
    assert check_savable("PT1H", "", "", None, None, T0 - MINUTE, now=T0).end == T0 - MINUTE


def test_a_claim_whose_next_occurrence_runs_off_the_calendar_ends_the_schedule_there() -> None:
    # Only a row written around the rules gets here; the claim must not fail with it.
    plan = plan_claim(
        every("P99999999D"),
        anchor=T0,
        due=T0,
        now=T0,
        misfire=Misfire.CATCH_UP,
        allow_overlap=False,
        grace=GRACE,
        catch_up_limit=10,
    )
    assert plan.run == (T0,)
    assert plan.next_occurrence is None
    assert plan.error is not None and plan.error.field == "interval"


def test_a_claim_that_can_plan_has_no_error() -> None:
    plan = plan_claim(
        every("PT1H"),
        anchor=T0,
        due=T0,
        now=T0,
        misfire=Misfire.SKIP,
        allow_overlap=False,
        grace=GRACE,
        catch_up_limit=10,
    )
    assert plan == ClaimPlan(run=(T0,), skipped=None, next_occurrence=T0 + timedelta(hours=1))
