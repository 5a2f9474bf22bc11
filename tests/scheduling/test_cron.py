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

from scheduling.timing.cron import CronError, CronExpression

pytestmark = pytest.mark.pure

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


def fires(text: str, after: datetime, count: int = 3, tz: ZoneInfo | None = None) -> list[datetime]:
    return occurrences(text, after, tz or ZoneInfo("UTC"), count)


def test_star_step_range_and_list_forms() -> None:
    assert fires("*/20 * * * *", utc(2024, 5, 1, 10, 1)) == [
        utc(2024, 5, 1, 10, 20),
        utc(2024, 5, 1, 10, 40),
        utc(2024, 5, 1, 11),
    ]
    assert fires("10-30/10 9 * * *", utc(2024, 5, 1)) == [
        utc(2024, 5, 1, 9, 10),
        utc(2024, 5, 1, 9, 20),
        utc(2024, 5, 1, 9, 30),
    ]
    assert fires("5/20 9 * * *", utc(2024, 5, 1)) == [
        utc(2024, 5, 1, 9, 5),
        utc(2024, 5, 1, 9, 25),
        utc(2024, 5, 1, 9, 45),
    ]
    assert fires("0,7-8 9 * * *", utc(2024, 5, 1)) == [
        utc(2024, 5, 1, 9),
        utc(2024, 5, 1, 9, 7),
        utc(2024, 5, 1, 9, 8),
    ]


def test_month_and_weekday_names_in_any_case() -> None:
    assert fires("0 0 1 jan *", utc(2024, 5, 1), 1) == fires("0 0 1 JAN *", utc(2024, 5, 1), 1)
    assert fires("0 9 * Mar-May mon-FRI", utc(2024, 1, 1), 1) == [utc(2024, 3, 1, 9)]
    assert fires("0 0 * * Sun,sat", utc(2024, 5, 1), 2) == [utc(2024, 5, 4), utc(2024, 5, 5)]


def test_seven_is_sunday() -> None:
    assert fires("0 0 * * 7", utc(2024, 5, 1), 1) == [utc(2024, 5, 5)]


def test_a_stepped_range_of_one_value_is_that_value() -> None:
    assert fires("5-5/2 9 * * *", utc(2024, 5, 1), 2) == [
        utc(2024, 5, 1, 9, 5),
        utc(2024, 5, 2, 9, 5),
    ]


def test_fields_may_be_separated_by_any_whitespace() -> None:
    assert parse("  0\t9  * *\t1-5 ") == parse("0 9 * * 1-5")
    assert parse("  0\t9  * *\t1-5 ").text == "0 9 * * 1-5"


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


# --- L, LW and # -----------------------------------------------------------------------------


def test_l_is_the_last_day_of_the_month() -> None:
    assert fires("0 0 L * *", utc(2024, 1, 15)) == [
        utc(2024, 1, 31),
        utc(2024, 2, 29),
        utc(2024, 3, 31),
    ]


def test_lw_is_the_last_weekday_of_the_month() -> None:
    # 2024-03-31 is a Sunday and 2024-08-31 a Saturday: both move back to the Friday.
    assert fires("0 0 LW * *", utc(2024, 2, 29, 1)) == [
        utc(2024, 3, 29),
        utc(2024, 4, 30),
        utc(2024, 5, 31),
    ]
    assert fires("0 0 LW * *", utc(2024, 8, 1), 1) == [utc(2024, 8, 30)]


def test_weekday_l_is_the_last_such_weekday_of_the_month() -> None:
    assert fires("0 18 * * 5L", utc(2024, 1, 1)) == [
        utc(2024, 1, 26, 18),
        utc(2024, 2, 23, 18),
        utc(2024, 3, 29, 18),
    ]


