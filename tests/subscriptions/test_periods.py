"""Period arithmetic: anchored months, elapsed-time intervals, counting periods to an end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from subscriptions.periods import (
    Interval,
    PeriodError,
    count_periods,
    parse_interval,
    period_bounds,
    period_containing,
    period_start,
)

JAN_31 = datetime(2030, 1, 31, 9, 0, tzinfo=UTC)
MONTHLY = parse_interval("P1M")


def test_an_anchor_on_the_31st_renews_on_the_last_day_of_short_months_and_returns() -> None:
    starts = [period_start(JAN_31, MONTHLY, n).date().isoformat() for n in range(5)]
    assert starts == ["2030-01-31", "2030-02-28", "2030-03-31", "2030-04-30", "2030-05-31"]


def test_a_leap_february_gets_the_29th() -> None:
    anchor = datetime(2028, 1, 31, tzinfo=UTC)
    assert period_start(anchor, MONTHLY, 1) == datetime(2028, 2, 29, tzinfo=UTC)
    assert period_start(anchor, MONTHLY, 2) == datetime(2028, 3, 31, tzinfo=UTC)


def test_months_never_drift_as_repeated_addition_would() -> None:
    assert period_start(JAN_31, MONTHLY, 12) == datetime(2031, 1, 31, 9, 0, tzinfo=UTC)
    assert period_start(JAN_31, parse_interval("P1Y"), 1) == datetime(2031, 1, 31, 9, tzinfo=UTC)


def test_the_time_of_day_is_kept() -> None:
    assert period_start(JAN_31, MONTHLY, 1).time() == JAN_31.time()


def test_second_and_minute_intervals_are_elapsed_time() -> None:
    assert period_start(JAN_31, parse_interval("PT2S"), 3) == JAN_31 + timedelta(seconds=6)
    assert period_start(JAN_31, parse_interval("PT1M30S"), 2) == JAN_31 + timedelta(minutes=3)
    assert parse_interval("P2W") == Interval(0, timedelta(days=14))


def test_bounds_are_this_start_and_the_next() -> None:
    start, end = period_bounds(JAN_31, MONTHLY, 1)
    assert (start.day, end.day) == (28, 31)


@pytest.mark.parametrize(
    ("moment", "number"),
    [
        (JAN_31 - timedelta(days=3), 0),
        (JAN_31, 0),
        (datetime(2030, 2, 28, 8, tzinfo=UTC), 0),
        (datetime(2030, 2, 28, 9, tzinfo=UTC), 1),
        (datetime(2030, 12, 31, 9, tzinfo=UTC), 11),
        (datetime(2035, 7, 1, tzinfo=UTC), 65),
    ],
)
def test_the_period_containing_a_moment(moment: datetime, number: int) -> None:
    assert period_containing(JAN_31, MONTHLY, moment) == number


def test_twelve_periods_start_before_an_end_twelve_periods_on() -> None:
    second = parse_interval("PT1S")
    assert count_periods(JAN_31, second, JAN_31 + timedelta(seconds=12)) == 12
    assert count_periods(JAN_31, second, JAN_31 + timedelta(seconds=11.5)) == 12
    assert count_periods(JAN_31, MONTHLY, datetime(2031, 1, 31, 9, tzinfo=UTC)) == 12
    assert count_periods(JAN_31, MONTHLY, None) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("PT0S", "is zero"),
        ("P0M", "is zero"),
        ("-P1M", "is not an ISO-8601 duration"),
        ("monthly", "is not an ISO-8601 duration"),
        ("P", "is not an ISO-8601 duration"),
        ("PT", "is not an ISO-8601 duration"),
        ("", "is not an ISO-8601 duration"),
    ],
)
def test_zero_negative_and_malformed_intervals_are_refused(text: str, reason: str) -> None:
    with pytest.raises(PeriodError) as caught:
        parse_interval(text, field="interval")
    assert caught.value.field == "interval"
    assert reason in caught.value.reason
