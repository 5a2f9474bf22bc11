"""Specification of cron parsing and of when a cron expression fires."""

from __future__ import annotations

import dataclasses
import functools
import itertools
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from scheduling.cron import CronError, CronExpression

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")
KOLKATA = ZoneInfo("Asia/Kolkata")
SAO_PAULO = ZoneInfo("America/Sao_Paulo")
MINUTE = timedelta(minutes=1)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def parse(text: str) -> CronExpression:
    return CronExpression.parse(text)


def occurrences(text: str, after: datetime, tz: ZoneInfo, count: int) -> list[datetime]:
    expression = parse(text)
    found = []
    for _ in range(count):
        after = expression.next_after(after, tz)
        found.append(after)
    return found


def error_for(text: str) -> str:
    with pytest.raises(CronError) as caught:
        parse(text)
    return str(caught.value)


# --- Parsing -------------------------------------------------------------------------------


def test_star_means_every_value_of_the_field() -> None:
    expression = parse("* * * * *")
    assert expression.minutes == frozenset(range(60))
    assert expression.hours == frozenset(range(24))
    assert expression.days_of_month == frozenset(range(1, 32))
    assert expression.months == frozenset(range(1, 13))
    assert expression.days_of_week == frozenset(range(7))


def test_single_numbers_and_leading_zeros() -> None:
    expression = parse("05 9 1 12 3")
    assert expression.minutes == {5}
    assert expression.hours == {9}
    assert expression.days_of_month == {1}
    assert expression.months == {12}
    assert expression.days_of_week == {3}


def test_ranges_include_both_ends() -> None:
    assert parse("10-12 * * * *").minutes == {10, 11, 12}
    assert parse("* * * * 1-5").days_of_week == {1, 2, 3, 4, 5}


def test_step_over_star_starts_at_the_field_minimum() -> None:
    assert parse("*/15 * * * *").minutes == {0, 15, 30, 45}
    assert parse("* */7 * * *").hours == {0, 7, 14, 21}
    assert parse("* * */10 * *").days_of_month == {1, 11, 21, 31}
    assert parse("* * * */4 *").months == {1, 5, 9}


def test_stepped_range_steps_from_its_start() -> None:
    assert parse("10-30/10 * * * *").minutes == {10, 20, 30}
    assert parse("* 1-10/4 * * *").hours == {1, 5, 9}


def test_open_stepped_range_runs_to_the_field_maximum() -> None:
    assert parse("5/20 * * * *").minutes == {5, 25, 45}
    assert parse("* * 20/5 * *").days_of_month == {20, 25, 30}
    assert parse("* * * * 1/2").days_of_week == {1, 3, 5}


def test_lists_combine_every_form() -> None:
    assert parse("0,7-9,*/20,50-58/4,55/2 * * * *").minutes == {
        0, 7, 8, 9, 20, 40, 50, 54, 58, 55, 57, 59,
    }  # fmt: skip


def test_month_names_are_case_insensitive_and_work_in_ranges_and_lists() -> None:
    assert parse("0 0 1 jan * ").months == {1}
    assert parse("0 0 1 Mar-May *").months == {3, 4, 5}
    assert parse("0 0 1 JAN,jul,Dec *").months == {1, 7, 12}
    assert parse("0 0 1 FEB-DEC/5 *").months == {2, 7, 12}


def test_weekday_names_are_case_insensitive_and_work_in_ranges_and_lists() -> None:
    assert parse("0 0 * * mon-FRI").days_of_week == {1, 2, 3, 4, 5}
    assert parse("0 0 * * Sun,sat").days_of_week == {0, 6}
    assert parse("0 0 * * SUN-SAT/3").days_of_week == {0, 3, 6}


def test_seven_is_accepted_as_sunday() -> None:
    assert parse("0 0 * * 7").days_of_week == {0}
    assert parse("0 0 * * 5-7").days_of_week == {5, 6, 0}
    assert parse("0 0 * * 0,7").days_of_week == {0}


def test_fields_may_be_separated_by_any_whitespace() -> None:
    assert parse("  0\t9  * *\t1-5 ") == parse("0 9 * * 1-5")


