"""The preview of a timing's next occurrences, as a specification (pure: no database).

Across the clock changes of several zones, for cron and calendar timings alike: the list is
strictly increasing, each element is an occurrence of the timing (for cron, its wall time in
the zone matches the expression, or is the first instant after a skipped one; for a calendar,
it is the instant dateutil's expansion names in the zone), and a longer list starts with the
shorter one.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from dateutil import rrule as du
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scheduling.timing.previews import DEFAULT_COUNT, MAX_COUNT, check_count, preview
from scheduling.timing.schedules import ScheduleError, timing_from

pytestmark = [pytest.mark.specification, pytest.mark.pure]

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "UTC"]
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)
CRONS = ["30 2 * * *", "0 9 * * 1-5", "*/20 * * * *", "15 * * * *", "45 1-3 * * *", "0 0 L * *"]
RRULES = [
    "FREQ=DAILY;BYHOUR=2;BYMINUTE=30",
    "FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9",
    "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=2,3;BYMINUTE=15",
    "FREQ=MONTHLY;BYDAY=2TU;BYHOUR=9\nEXDATE:20270112",
    "FREQ=HOURLY;BYMINUTE=0,30",
]
instants = st.datetimes(
    min_value=datetime(2026, 1, 1), max_value=datetime(2028, 12, 31), timezones=st.just(UTC)
)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def test_a_preview_lists_occurrences_in_the_zone_with_the_offset_of_each() -> None:
    timing = timing_from("", "0 3 * * *", "Europe/Berlin", None, None, None)
    found = preview(timing, now=utc(2027, 3, 26), anchor=ANCHOR, count=4)
    assert [m.isoformat() for m in found.occurrences] == [
        "2027-03-26T03:00:00+01:00",
        "2027-03-27T03:00:00+01:00",
        "2027-03-28T03:00:00+02:00",
        "2027-03-29T03:00:00+02:00",
    ]
    assert not found.ended and found.error is None


def test_a_schedule_that_ends_first_lists_fewer_and_says_so() -> None:
    timing = timing_from("PT1H", "", "UTC", None, None, utc(2027, 1, 1, 2))
    found = preview(timing, now=utc(2027, 1, 1), anchor=utc(2027, 1, 1), count=10)
    assert len(found.occurrences) == 3
    assert found.ended
    once = timing_from("", "", "UTC", utc(2027, 1, 1, 9), None, None)
    assert preview(once, now=utc(2027, 1, 1), anchor=ANCHOR, count=5).occurrences == (
        utc(2027, 1, 1, 9),
    )


def test_a_calendar_with_a_count_lists_only_what_is_left() -> None:
    timing = timing_from(
        "", "", "Europe/Berlin", None, None, None, rrule="FREQ=DAILY;COUNT=3;BYHOUR=9"
    )
    found = preview(timing, now=utc(2027, 1, 2, 12), anchor=utc(2027, 1, 1), count=10)
    assert [m.isoformat() for m in found.occurrences] == ["2027-01-03T09:00:00+01:00"]
    assert found.ended


def test_a_list_running_off_the_calendar_stops_with_the_reason() -> None:
    timing = timing_from("P1000D", "", "UTC", None, None, None)
    found = preview(timing, now=datetime(9997, 1, 1, tzinfo=UTC), anchor=ANCHOR, count=10)
    assert 0 < len(found.occurrences) < 10
    assert found.error is not None and found.error.field == "interval"


@pytest.mark.parametrize("count", [0, -1, MAX_COUNT + 1, True, 2.5])
def test_a_count_out_of_bounds_is_refused_naming_it(count: object) -> None:
    with pytest.raises(ScheduleError) as caught:
        check_count(count)  # type: ignore[arg-type]
    assert caught.value.field == "count"


def test_the_default_count_is_ten() -> None:
    assert DEFAULT_COUNT == 10


def cron_occurrence(expression: str, moment: datetime, zone: ZoneInfo) -> bool:
    """Whether ``moment`` is an occurrence of a cron expression in ``zone``: its wall time
    matches; or (a fixed-time expression) a matching wall time was skipped by the clocks
    right before it."""
    # In UTC first: a minute subtracted from a zoned datetime is wall-clock arithmetic, which
    # lands inside a spring gap instead of before the jump.
    moment = moment.astimezone(UTC)
    wall = moment.astimezone(zone).replace(tzinfo=None)
    if wall.second or wall.microsecond:
        return False
    probe = CronSim(expression, wall - timedelta(minutes=1))
    if next(probe) == wall:
        return True
    offset_before = (moment - timedelta(minutes=1)).astimezone(zone).utcoffset()
    jumped = offset_before != moment.astimezone(zone).utcoffset()
    if not jumped:
        return False
    skipped_from = (moment - timedelta(minutes=1)).astimezone(zone).replace(tzinfo=None)
    return next(CronSim(expression, skipped_from)) < wall


def calendar_instants(text: str, zone: ZoneInfo, lo: datetime, hi: datetime) -> set[datetime]:
    """Instants dateutil's expansion names in ``zone`` between ``lo`` and ``hi``: each wall
    time read at both folds; a skipped one (fixed rules) at the next real minute."""
    lines = text.split("\n")
    midnight = datetime.combine(ANCHOR.astimezone(zone).date(), datetime.min.time())
    rule = du.rrulestr(lines[0], dtstart=midnight)
    excluded = {
        datetime.strptime(day, "%Y%m%d").date()
        for line in lines[1:]
        for day in line.removeprefix("EXDATE:").split(",")
    }
    found: set[datetime] = set()
    start = (lo - timedelta(days=2)).astimezone(zone).replace(tzinfo=None)
    end = (hi + timedelta(days=2)).astimezone(zone).replace(tzinfo=None)
    for wall in rule.between(start, end, inc=True):
        if wall.date() in excluded:
            continue
        for fold in (0, 1):
            reading = wall.replace(tzinfo=zone, fold=fold).astimezone(UTC)
            if reading.astimezone(zone).replace(tzinfo=None) == wall:
                found.add(reading)
        moved = wall
        while moved.replace(tzinfo=zone).astimezone(UTC).astimezone(zone).replace(
            tzinfo=None
        ) != moved:
            moved += timedelta(minutes=1)
        found.add(moved.replace(tzinfo=zone).astimezone(UTC))
    return found


@settings(max_examples=120, deadline=None)
@given(
    expression=st.sampled_from(CRONS),
    zone=st.sampled_from(ZONES),
    now=instants,
    count=st.integers(1, 30),
    more=st.integers(1, 10),
)
# Chatham's clocks go back from 03:45 to 02:45 on 2026-04-05: the hour from 02:45 repeats.
@example(
    expression="*/20 * * * *",
    zone="Pacific/Chatham",
    now=datetime(2026, 4, 4, 12, tzinfo=UTC),
    count=30,
    more=10,
)
def test_a_cron_preview_is_increasing_made_of_occurrences_and_a_prefix_of_a_longer_one(
    expression: str, zone: str, now: datetime, count: int, more: int
) -> None:
    timing = timing_from("", expression, zone, None, None, None)
    found = preview(timing, now=now, anchor=ANCHOR, count=count).occurrences
    longer = preview(timing, now=now, anchor=ANCHOR, count=count + more).occurrences
    assert len(found) == count
    # In UTC: two times of one zone compare by their wall clocks, fold ignored, so an hour
    # the clocks repeat would look like going back.
    assert all(a.astimezone(UTC) < b.astimezone(UTC) for a, b in pairwise(found))
    assert found[0] >= now
    assert all(cron_occurrence(expression, m, ZoneInfo(zone)) for m in found)
    assert longer[:count] == found
    assert all(m.tzinfo == ZoneInfo(zone) for m in found)


@settings(max_examples=120, deadline=None)
@given(
    text=st.sampled_from(RRULES),
    zone=st.sampled_from(ZONES),
    now=instants,
    count=st.integers(1, 20),
    more=st.integers(1, 10),
)
def test_a_calendar_preview_is_increasing_made_of_occurrences_and_a_prefix_of_a_longer_one(
    text: str, zone: str, now: datetime, count: int, more: int
) -> None:
    timing = timing_from("", "", zone, None, None, None, rrule=text)
    found = preview(timing, now=now, anchor=ANCHOR, count=count).occurrences
    longer = preview(timing, now=now, anchor=ANCHOR, count=count + more).occurrences
    assert len(found) == count
    # In UTC: two times of one zone compare by their wall clocks, fold ignored, so an hour
    # the clocks repeat would look like going back.
    assert all(a.astimezone(UTC) < b.astimezone(UTC) for a, b in pairwise(found))
    assert found[0] >= now
    named = calendar_instants(text, ZoneInfo(zone), now, found[-1])
    assert {m.astimezone(UTC) for m in found} <= named
    # Nothing dateutil names in the span was left out (a repeated fixed time fires once).
    between = sorted(m for m in named if now <= m <= found[-1])
    assert len(between) >= len(found)
    assert longer[:count] == found