def test_hash_is_the_nth_such_weekday_of_the_month() -> None:
    assert fires("0 9 * * MON#2", utc(2024, 1, 1)) == [
        utc(2024, 1, 8, 9),
        utc(2024, 2, 12, 9),
        utc(2024, 3, 11, 9),
    ]
    # Only months with five Fridays have a fifth one.
    assert fires("0 0 * * 5#5", utc(2024, 1, 1)) == [
        utc(2024, 3, 29),
        utc(2024, 5, 31),
        utc(2024, 8, 30),
    ]


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
        ("60 * * * *", "minute field: '60' is not valid (accepted: 0-59)"),
        ("* 24 * * *", "hour field: '24' is not valid (accepted: 0-23)"),
        ("* * 0 * *", "day-of-month field: '0' is not valid (accepted: 1-31, L or LW)"),
        ("* * 32 * *", "day-of-month field: '32'"),
        ("* * 15W * *", "day-of-month field: '15W'"),
        ("* * * 13 *", "month field: '13' is not valid (accepted: 1-12 or JAN-DEC)"),
        ("* * * JANUARY *", "month field: 'JANUARY'"),
        ("* * * * 8", "day-of-week field: '8' is not valid (accepted: 0-7 or SUN-SAT"),
        ("* * * * MONDAY", "day-of-week field: 'MONDAY'"),
        ("* * * * 1#6", "day-of-week field: '1#6'"),
        ("0-60 * * * *", "minute field: '0-60'"),
        ("*/0 * * * *", "minute field: '*/0'"),
        ("*/x * * * *", "minute field: '*/x'"),
        ("30-10 * * * *", "minute field: '30-10'"),
        ("1.5 * * * *", "minute field: '1.5'"),
        ("\u0663 * * * *", "minute field"),
        ("1,,2 * * * *", "minute field: '1,,2'"),
        ("@reboot", "@reboot is not supported"),
        ("@fortnightly", "unknown macro @fortnightly"),
        ("@daily echo hi", "unexpected text after @daily"),
        ("0 0 30 2 *", "never fires: day-of-month '30' does not occur in month '2'"),
        ("0 0 31 4,6,9,11 *", "never fires: day-of-month '31' does not occur in month"),
        ("0 0 */31 * MON#5", "never fires: no date matches '*/31 * MON#5'"),
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


def test_direct_construction_is_validated_like_parsing() -> None:
    with pytest.raises(CronError, match="hour field"):
        CronExpression("0 25 * * *")
    with pytest.raises(CronError, match="expected 5 fields"):
        CronExpression("@daily")


def test_an_impossible_day_of_month_is_fine_when_day_of_week_can_fire_instead() -> None:
    expression = parse("0 0 30 2 MON")
    assert expression.next_after(utc(2024, 1, 31), UTC) == utc(2024, 2, 5)


def test_february_29_is_a_day_that_exists() -> None:
    assert fires("0 0 29 2 *", utc(2024, 1, 1), 1) == [utc(2024, 2, 29)]


# --- Which days match ----------------------------------------------------------------------


def test_restricted_day_of_month_and_day_of_week_match_when_either_matches() -> None:
    # Friday the 13th of September 2024, every Friday, and the 13th whatever its weekday.
    assert fires("0 0 13 * FRI", utc(2024, 8, 31), 4) == [
        utc(2024, 9, 6),
        utc(2024, 9, 13),
        utc(2024, 9, 20),
        utc(2024, 9, 27),
    ]
    assert fires("0 0 13 * FRI", utc(2024, 8, 12), 1) == [utc(2024, 8, 13)]


def test_a_stepped_star_day_of_month_must_match_together_with_day_of_week() -> None:
    # */2 starts with a star, so it is not "restricted": odd days that are also Mondays.
    assert fires("0 0 */2 * MON", utc(2024, 9, 1), 2) == [utc(2024, 9, 9), utc(2024, 9, 23)]


def test_months_restrict_the_days_that_match() -> None:
    assert fires("0 0 13 JUN FRI", utc(2024, 1, 1), 2) == [utc(2024, 6, 7), utc(2024, 6, 13)]


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
# Fixed-time expressions (neither minute nor hour starts with "*") fire once per named wall
# time; every other expression follows elapsed time.


def test_a_skipped_fixed_time_fires_at_the_first_minute_after_the_gap() -> None:
    # Berlin, 2024-03-31: 02:00 CET is followed by 03:00 CEST; 02:30 does not exist.
    assert occurrences("30 2 * * *", utc(2024, 3, 30, 12), BERLIN, 3) == [
        utc(2024, 3, 31, 1),  # 03:00 CEST, the moment the clock jumps
        utc(2024, 4, 1, 0, 30),  # 02:30 CEST
        utc(2024, 4, 2, 0, 30),
    ]


def test_several_skipped_fixed_times_fire_once_together() -> None:
    assert occurrences("0,30 2 * * *", utc(2024, 3, 30, 12), BERLIN, 3) == [
        utc(2024, 3, 31, 1),  # 03:00 CEST, for both 02:00 and 02:30
        utc(2024, 4, 1, 0),
        utc(2024, 4, 1, 0, 30),
    ]


def test_a_skipped_time_landing_on_a_named_time_fires_once() -> None:
    assert occurrences("0 2,3 * * *", utc(2024, 3, 30, 12), BERLIN, 3) == [
        utc(2024, 3, 31, 1),  # 03:00 CEST, named anyway
        utc(2024, 4, 1, 0),
        utc(2024, 4, 1, 1),
    ]