@pytest.mark.parametrize(
    ("macro", "equivalent"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_macros_mean_their_five_field_equivalent(macro: str, equivalent: str) -> None:
    assert parse(macro) == parse(equivalent)


def test_a_field_is_restricted_unless_it_starts_with_a_star() -> None:
    assert not parse("* * * * *").dom_restricted
    assert not parse("* * * * *").dow_restricted
    assert parse("* * 1 * 1").dom_restricted
    assert parse("* * 1 * 1").dow_restricted
    # Vixie cron treats a stepped star as unrestricted even though it narrows the days.
    assert not parse("* * */2 * */2").dom_restricted
    assert not parse("* * */2 * */2").dow_restricted
    assert parse("* * 1-31 * 0-6").dom_restricted
    assert parse("* * 1-31 * 0-6").dow_restricted


# --- Errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty expression"),
        ("   \t", "empty expression"),
        (
            "* * * *",
            "expected 5 fields (minute hour day-of-month month day-of-week), got 4",
        ),
        ("0 0 0 * * * *", "expected 5 fields"),
        ("60 * * * *", "minute field: 60 is out of range 0-59"),
        ("61 * * * *", "minute field: 61 is out of range 0-59"),
        ("* 24 * * *", "hour field: 24 is out of range 0-23"),
        ("* * 0 * *", "day-of-month field: 0 is out of range 1-31"),
        ("* * 32 * *", "day-of-month field: 32 is out of range 1-31"),
        ("* * * 0 *", "month field: 0 is out of range 1-12"),
        ("* * * 13 *", "month field: 13 is out of range 1-12"),
        ("* * * * 8", "day-of-week field: 8 is out of range 0-7"),
        ("0-60 * * * *", "minute field: 60 is out of range 0-59"),
        ("* * * * */0", "day-of-week field: step must be a positive integer"),
        ("*/x * * * *", "minute field: step must be a positive integer"),
        ("* */ * * *", "hour field: step must be a positive integer"),
        ("* * */-1 * *", "day-of-month field: step must be a positive integer"),
        ("* * * */MAR *", "month field: step must be a positive integer"),
        ("*/2/3 * * * *", "minute field: step must be a positive integer"),
        ("*/61 * * * *", "minute field: step 61 exceeds the field's range 0-59"),
        ("30-10 * * * *", "minute field: range 30-10 is backwards"),
        ("* * * * FRI-MON", "day-of-week field: range FRI-MON is backwards"),
        ("-5 * * * *", "minute field: malformed range '-5'"),
        ("* 3- * * *", "hour field: malformed range '3-'"),
        ("1.5 * * * *", "minute field: '1.5' is not a number"),
        ("* * * * +1", "day-of-week field: '+1' is not a number"),
        ("\u0663 * * * *", "minute field: '\u0663' is not a number"),
        ("*/\u0663 * * * *", "minute field: step must be a positive integer"),
        ("JAN * * * *", "minute field: 'JAN' is not a number"),
        ("* * * JANUARY *", "month field: 'JANUARY' is not a number or month name (JAN-DEC)"),
        ("* * * * MONDAY", "day-of-week field: 'MONDAY' is not a number or weekday name"),
        ("* * * * ?", "day-of-week field: '?' is not a number"),
        ("* * L * *", "day-of-month field: 'L' is not a number"),
        ("1,,2 * * * *", "minute field: empty list item in '1,,2'"),
        ("* 1, * * *", "hour field: empty list item"),
        ("@reboot", "@reboot is not supported"),
        ("@fortnightly", "unknown macro @fortnightly"),
        ("@daily echo hi", "unexpected text after @daily"),
        ("0 0 30 2 *", "never fires: no such day (February 30)"),
        ("0 0 30,31 FEB *", "never fires: no such day (February 30/31)"),
        ("0 0 31 4,6,9,11 *", "never fires: no such day (April/June/September/November 31)"),
        ("0 0 31 2 */2", "never fires: no such day (February 31)"),
    ],
)
def test_invalid_expressions_are_rejected_with_a_precise_reason(text: str, message: str) -> None:
    assert message in error_for(text)


def test_more_than_five_fields_explains_that_seconds_and_years_are_unsupported() -> None:
    message = error_for("0 0 12 * * ? 2024")
    assert "got 7" in message
    assert "seconds and year fields are not supported" in message


def test_errors_are_value_errors_with_one_line_messages() -> None:
    with pytest.raises(ValueError, match="minute field") as caught:
        parse("99 * * * *")
    assert "\n" not in str(caught.value)


def test_february_29_is_a_day_that_exists() -> None:
    assert parse("0 0 29 2 *").days_of_month == {29}


def test_an_impossible_day_of_month_is_fine_when_day_of_week_can_fire_instead() -> None:
    expression = parse("0 0 30 2 MON")
    assert expression.next_after(utc(2024, 1, 31), UTC) == utc(2024, 2, 5)


def test_direct_construction_is_validated_like_parsing() -> None:
    valid = parse("0 0 1 1 *")
    with pytest.raises(CronError, match="minute field: 60 is out of range 0-59"):
        dataclasses.replace(valid, minutes=frozenset({60}))
    with pytest.raises(CronError, match="hour field: no values"):
        dataclasses.replace(valid, hours=frozenset())
    with pytest.raises(CronError, match="never fires"):
        dataclasses.replace(valid, days_of_month=frozenset({31}), months=frozenset({2}))
    assert dataclasses.replace(valid, days_of_week=frozenset({7})).days_of_week == {0}


# --- Which days match ----------------------------------------------------------------------


def test_restricted_day_of_month_and_day_of_week_match_when_either_matches() -> None:
    expression = parse("0 0 13 * FRI")
    assert expression.matches_date(date(2024, 9, 13))  # Friday the 13th
    assert expression.matches_date(date(2024, 9, 6))  # a Friday
    assert expression.matches_date(date(2024, 8, 13))  # a Tuesday, the 13th
    assert not expression.matches_date(date(2024, 9, 7))


def test_day_of_week_alone_restricts_when_day_of_month_is_star() -> None:
    expression = parse("0 0 * * MON")
    assert expression.matches_date(date(2024, 9, 2))
    assert not expression.matches_date(date(2024, 9, 3))


def test_day_of_month_alone_restricts_when_day_of_week_is_star() -> None:
    expression = parse("0 0 1 * *")
    assert expression.matches_date(date(2024, 9, 1))
    assert not expression.matches_date(date(2024, 9, 2))


def test_a_stepped_star_day_of_month_must_match_together_with_day_of_week() -> None:
    expression = parse("0 0 */2 * MON")
    assert expression.matches_date(date(2024, 9, 9))  # odd day and a Monday
    assert not expression.matches_date(date(2024, 9, 2))  # Monday, but even
    assert not expression.matches_date(date(2024, 9, 3))  # odd, but Tuesday


def test_months_restrict_the_days_that_match() -> None:
    expression = parse("0 0 13 JUN FRI")
    assert expression.matches_date(date(2024, 6, 7))
    assert not expression.matches_date(date(2024, 9, 13))


def test_either_rule_applies_when_finding_the_next_occurrence() -> None:
    assert occurrences("0 12 1 * MON", utc(2024, 8, 28), UTC, 3) == [
        utc(2024, 9, 1, 12),  # Sunday the 1st
        utc(2024, 9, 2, 12),  # Monday
        utc(2024, 9, 9, 12),
    ]


# --- next_after ----------------------------------------------------------------------------


def test_the_next_occurrence_is_strictly_after_the_given_instant() -> None:
    expression = parse("0 * * * *")
    assert expression.next_after(utc(2024, 5, 1, 10), UTC) == utc(2024, 5, 1, 11)
    assert expression.next_after(utc(2024, 5, 1, 9, 59, 59), UTC) == utc(2024, 5, 1, 10)


def test_seconds_and_microseconds_of_the_given_instant_count() -> None:
    expression = parse("* * * * *")
    after = datetime(2024, 5, 1, 10, 0, 0, 1, tzinfo=UTC)
    assert expression.next_after(after, UTC) == utc(2024, 5, 1, 10, 1)


def test_results_are_in_utc_whatever_the_zone_of_the_input() -> None:
    after = datetime(2024, 5, 1, 12, tzinfo=NEW_YORK)
    result = parse("0 9 * * *").next_after(after, BERLIN)
    assert result.tzinfo is UTC
    assert result == utc(2024, 5, 2, 7)
    assert result == parse("0 9 * * *").next_after(after.astimezone(KOLKATA), BERLIN)