def test_a_skipped_time_fires_in_order_with_the_real_times_after_the_gap() -> None:
    # Lord Howe, 2024-10-06: 02:00 +10:30 is followed by 02:30 +11:00.
    assert occurrences("15,40 2 * * *", utc(2024, 10, 5, 12), LORD_HOWE, 3) == [
        utc(2024, 10, 5, 15, 30),  # 02:15, skipped, fires at 02:30 +11:00
        utc(2024, 10, 5, 15, 40),  # 02:40 +11:00
        utc(2024, 10, 6, 15, 15),  # 02:15 +11:00 the next day
    ]


def test_a_skipped_time_is_found_when_asking_from_the_last_second_before_the_gap() -> None:
    for after in (utc(2024, 3, 31, 0, 59, 59), datetime(2024, 3, 31, 0, 59, 59, 999999, UTC)):
        assert parse("30 2 * * *").next_after(after, BERLIN) == utc(2024, 3, 31, 1)


def test_a_skipped_time_is_not_fired_late_when_asking_from_after_the_gap() -> None:
    after = datetime(2024, 3, 31, 3, 10, tzinfo=BERLIN)
    assert parse("15 2 * * *").next_after(after, BERLIN) == utc(2024, 4, 1, 0, 15)


def test_spring_gap_in_new_york() -> None:
    # 2024-03-10: 02:00 EST is followed by 03:00 EDT.
    assert parse("30 2 * * *").next_after(utc(2024, 3, 10), NEW_YORK) == utc(2024, 3, 10, 7)


def test_a_skipped_midnight_fires_at_one_in_the_morning() -> None:
    # Sao Paulo, 2018-11-04: 00:00 -03:00 was followed by 01:00 -02:00.
    assert occurrences("@daily", utc(2018, 11, 2, 12), SAO_PAULO, 3) == [
        utc(2018, 11, 3, 3),  # 00:00 -03:00
        utc(2018, 11, 4, 3),  # 01:00 -02:00
        utc(2018, 11, 5, 2),  # 00:00 -02:00
    ]


def test_a_repeated_fixed_time_fires_once_at_its_first_occurrence() -> None:
    # Berlin, 2024-10-27: 03:00 CEST is followed by 02:00 CET; 02:30 happens twice.
    assert occurrences("30 2 * * *", utc(2024, 10, 26, 12), BERLIN, 2) == [
        utc(2024, 10, 27, 0, 30),  # 02:30 CEST, not 02:30 CET (01:30 UTC)
        utc(2024, 10, 28, 1, 30),
    ]


def test_asking_from_inside_the_repeat_does_not_go_back_to_its_first_pass() -> None:
    after = utc(2024, 10, 27, 1, 10)  # 02:10 CET, the second pass
    assert parse("30 2 * * *").next_after(after, BERLIN) == utc(2024, 10, 28, 1, 30)


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


def test_an_hourly_job_runs_every_hour_of_elapsed_time_through_the_repeat() -> None:
    assert occurrences("30 * * * *", utc(2024, 10, 26, 21), BERLIN, 6) == [
        utc(2024, 10, 26, 21, 30),  # 23:30 CEST
        utc(2024, 10, 26, 22, 30),  # 00:30 CEST
        utc(2024, 10, 26, 23, 30),  # 01:30 CEST
        utc(2024, 10, 27, 0, 30),  # 02:30 CEST
        utc(2024, 10, 27, 1, 30),  # 02:30 CET, the repeat
        utc(2024, 10, 27, 2, 30),  # 03:30 CET
    ]


def test_an_every_minute_job_keeps_running_through_the_repeated_hour() -> None:
    expression = parse("* * * * *")
    assert expression.next_after(utc(2024, 10, 27, 0, 59), BERLIN) == utc(2024, 10, 27, 1)
    assert expression.next_after(utc(2024, 10, 27, 1, 30), BERLIN) == utc(2024, 10, 27, 1, 31)


def test_an_hourly_job_has_no_run_in_the_hour_that_does_not_exist() -> None:
    assert occurrences("30 * * * *", utc(2024, 3, 31, 0), BERLIN, 2) == [
        utc(2024, 3, 31, 0, 30),  # 01:30 CET
        utc(2024, 3, 31, 1, 30),  # 03:30 CEST
    ]
    # Every quarter of an hour that does not exist: nothing that day.
    assert occurrences("*/15 2 * * *", utc(2024, 3, 30, 12), BERLIN, 1) == [
        utc(2024, 4, 1, 0)  # 02:00 CEST the next day
    ]