def test_a_naive_instant_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse("* * * * *").next_after(datetime(2024, 5, 1, 12), BERLIN)


def test_crosses_the_end_of_a_month() -> None:
    assert parse("30 6 1 * *").next_after(utc(2024, 4, 30, 7), UTC) == utc(2024, 5, 1, 6, 30)


def test_crosses_the_end_of_a_year() -> None:
    assert parse("@hourly").next_after(utc(2024, 12, 31, 23, 30), UTC) == utc(2025, 1, 1)
    assert parse("@yearly").next_after(utc(2024, 1, 1), UTC) == utc(2025, 1, 1)


def test_the_31st_skips_months_that_are_shorter() -> None:
    assert occurrences("0 0 31 * *", utc(2024, 1, 31), UTC, 3) == [
        utc(2024, 3, 31),
        utc(2024, 5, 31),
        utc(2024, 7, 31),
    ]


def test_february_29_waits_for_the_next_leap_year() -> None:
    assert occurrences("0 0 29 2 *", utc(2024, 3, 1), UTC, 2) == [
        utc(2028, 2, 29),
        utc(2032, 2, 29),
    ]


def test_february_29_skips_2100_which_is_not_a_leap_year() -> None:
    assert parse("0 0 29 2 *").next_after(utc(2096, 3, 1), UTC) == utc(2104, 2, 29)


def test_a_rare_day_and_weekday_combination_is_still_found() -> None:
    # February 1st on a Monday with the "both must match" rule: 11 years apart at times.
    expression = parse("0 0 */31 2 MON")
    assert expression.next_after(utc(2027, 2, 2), UTC) == utc(2038, 2, 1)


def test_asking_beyond_the_end_of_the_calendar_is_an_error() -> None:
    with pytest.raises(CronError, match="no firing time after 9999-06-01"):
        parse("@yearly").next_after(utc(9999, 6, 1), UTC)
    with pytest.raises(CronError, match="no firing time after"):
        parse("0 23 31 12 *").next_after(utc(9999, 6, 1), NEW_YORK)


def test_weekday_mornings_in_new_york_follow_daylight_saving_time() -> None:
    expression = parse("0 9 * * 1-5")
    assert expression.next_after(utc(2024, 1, 12, 15), NEW_YORK) == utc(2024, 1, 15, 14)
    assert expression.next_after(utc(2024, 7, 12, 15), NEW_YORK) == utc(2024, 7, 15, 13)


def test_kolkata_has_a_half_hour_offset_and_no_daylight_saving_time() -> None:
    expression = parse("0 9 * * *")
    assert expression.next_after(utc(2024, 1, 1), KOLKATA) == utc(2024, 1, 1, 3, 30)
    assert expression.next_after(utc(2024, 7, 1), KOLKATA) == utc(2024, 7, 1, 3, 30)


def test_lord_howe_moves_by_half_an_hour_between_seasons() -> None:
    expression = parse("0 9 * * *")
    assert expression.next_after(utc(2024, 7, 1), LORD_HOWE) == utc(2024, 7, 1, 22, 30)
    assert expression.next_after(utc(2024, 12, 1), LORD_HOWE) == utc(2024, 12, 1, 22)


# --- Daylight-saving transitions ------------------------------------------------------------


def test_spring_gap_time_fires_once_after_the_gap() -> None:
    # Berlin, 2024-03-31: 02:00 CET is followed by 03:00 CEST; 02:30 does not exist.
    assert occurrences("30 2 * * *", utc(2024, 3, 30, 12), BERLIN, 3) == [
        utc(2024, 3, 31, 1, 30),  # 03:30 CEST: shifted forward by the hour the clock skipped
        utc(2024, 4, 1, 0, 30),  # 02:30 CEST
        utc(2024, 4, 2, 0, 30),
    ]


def test_spring_gap_times_keep_their_spacing_after_the_gap() -> None:
    assert occurrences("*/15 2 * * *", utc(2024, 3, 30, 12), BERLIN, 5) == [
        utc(2024, 3, 31, 1),  # 03:00 CEST
        utc(2024, 3, 31, 1, 15),
        utc(2024, 3, 31, 1, 30),
        utc(2024, 3, 31, 1, 45),
        utc(2024, 4, 1, 0),  # 02:00 CEST the next day
    ]


def test_a_shifted_gap_time_landing_on_a_named_time_fires_once() -> None:
    # 02:00-02:45 are shifted onto 03:00-03:45, which the expression names anyway.
    assert occurrences("*/15 2-3 * * *", utc(2024, 3, 30, 12), BERLIN, 5) == [
        utc(2024, 3, 31, 1),
        utc(2024, 3, 31, 1, 15),
        utc(2024, 3, 31, 1, 30),
        utc(2024, 3, 31, 1, 45),
        utc(2024, 4, 1, 0),
    ]


def test_a_shifted_gap_time_is_ordered_by_when_it_actually_fires() -> None:
    # Lord Howe, 2024-10-06: 02:00 +10:30 is followed by 02:30 +11:00. 02:15 is shifted to
    # 02:45, after the real 02:40.
    assert occurrences("15,40 2 * * *", utc(2024, 10, 5, 12), LORD_HOWE, 3) == [
        utc(2024, 10, 5, 15, 40),  # 02:40 +11:00
        utc(2024, 10, 5, 15, 45),  # 02:15 shifted to 02:45 +11:00
        utc(2024, 10, 6, 15, 15),  # 02:15 +11:00 the next day
    ]


def test_a_shifted_gap_time_is_found_when_asking_from_just_after_the_gap() -> None:
    after = datetime(2024, 3, 31, 3, 10, tzinfo=BERLIN)
    assert parse("15 2 * * *").next_after(after, BERLIN) == utc(2024, 3, 31, 1, 15)


def test_spring_gap_in_new_york() -> None:
    # 2024-03-10: 02:00 EST is followed by 03:00 EDT.
    assert parse("30 2 * * *").next_after(utc(2024, 3, 10), NEW_YORK) == utc(2024, 3, 10, 7, 30)


def test_a_skipped_midnight_fires_at_one_in_the_morning() -> None:
    # Sao Paulo, 2018-11-04: 00:00 -03:00 was followed by 01:00 -02:00.
    assert occurrences("@daily", utc(2018, 11, 2, 12), SAO_PAULO, 3) == [
        utc(2018, 11, 3, 3),  # 00:00 -03:00
        utc(2018, 11, 4, 3),  # 01:00 -02:00
        utc(2018, 11, 5, 2),  # 00:00 -02:00
    ]


def test_autumn_repeated_time_fires_once_at_its_first_occurrence() -> None:
    # Berlin, 2024-10-27: 03:00 CEST is followed by 02:00 CET; 02:30 happens twice.
    assert occurrences("30 2 * * *", utc(2024, 10, 26, 12), BERLIN, 2) == [
        utc(2024, 10, 27, 0, 30),  # 02:30 CEST, not 02:30 CET (01:30 UTC)
        utc(2024, 10, 28, 1, 30),
    ]


def test_the_repeated_hour_is_not_run_twice() -> None:
    assert occurrences("30 * * * *", utc(2024, 10, 26, 21), BERLIN, 6) == [
        utc(2024, 10, 26, 21, 30),  # 23:30 CEST
        utc(2024, 10, 26, 22, 30),  # 00:30 CEST
        utc(2024, 10, 26, 23, 30),  # 01:30 CEST
        utc(2024, 10, 27, 0, 30),  # 02:30 CEST
        utc(2024, 10, 27, 2, 30),  # 03:30 CET; 02:30 CET (01:30 UTC) is skipped
        utc(2024, 10, 27, 3, 30),  # 04:30 CET
    ]


def test_an_every_minute_job_is_idle_during_the_repeated_hour() -> None:
    expression = parse("* * * * *")
    assert expression.next_after(utc(2024, 10, 27, 0, 59), BERLIN) == utc(2024, 10, 27, 2)
    assert expression.next_after(utc(2024, 10, 27, 1, 30), BERLIN) == utc(2024, 10, 27, 2)