@pytest.mark.parametrize(
    ("day", "expected_count"),
    [
        (date(2024, 3, 31), 23 * 6),  # a 23-hour day
        (date(2024, 10, 27), 25 * 6),  # a 25-hour day
    ],
)
def test_every_ten_minutes_follows_elapsed_time_across_a_transition(
    day: date, expected_count: int
) -> None:
    start = datetime(day.year, day.month, day.day, tzinfo=BERLIN)
    following = day + timedelta(days=1)
    end = datetime(following.year, following.month, following.day, tzinfo=BERLIN)
    expression = parse("*/10 * * * *")
    found = []
    instant = start - MINUTE
    while (instant := expression.next_after(instant, BERLIN)) < end:
        found.append(instant)
    assert found == sorted(set(found))
    assert all(later - earlier == 10 * MINUTE for earlier, later in itertools.pairwise(found))
    assert len(found) == expected_count


# --- Properties ----------------------------------------------------------------------------
# An independent oracle states the rules minute by minute from the value sets each generated
# field stands for; next_after must agree with it.

ZONES = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Sao_Paulo",
]
# Zones with daylight-saving transitions, and the years in which they have them.
DST_ZONES = {
    "America/New_York": (2000, 2040),
    "Europe/Berlin": (2000, 2040),
    "Australia/Lord_Howe": (2000, 2040),
    "America/Sao_Paulo": (2000, 2018),
}
# Pacific/Chatham is left out: its clocks change at 02:45, not on the hour, and cronsim's
# hour-by-hour walk then misses the repeated part of that hour (see docs/scheduling.md).
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