def test_autumn_repeated_time_in_new_york_and_lord_howe() -> None:
    # New York 2024-11-03: 01:30 happens at -04:00 and again at -05:00.
    assert parse("30 1 * * *").next_after(utc(2024, 11, 3), NEW_YORK) == utc(2024, 11, 3, 5, 30)
    assert parse("30 1 * * *").next_after(utc(2024, 11, 3, 5, 30), NEW_YORK) == utc(
        2024, 11, 4, 6, 30
    )
    # Lord Howe 2024-04-07: 02:00 +11:00 is followed by 01:30 +10:30.
    assert parse("45 1 * * *").next_after(utc(2024, 4, 6), LORD_HOWE) == utc(2024, 4, 6, 14, 45)
    assert parse("45 1 * * *").next_after(utc(2024, 4, 6, 14, 45), LORD_HOWE) == utc(
        2024, 4, 7, 15, 15
    )


@pytest.mark.parametrize(
    ("day", "expected_count"),
    [
        (date(2024, 3, 31), 23 * 6),  # the skipped hour's times coincide with 03:00-03:50
        (date(2024, 10, 27), 24 * 6),  # the repeated hour runs once
    ],
)
def test_consecutive_occurrences_across_a_transition_are_distinct_and_increasing(
    day: date, expected_count: int
) -> None:
    start = datetime(day.year, day.month, day.day, tzinfo=BERLIN)
    end = start + timedelta(days=1)
    expression = parse("*/10 * * * *")
    found = []
    instant = start - MINUTE
    while (instant := expression.next_after(instant, BERLIN)) < end:
        found.append(instant)
    assert found == sorted(set(found))
    assert len(found) == expected_count


# --- Properties ----------------------------------------------------------------------------

ZONES = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Sao_Paulo",
    "Pacific/Chatham",
]
# Zones with daylight-saving transitions, and the years in which they have them.
DST_ZONES = {
    "America/New_York": (2000, 2040),
    "Europe/Berlin": (2000, 2040),
    "Australia/Lord_Howe": (2000, 2040),
    "America/Sao_Paulo": (2000, 2018),
    "Pacific/Chatham": (2000, 2040),
}
FIELD_BOUNDS = {
    "minute": (0, 59),
    "hour": (0, 23),
    "day-of-month": (1, 31),
    "month": (1, 12),
    "day-of-week": (0, 6),
}
NAMES = {
    "month": ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
    "day-of-week": ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
}


@st.composite
def values(draw: st.DrawFn, field: str, low: int, high: int) -> tuple[str, int]:
    """A value of the field as text, maybe as a name in any case, and as a number."""
    value = draw(st.integers(low, high))
    if field in NAMES and draw(st.booleans()):
        name = NAMES[field][value - FIELD_BOUNDS[field][0]]
        return draw(st.sampled_from([name, name.lower(), name.title()])), value
    return str(value), value


@st.composite
def items(draw: st.DrawFn, field: str) -> tuple[str, set[int]]:
    """One list item of a field as text, with the values it stands for."""
    low, high = FIELD_BOUNDS[field]
    kind = draw(st.sampled_from(["star", "star-step", "value", "range", "range-step", "open"]))
    if kind == "star":
        return "*", set(range(low, high + 1))
    step = draw(st.integers(1, high - low + 1)) if kind.endswith(("step", "open")) else 1
    if kind == "star-step":
        return f"*/{step}", set(range(low, high + 1, step))
    start_text, start = draw(values(field, low, high))
    if kind == "value":
        if field == "day-of-week" and start == 0 and draw(st.booleans()):
            start_text = "7"
        return start_text, {start}
    if kind == "open":
        return f"{start_text}/{step}", set(range(start, high + 1, step))
    end_text, end = draw(values(field, start, high))
    if field == "day-of-week" and end == 6 and draw(st.booleans()):
        end_text, end = "7", 7
    stride = step if kind == "range-step" else 1
    text = f"{start_text}-{end_text}" + (f"/{step}" if kind == "range-step" else "")
    return text, {
        value % 7 if field == "day-of-week" else value for value in range(start, end + 1, stride)
    }


@st.composite
def fields(draw: st.DrawFn, field: str) -> tuple[str, set[int]]:
    parts = draw(st.lists(items(field), min_size=1, max_size=3))
    return ",".join(text for text, _ in parts), set().union(*(found for _, found in parts))


def star_or(field: str, star_weight: int) -> st.SearchStrategy[tuple[str, set[int]]]:
    low, high = FIELD_BOUNDS[field]
    star = st.just(("*", set(range(low, high + 1))))
    return st.one_of(*[star] * star_weight, fields(field))


def expression_texts(
    *, dom_star: int = 0, month_star: int = 0, dow_star: int = 0
) -> st.SearchStrategy[str]:
    """Valid expression texts; the *_star weights bias toward frequently firing ones."""
    parts = st.tuples(
        fields("minute"),
        fields("hour"),
        star_or("day-of-month", dom_star),
        star_or("month", month_star),
        star_or("day-of-week", dow_star),
    )
    return parts.map(lambda chosen: " ".join(text for text, _ in chosen)).filter(_can_fire)


def _can_fire(text: str) -> bool:
    try:
        parse(text)
    except CronError as error:
        assert str(error).startswith("never fires")
        return False
    return True


@functools.cache
def transitions(zone: str, year: int) -> tuple[datetime, ...]:
    """The instants in `year` at which `zone` changes its UTC offset, to the minute."""
    tz = ZoneInfo(zone)
    found = []
    day = utc(year, 1, 1)
    while day.year == year:
        before = day.astimezone(tz).utcoffset()
        if (day + timedelta(days=1)).astimezone(tz).utcoffset() != before:
            low, high = 0, 24 * 60
            while high - low > 1:
                middle = (low + high) // 2
                if (day + middle * MINUTE).astimezone(tz).utcoffset() == before:
                    low = middle
                else:
                    high = middle
            found.append(day + high * MINUTE)
        day += timedelta(days=1)
    return tuple(found)


@st.composite
def near_transitions(draw: st.DrawFn) -> tuple[datetime, str]:
    """An instant shortly before or after a daylight-saving transition, and its zone."""
    zone = draw(st.sampled_from(sorted(DST_ZONES)))
    year = draw(st.integers(*DST_ZONES[zone]))
    candidates = transitions(zone, year)
    assume(candidates)
    transition = draw(st.sampled_from(candidates))
    offset = draw(st.integers(-26 * 60 * 60, 6 * 60 * 60))
    return transition + timedelta(seconds=offset), zone


anywhere = st.tuples(
    st.datetimes(datetime(2000, 1, 1), datetime(2040, 12, 31)).map(
        lambda moment: moment.replace(tzinfo=UTC)
    ),
    st.sampled_from(ZONES),
)
starts = st.one_of(anywhere, near_transitions())


def wall_matches(expression: CronExpression, wall: datetime) -> bool:
    return (
        wall.minute in expression.minutes
        and wall.hour in expression.hours
        and expression.matches_date(wall.date())
    )


def skipped_wall_shifted_to(instant: datetime, tz: ZoneInfo) -> datetime | None:
    """The nonexistent wall time that the gap rule moves onto `instant`, if there is one."""
    offset_before = (instant - timedelta(hours=3)).astimezone(tz).utcoffset()
    assert offset_before is not None
    wall = (instant + offset_before).replace(tzinfo=None)
    as_local = wall.replace(tzinfo=tz)
    exists = as_local.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall
    if exists or as_local.astimezone(UTC) != instant:
        return None
    return wall


def fires_at(expression: CronExpression, instant: datetime, tz: ZoneInfo) -> bool:
    """The DST rules, stated minute by minute: an independent oracle for next_after."""
    if instant.second or instant.microsecond:
        return False
    local = instant.astimezone(tz)
    if wall_matches(expression, local.replace(tzinfo=None)):
        return local.fold == 0  # the second occurrence of a repeated wall time never fires
    skipped = skipped_wall_shifted_to(instant, tz)
    return skipped is not None and wall_matches(expression, skipped)


def first_firing_by_scanning(
    expression: CronExpression, after: datetime, tz: ZoneInfo, until: datetime
) -> datetime | None:
    instant = after.replace(second=0, microsecond=0) + MINUTE
    while instant <= until:
        if fires_at(expression, instant, tz):
            return instant
        instant += MINUTE
    return None