@dataclasses.dataclass(frozen=True)
class Spec:
    """An expression's text and the values each of its fields stands for."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]

    @property
    def parts(self) -> list[str]:
        return self.text.split()

    @property
    def fixed_time(self) -> bool:
        return not self.parts[0].startswith("*") and not self.parts[1].startswith("*")

    def day_matches(self, d: date) -> bool:
        dom = d.day in self.days
        dow = d.isoweekday() % 7 in self.weekdays
        if self.parts[2].startswith("*") or self.parts[4].startswith("*"):
            return dom and dow
        return dom or dow

    def wall_matches(self, wall: datetime) -> bool:
        return (
            wall.minute in self.minutes
            and wall.hour in self.hours
            and wall.month in self.months
            and self.day_matches(wall.date())
        )


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
    if kind == "value" or (kind == "range-step" and start == high):
        if field == "day-of-week" and start == 0 and draw(st.booleans()):
            start_text = "7"
        return start_text, {start}
    if kind == "open":
        # An open range in day-of-week runs to 7, which is Sunday again.
        if field == "day-of-week":
            return f"{start_text}/{step}", {value % 7 for value in range(start, 8, step)}
        return f"{start_text}/{step}", set(range(start, high + 1, step))
    # A stepped range of one value is tested on its own (cronsim would read "3-WED/2" as "3/2").
    end_text, end = draw(values(field, start + 1 if kind == "range-step" else start, high))
    stride = step if kind == "range-step" else 1
    text = f"{start_text}-{end_text}" + (f"/{step}" if kind == "range-step" else "")
    return text, set(range(start, end + 1, stride))


@st.composite
def fields(draw: st.DrawFn, field: str) -> tuple[str, set[int]]:
    parts = draw(st.lists(items(field), min_size=1, max_size=3))
    return ",".join(text for text, _ in parts), set().union(*(found for _, found in parts))


def star_or(field: str, star_weight: int) -> st.SearchStrategy[tuple[str, set[int]]]:
    low, high = FIELD_BOUNDS[field]
    star = st.just(("*", set(range(low, high + 1))))
    return st.one_of(*[star] * star_weight, fields(field))


def spec_of(chosen: tuple[tuple[str, set[int]], ...]) -> Spec:
    return Spec(" ".join(text for text, _ in chosen), *(frozenset(found) for _, found in chosen))


def specs(*, dom_star: int = 0, month_star: int = 0, dow_star: int = 0) -> st.SearchStrategy[Spec]:
    """Valid expressions; the *_star weights bias toward frequently firing ones."""
    parts = st.tuples(
        fields("minute"),
        fields("hour"),
        star_or("day-of-month", dom_star),
        star_or("month", month_star),
        star_or("day-of-week", dow_star),
    )
    return parts.map(spec_of).filter(lambda spec: _can_fire(spec.text))


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


def wall(instant: datetime, tz: ZoneInfo) -> datetime:
    return instant.astimezone(tz).replace(tzinfo=None)


def fires_at(spec: Spec, instant: datetime, tz: ZoneInfo) -> bool:
    """The DST rules, stated minute by minute: an independent oracle for next_after."""
    if instant.second or instant.microsecond:
        return False
    local = instant.astimezone(tz)
    if spec.wall_matches(local.replace(tzinfo=None)):
        # A fixed time fires at the first pass of a repeated wall time only.
        return not spec.fixed_time or local.fold == 0
    if not spec.fixed_time:
        return False
    # A fixed time skipped by a jump forward fires at the first minute after the jump.
    skipped = wall(instant - MINUTE, tz) + MINUTE
    while skipped < local.replace(tzinfo=None):
        if spec.wall_matches(skipped):
            return True
        skipped += MINUTE
    return False


def first_firing_by_scanning(
    spec: Spec, after: datetime, tz: ZoneInfo, until: datetime
) -> datetime | None:
    instant = after.replace(second=0, microsecond=0) + MINUTE
    while instant <= until:
        if fires_at(spec, instant, tz):
            return instant
        instant += MINUTE
    return None


@given(spec=specs(dom_star=1, month_star=1, dow_star=1), start=starts)
@settings(max_examples=100, deadline=None)
def test_the_next_occurrence_is_later_and_is_a_firing_time(
    spec: Spec, start: tuple[datetime, str]
) -> None:
    after, zone = start
    result = parse(spec.text).next_after(after, ZoneInfo(zone))
    assert result > after
    assert result.tzinfo is UTC
    assert fires_at(spec, result, ZoneInfo(zone))


@given(spec=specs(dom_star=6, month_star=10, dow_star=4), start=starts)
@settings(max_examples=120, deadline=None)
def test_no_firing_is_skipped_between_after_and_the_next_occurrence(
    spec: Spec, start: tuple[datetime, str]
) -> None:
    after, zone = start
    tz = ZoneInfo(zone)
    result = parse(spec.text).next_after(after, tz)
    assert result > after
    assert fires_at(spec, result, tz)
    if result - after <= timedelta(days=2):
        event("scanned")
        assert first_firing_by_scanning(spec, after, tz, result) == result


@st.composite
def clock_change_scenarios(draw: st.DrawFn) -> tuple[Spec, datetime, str]:
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
    hours_text, hours = draw(fields("hour"))
    if draw(st.booleans()):
        hours_text, hours = ",".join(str(hour) for hour in chosen), set(chosen)
    else:
        hours_text += "," + ",".join(str(hour) for hour in chosen)
        hours |= set(chosen)
    minutes = draw(fields("minute"))
    every_day = [("*", set(range(1, 32))), ("*", set(range(1, 13))), ("*", set(range(7)))]
    spec = spec_of((minutes, (hours_text, hours), *every_day))
    after = transition + timedelta(seconds=draw(st.integers(-2 * 60 * 60, 2 * 60 * 60)))
    return spec, after, zone


@given(scenario=clock_change_scenarios())
@settings(max_examples=150, deadline=None)
def test_no_firing_is_skipped_or_repeated_around_clock_changes(
    scenario: tuple[Spec, datetime, str],
) -> None:
    spec, after, zone = scenario
    tz = ZoneInfo(zone)
    event("fixed time" if spec.fixed_time else "elapsed time")
    found = occurrences(spec.text, after, tz, 3)
    for earlier, later in itertools.pairwise([after, *found]):
        if later - earlier <= timedelta(days=1):
            assert first_firing_by_scanning(spec, earlier, tz, later) == later
        else:
            assert fires_at(spec, later, tz)


@given(spec=specs(dom_star=3, month_star=3, dow_star=3), start=starts)
@settings(max_examples=60, deadline=None)
def test_fifty_consecutive_occurrences_strictly_increase(
    spec: Spec, start: tuple[datetime, str]
) -> None:
    after, zone = start
    found = occurrences(spec.text, after, ZoneInfo(zone), 50)
    assert found[0] > after
    assert all(earlier < later for earlier, later in itertools.pairwise(found))
    assert all(fires_at(spec, moment, ZoneInfo(zone)) for moment in found)


def test_a_day_whose_midnight_was_skipped_starts_at_its_first_allowed_hour() -> None:
    """São Paulo skipped 00:00-01:00 on 2 Nov 2004: a job of even hours runs at 02:00, not 01:00."""
    expression = CronExpression.parse("* */2 2-3 * *")
    after = datetime(2004, 11, 2, 2, 59, 58, tzinfo=UTC)  # 23:59:58 on 1 Nov, local
    found = expression.next_after(after, ZoneInfo("America/Sao_Paulo"))
    assert found == datetime(2004, 11, 2, 4, 0, tzinfo=UTC)  # 02:00 local, after the gap