@given(text=expression_texts(dom_star=1, month_star=1, dow_star=1), start=starts)
@settings(max_examples=100, deadline=None)
def test_the_next_occurrence_is_later_and_is_a_firing_time(
    text: str, start: tuple[datetime, str]
) -> None:
    expression = parse(text)
    after, zone = start
    result = expression.next_after(after, ZoneInfo(zone))
    assert result > after
    assert result.tzinfo is UTC
    assert fires_at(expression, result, ZoneInfo(zone))


@given(parts=st.tuples(*(fields(name) for name in FIELD_BOUNDS)))
@settings(max_examples=100, deadline=None)
def test_each_field_stands_for_the_values_its_forms_name(
    parts: tuple[tuple[str, set[int]], ...],
) -> None:
    text = " ".join(field_text for field_text, _ in parts)
    assume(_can_fire(text))
    expression = parse(text)
    assert [
        expression.minutes,
        expression.hours,
        expression.days_of_month,
        expression.months,
        expression.days_of_week,
    ] == [expected for _, expected in parts]
    assert expression.dom_restricted == (not parts[2][0].startswith("*"))
    assert expression.dow_restricted == (not parts[4][0].startswith("*"))


@given(text=expression_texts(dom_star=6, month_star=10, dow_star=4), start=starts)
@settings(max_examples=120, deadline=None)
def test_no_firing_is_skipped_between_after_and_the_next_occurrence(
    text: str, start: tuple[datetime, str]
) -> None:
    expression = parse(text)
    after, zone = start
    tz = ZoneInfo(zone)
    result = expression.next_after(after, tz)
    assert result > after
    assert fires_at(expression, result, tz)
    if result - after <= timedelta(days=2):
        event("scanned")
        if skipped_wall_shifted_to(result, tz):
            event("result shifted out of a gap")
        assert first_firing_by_scanning(expression, after, tz, result) == result


@st.composite
def clock_change_scenarios(draw: st.DrawFn) -> tuple[str, datetime, str]:
    """An expression naming the wall hours around a clock change, and an instant near it.

    Random expressions rarely name the hour a clock change affects, so these are built to.
    """
    zone = draw(st.sampled_from(sorted(DST_ZONES)))
    year = draw(st.integers(*DST_ZONES[zone]))
    candidates = transitions(zone, year)
    assume(candidates)
    transition = draw(st.sampled_from(candidates))
    tz = ZoneInfo(zone)
    wall_before = (transition - MINUTE).astimezone(tz)
    affected = {wall_before.hour, (wall_before + MINUTE).hour, transition.astimezone(tz).hour}
    chosen = draw(st.lists(st.sampled_from(sorted(affected)), min_size=1, unique=True))
    hours_text, _ = draw(fields("hour"))
    if draw(st.booleans()):
        hours_text = ",".join(str(hour) for hour in chosen)
    else:
        hours_text += "," + ",".join(str(hour) for hour in chosen)
    minutes_text, _ = draw(fields("minute"))
    after = transition + timedelta(seconds=draw(st.integers(-2 * 60 * 60, 2 * 60 * 60)))
    return f"{minutes_text} {hours_text} * * *", after, zone


@given(scenario=clock_change_scenarios())
@settings(max_examples=100, deadline=None)
def test_no_firing_is_skipped_or_repeated_around_clock_changes(
    scenario: tuple[str, datetime, str],
) -> None:
    text, after, zone = scenario
    tz = ZoneInfo(zone)
    expression = parse(text)
    found = occurrences(text, after, tz, 3)
    if skipped_wall_shifted_to(found[0], tz):
        event("first result shifted out of a gap")
    for earlier, later in itertools.pairwise([after, *found]):
        if later - earlier <= timedelta(days=1):
            assert first_firing_by_scanning(expression, earlier, tz, later) == later
        else:
            assert fires_at(expression, later, tz)


@given(text=expression_texts(dom_star=3, month_star=3, dow_star=3), start=starts)
@settings(max_examples=60, deadline=None)
def test_fifty_consecutive_occurrences_strictly_increase(
    text: str, start: tuple[datetime, str]
) -> None:
    expression = parse(text)
    after, zone = start
    found = occurrences(text, after, ZoneInfo(zone), 50)
    assert found[0] > after
    assert all(earlier < later for earlier, later in itertools.pairwise(found))
    assert all(fires_at(expression, moment, ZoneInfo(zone)) for moment in found)
