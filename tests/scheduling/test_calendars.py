"""Calendar schedules (RFC 5545 RRULE, RDATE, EXDATE) as a specification.

Pure: no database, no clock. The daylight-saving rule is cron's, so the calendar and cron are
held to each other where they mean the same times; the property tests compare with an
independent oracle built on dateutil's own expansion and a minute-by-minute reading of the
zone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from dateutil import rrule as du
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.timing.calendar_words import describe_calendar
from scheduling.timing.calendars import MAX_TEXT, CalendarError, CalendarRule, normalise
from scheduling.timing.claim_plans import plan_claim
from scheduling.timing.cron import CronExpression
from scheduling.timing.ics import read_ics
from scheduling.timing.schedules import (
    FiringRule,
    Misfire,
    ScheduleError,
    check_savable,
    timing_from,
)

pytestmark = [pytest.mark.specification, pytest.mark.pure]

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")
CHATHAM = ZoneInfo("Pacific/Chatham")
ZONES = [BERLIN, NEW_YORK, LORD_HOWE, CHATHAM, ZoneInfo("UTC")]
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def local(zone: ZoneInfo, *args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=zone, fold=fold).astimezone(UTC)  # type: ignore[misc]


def fires(
    text: str, after: datetime, count: int = 5, zone: ZoneInfo = BERLIN, anchor: datetime = ANCHOR
) -> list[datetime]:
    calendar = CalendarRule.parse(text)
    found: list[datetime] = []
    current: datetime | None = after
    while len(found) < count:
        assert current is not None
        current = calendar.next_after(current, zone, anchor=anchor)
        if current is None:
            break
        found.append(current)
    return found


def walls(moments: list[datetime], zone: ZoneInfo = BERLIN) -> list[str]:
    return [m.astimezone(zone).strftime("%Y-%m-%d %H:%M %z") for m in moments]


# --- the four cases the feature is for


def test_the_last_day_of_every_month() -> None:
    found = fires("RRULE:FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9;BYMINUTE=0", utc(2027, 1, 15), 4)
    assert walls(found) == [
        "2027-01-31 09:00 +0100",
        "2027-02-28 09:00 +0100",
        "2027-03-31 09:00 +0200",
        "2027-04-30 09:00 +0200",
    ]


def test_weekdays_only() -> None:
    found = fires("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=8;BYMINUTE=30", utc(2027, 1, 1), 6)
    assert [m.astimezone(BERLIN).strftime("%a %d") for m in found] == [
        "Fri 01", "Mon 04", "Tue 05", "Wed 06", "Thu 07", "Fri 08",
    ]  # fmt: skip


def test_the_second_tuesday_of_the_month() -> None:
    found = fires("FREQ=MONTHLY;BYDAY=2TU;BYHOUR=9", utc(2027, 1, 1), 3)
    assert walls(found) == [
        "2027-01-12 09:00 +0100",
        "2027-02-09 09:00 +0100",
        "2027-03-09 09:00 +0100",
    ]


def test_holidays_are_excluded_by_date_and_by_exact_time() -> None:
    text = "FREQ=DAILY;BYHOUR=9,17\nEXDATE:20261225,20261226\nEXDATE:20261224T170000"
    found = fires(text, utc(2026, 12, 24), 4)
    assert walls(found) == [
        "2026-12-24 09:00 +0100",
        "2026-12-27 09:00 +0100",
        "2026-12-27 17:00 +0100",
        "2026-12-28 09:00 +0100",
    ]


def test_rdate_adds_dates_and_a_set_may_be_only_dates() -> None:
    found = fires("FREQ=MONTHLY;BYMONTHDAY=1;BYHOUR=6\nRDATE:20270115T120000", utc(2027, 1, 1), 3)
    assert walls(found) == [
        "2027-01-01 06:00 +0100",
        "2027-01-15 12:00 +0100",
        "2027-02-01 06:00 +0100",
    ]
    only = fires("RDATE:20270301T090000,20270101T090000", utc(2026, 6, 1), 5)
    assert walls(only) == ["2027-01-01 09:00 +0100", "2027-03-01 09:00 +0100"]


def test_a_rule_without_times_fires_at_midnight_and_hourly_on_the_hour() -> None:
    assert walls(fires("FREQ=DAILY", utc(2027, 1, 1), 1)) == ["2027-01-02 00:00 +0100"]
    assert walls(fires("FREQ=HOURLY", utc(2027, 1, 1, 0, 20), 1)) == ["2027-01-01 02:00 +0100"]


def test_count_and_until_are_honoured() -> None:
    anchor = utc(2027, 1, 1)
    counted = fires("FREQ=DAILY;COUNT=3;BYHOUR=9", anchor, 10, anchor=anchor)
    assert len(counted) == 3
    # COUNT counts from the anchor: asked later, only the rest remain.
    rest = fires("FREQ=DAILY;COUNT=3;BYHOUR=9", counted[0], 10, anchor=anchor)
    assert rest == counted[1:]
    until = fires("FREQ=DAILY;BYHOUR=9;UNTIL=20270103", anchor, 10)
    assert walls(until) == [
        "2027-01-01 09:00 +0100",
        "2027-01-02 09:00 +0100",
        "2027-01-03 09:00 +0100",
    ]
    assert walls(fires("FREQ=DAILY;BYHOUR=9;UNTIL=20270102T085959", anchor, 10)) == [
        "2027-01-01 09:00 +0100"
    ]


def test_interval_counts_from_the_period_of_the_anchor() -> None:
    text = "FREQ=WEEKLY;INTERVAL=2;BYDAY=MO;BYHOUR=9"
    # 2027-01-06 is a Wednesday: its week (from Monday 2027-01-04) is the first.
    anchor = utc(2027, 1, 6)
    found = fires(text, anchor, 3, anchor=anchor)
    assert [m.astimezone(BERLIN).date().isoformat() for m in found] == [
        "2027-01-18", "2027-02-01", "2027-02-15",
    ]  # fmt: skip
    # Asked years later, the grid is still the anchor's (the rule starts near the question).
    later = fires(text, utc(2031, 3, 1), 2, anchor=anchor)
    weeks = [(m.astimezone(BERLIN).date() - datetime(2027, 1, 4).date()).days for m in later]
    assert all(days % 14 == 0 for days in weeks)


def test_a_far_anchor_gives_the_same_occurrences_as_a_near_one_for_interval_one() -> None:
    text = "FREQ=MINUTELY;INTERVAL=1;BYSECOND=0,30"
    near = fires(text, utc(2027, 5, 1), 4, anchor=utc(2027, 5, 1))
    far = fires(text, utc(2027, 5, 1), 4, anchor=utc(1900, 1, 1))
    assert near == far == [
        utc(2027, 5, 1, 0, 0, 30), utc(2027, 5, 1, 0, 1), utc(2027, 5, 1, 0, 1, 30),
        utc(2027, 5, 1, 0, 2),
    ]  # fmt: skip


def test_the_bysetpos_last_weekday_of_the_month() -> None:
    found = fires("FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=17", utc(2027, 1, 1), 3)
    assert [m.astimezone(BERLIN).date().isoformat() for m in found] == [
        "2027-01-29", "2027-02-26", "2027-03-31",
    ]  # fmt: skip


# --- daylight-saving time: cron's rule


def test_a_skipped_wall_time_fires_at_the_first_instant_after_the_jump() -> None:
    # Berlin skips 02:00-03:00 on 2026-03-29.
    found = fires("FREQ=DAILY;BYHOUR=2;BYMINUTE=30", utc(2026, 3, 27, 12), 3)
    assert walls(found) == [
        "2026-03-28 02:30 +0100",
        "2026-03-29 03:00 +0200",
        "2026-03-30 02:30 +0200",
    ]


def test_several_skipped_times_fire_once_together() -> None:
    found = fires("FREQ=DAILY;BYHOUR=2,3;BYMINUTE=0,30", utc(2026, 3, 29), 3)
    assert walls(found) == [
        "2026-03-29 03:00 +0200",
        "2026-03-29 03:30 +0200",
        "2026-03-30 02:00 +0200",
    ]


def test_a_repeated_wall_time_fires_once_on_summer_time() -> None:
    # Berlin repeats 02:00-03:00 on 2026-10-25.
    found = fires("FREQ=DAILY;BYHOUR=2;BYMINUTE=30", utc(2026, 10, 24, 12), 2)
    assert walls(found) == ["2026-10-25 02:30 +0200", "2026-10-26 02:30 +0100"]


def test_an_hourly_rule_fires_twice_in_the_repeated_hour_and_not_in_the_skipped_one() -> None:
    autumn = fires("FREQ=HOURLY;BYMINUTE=15", utc(2026, 10, 24, 23), 4)
    assert walls(autumn) == [
        "2026-10-25 01:15 +0200",
        "2026-10-25 02:15 +0200",
        "2026-10-25 02:15 +0100",
        "2026-10-25 03:15 +0100",
    ]
    spring = fires("FREQ=HOURLY;BYMINUTE=15", utc(2026, 3, 29, 0), 2)
    assert walls(spring) == ["2026-03-29 01:15 +0100", "2026-03-29 03:15 +0200"]


def test_lord_howe_skips_half_an_hour() -> None:
    # Lord Howe goes from 02:00 to 02:30 on 2026-10-04 (+10:30 to +11).
    found = fires("FREQ=DAILY;BYHOUR=2;BYMINUTE=10", utc(2026, 10, 2, 12), 3, zone=LORD_HOWE)
    assert walls(found, LORD_HOWE) == [
        "2026-10-03 02:10 +1030",
        "2026-10-04 02:30 +1100",
        "2026-10-05 02:10 +1100",
    ]


@pytest.mark.parametrize("zone", ZONES, ids=str)
@pytest.mark.parametrize(
    ("rrule", "cron"),
    [
        ("FREQ=DAILY;BYHOUR=2;BYMINUTE=30", "30 2 * * *"),
        ("FREQ=DAILY;BYHOUR=1,2,3;BYMINUTE=0,45", "0,45 1-3 * * *"),
        ("FREQ=HOURLY;BYMINUTE=15", "15 * * * *"),
        ("FREQ=MINUTELY;INTERVAL=20", "*/20 * * * *"),
        ("FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=2;BYMINUTE=45", "45 2 L * *"),
    ],
)
def test_the_calendar_and_cron_agree_through_the_clock_changes_of_a_year(
    zone: ZoneInfo, rrule: str, cron: str
) -> None:
    expression = CronExpression.parse(cron)
    calendar = CalendarRule.parse(rrule)
    # The clocks change in these spans in every zone here (north and south).
    spans = ((utc(2026, 3, 1), utc(2026, 4, 10)), (utc(2026, 9, 20), utc(2026, 11, 5)))
    for after, horizon in spans:
        by_cron, by_calendar = [], []
        current = after
        while current < horizon:
            current = expression.next_after(current, zone)
            by_cron.append(current)
        current = after
        while current < horizon:
            found = calendar.next_after(current, zone, anchor=utc(2026, 1, 1))
            assert found is not None
            current = found
            by_calendar.append(current)
        assert by_calendar == by_cron


# --- refusals


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "is empty"),
        ("FREQ=MONTHLY;BYMONTH=2;BYMONTHDAY=30", "never fires"),
        ("FREQ=MONTHLY;BYHOUR=9", "FREQ=MONTHLY needs the days"),
        ("DTSTART:20260101T090000\nRRULE:FREQ=DAILY", "DTSTART is not accepted"),
        ("FREQ=SECONDLY", "FREQ=SECONDLY is not accepted"),
        ("FREQ=FORTNIGHTLY", "is not one of"),
        ("FREQ=DAILY;BYHOUR=24", "BYHOUR value '24'"),
        ("FREQ=DAILY;BYDAY=2TU", "only MONTHLY or YEARLY"),
        ("FREQ=WEEKLY;BYDAY=XX", "BYDAY value 'XX'"),
        ("FREQ=DAILY;INTERVAL=0", "INTERVAL=0"),
        ("FREQ=DAILY;COUNT=2;UNTIL=20270101", "both COUNT and UNTIL"),
        ("FREQ=DAILY\nFREQ=WEEKLY;BYDAY=MO", "one RRULE"),
        ("RDATE:20270230T090000", "not a real date"),
        ("RDATE:20270101T090000\nEXDATE:20270101", "never fires"),
        ("EXRULE:FREQ=DAILY", "EXRULE"),
        ("VEVENT:x", "unknown property"),
        ("FREQ=DAILY;BYEASTER=0", "BYEASTER is not supported"),
        ("RDATE;TZID=Mars/Olympus:20270101T090000", "TZID='Mars/Olympus' is not a known"),
        ("RDATE;TZID=UTC:20270101T090000Z", "in UTC and has a TZID"),
        ("RDATE;VALUE=PERIOD:20270101T090000/PT1H", "VALUE=PERIOD is not supported"),
        ("EXDATE;VALUE=DATE:20270101T090000\nFREQ=DAILY", "is not a date such as"),
        ("FREQ=DAILY;COUNT=99999999", "COUNT=99999999"),
        ("x" * (MAX_TEXT + 1), f"at most {MAX_TEXT}"),
    ],
)
def test_bad_calendars_are_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(CalendarError, match=None) as caught:
        CalendarRule.parse(text)
    assert reason in str(caught.value)
    assert "\n" not in str(caught.value)


def test_errors_name_the_rrule_field() -> None:
    with pytest.raises(ScheduleError) as caught:
        timing_from("", "", "Europe/Berlin", None, None, None, rrule="FREQ=MONTHLY")
    assert caught.value.field == "rrule"
    assert str(caught.value).startswith("rrule: FREQ=MONTHLY needs the days")


def test_exactly_one_kind_counts_the_calendar() -> None:
    with pytest.raises(ScheduleError, match="exactly one"):
        timing_from("", "0 9 * * *", "UTC", None, None, None, rrule="FREQ=DAILY")


def test_a_calendar_that_has_ended_is_refused_when_saved() -> None:
    with pytest.raises(ScheduleError, match="rrule: has no occurrence from now on"):
        check_savable(
            "", "", "Europe/Berlin", None, None, None,
            now=utc(2027, 1, 1), rrule="FREQ=DAILY;UNTIL=20261231",
        )  # fmt: skip


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=DAILY;INTERVAL=7;BYDAY=MO,TU",
        "FREQ=DAILY;INTERVAL=14;BYDAY=WE",
        "FREQ=YEARLY;INTERVAL=4;BYMONTH=2;BYMONTHDAY=29",
        "FREQ=DAILY;INTERVAL=7;BYMONTHDAY=13;BYDAY=FR",
        "FREQ=HOURLY;INTERVAL=168;BYDAY=MO",
    ],
)
def test_a_rule_that_fires_from_some_start_is_not_refused_as_never_firing(rule: str) -> None:
    calendar = CalendarRule.parse(f"RRULE:{rule}")
    fired = []
    for start in (
        utc(2026 + year, 1, 1) + timedelta(days) for year in range(4) for days in range(7)
    ):
        try:
            fired.append(calendar.next_after(start - timedelta(seconds=1), UTC, anchor=start))
        except CalendarError:  # this start keeps no matching period
            continue
    assert any(occurrence is not None for occurrence in fired)


def test_a_schedule_whose_interval_keeps_no_matching_period_from_its_start_is_refused() -> None:
    saturday = utc(2026, 11, 28, 12)
    with pytest.raises(ScheduleError) as caught:
        check_savable(
            "", "", "UTC", None, None, None, now=saturday, rrule="FREQ=DAILY;INTERVAL=7;BYDAY=MO"
        )
    assert caught.value.field == "rrule"
    assert "INTERVAL=7 counts its periods from the schedule's start" in str(caught.value)
    assert "2026-11-28 11:59 UTC" in str(caught.value)


def test_the_same_schedule_from_a_matching_start_is_saved() -> None:
    timing = check_savable(
        "", "", "UTC", None, utc(2026, 11, 30), None,
        now=utc(2026, 11, 28, 12), rrule="FREQ=DAILY;INTERVAL=7;BYDAY=MO",
    )  # fmt: skip
    first = timing.occurrence_at_or_after(utc(2026, 11, 28, 12), anchor=utc(2026, 11, 30))
    assert first == utc(2026, 11, 30)


def test_a_calendar_keeps_its_zone_when_saved() -> None:
    timing = check_savable(
        "", "", "Europe/Berlin", None, None, None, now=utc(2027, 1, 1), rrule="FREQ=DAILY"
    )
    assert timing.zone == BERLIN


# --- windows, misfire and jitter come from FiringRule, as for cron


def test_a_window_bounds_a_calendar() -> None:
    timing = timing_from(
        "", "", "Europe/Berlin", None, utc(2027, 1, 10), utc(2027, 1, 12, 12),
        rrule="FREQ=DAILY;BYHOUR=9",
    )  # fmt: skip
    found = list(timing.occurrences(utc(2027, 1, 1), anchor=utc(2026, 1, 1)))
    assert walls(found) == ["2027-01-10 09:00 +0100", "2027-01-11 09:00 +0100",
                            "2027-01-12 09:00 +0100"]  # fmt: skip


def test_a_calendar_job_late_by_three_days_coalesces_into_one_run() -> None:
    timing = timing_from("", "", "Europe/Berlin", None, None, None, rrule="FREQ=DAILY;BYHOUR=9")
    due = local(BERLIN, 2027, 1, 1, 9)
    plan = plan_claim(
        timing, anchor=ANCHOR, due=due, now=local(BERLIN, 2027, 1, 4, 12),
        misfire=Misfire.COALESCE, allow_overlap=False, grace=timedelta(seconds=60),
        catch_up_limit=10,
    )  # fmt: skip
    assert plan.run == (due,)
    assert plan.next_occurrence == local(BERLIN, 2027, 1, 5, 9)


def test_firing_rule_takes_a_calendar_and_names_its_errors() -> None:
    rule = FiringRule(calendar=CalendarRule.parse("FREQ=DAILY;BYHOUR=9"), zone=BERLIN)
    assert rule.next_after(utc(2027, 1, 1), anchor=ANCHOR) == local(BERLIN, 2027, 1, 1, 9)
    late = FiringRule(calendar=CalendarRule.parse("FREQ=DAILY;BYHOUR=9"), zone=BERLIN)
    with pytest.raises(ScheduleError) as caught:
        late.next_after(datetime(9999, 12, 31, 12, tzinfo=UTC), anchor=ANCHOR)
    assert caught.value.field == "rrule"


# --- in words


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "RRULE:FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9\nEXDATE:20261231",
            "the last day of every month at 09:00 (Europe/Berlin), except 2026-12-31",
        ),
        (
            "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=8;BYMINUTE=30",
            "every week on Monday to Friday at 08:30 (Europe/Berlin)",
        ),
        (
            "FREQ=MONTHLY;BYDAY=2TU;BYHOUR=9",
            "the second Tuesday of every month at 09:00 (Europe/Berlin)",
        ),
        ("FREQ=HOURLY;INTERVAL=2", "every 2 hours on the hour (Europe/Berlin)"),
        ("RDATE:20270101T090000", "on 2027-01-01 09:00 (Europe/Berlin)"),
        ("not a rule", "not a rule"),
    ],
)
def test_a_calendar_reads_in_words(text: str, words: str) -> None:
    assert describe_calendar(text, "Europe/Berlin") == words


# --- properties against an independent oracle

_FIXED_FREQS = {"DAILY": du.DAILY, "WEEKLY": du.WEEKLY, "MONTHLY": du.MONTHLY}


@st.composite
def calendars(draw: st.DrawFn) -> str:
    freq = draw(st.sampled_from(["DAILY", "WEEKLY", "MONTHLY", "HOURLY", "MINUTELY"]))
    parts = [f"FREQ={freq}"]
    if freq == "MINUTELY":
        parts.append(f"INTERVAL={draw(st.sampled_from([7, 15, 30, 45]))}")
        parts.append(f"BYHOUR={draw(st.sampled_from(['0,1,2,3', '1,2', '2']))}")
    elif freq == "HOURLY":
        parts.append(f"BYMINUTE={draw(st.sampled_from(['0', '15', '0,30', '10,50']))}")
    else:
        hours = draw(st.lists(st.sampled_from([0, 1, 2, 3, 9, 23]), min_size=1, max_size=3))
        minutes = draw(st.lists(st.sampled_from([0, 15, 30, 45]), min_size=1, max_size=2))
        parts.append("BYHOUR=" + ",".join(str(h) for h in sorted(set(hours))))
        parts.append("BYMINUTE=" + ",".join(str(m) for m in sorted(set(minutes))))
    if freq == "WEEKLY":
        parts.append("BYDAY=" + draw(st.sampled_from(["SU", "MO,FR", "SA,SU"])))
    if freq == "MONTHLY":
        parts.append(draw(st.sampled_from(["BYMONTHDAY=-1", "BYDAY=-1SU", "BYDAY=1SU,2SA"])))
    lines = [";".join(parts)]
    if draw(st.booleans()):
        lines.append("EXDATE:20261025,20270328,20261004")
    return "\n".join(lines)


def oracle(text: str, after: datetime, zone: ZoneInfo, count: int) -> list[datetime]:
    """The next instants by the rule as stated: dateutil's wall times, each read in the zone
    minute by minute (skipped ones moved to the next real minute, or dropped; repeated ones
    once or twice), with no use of the module under test."""
    lines = text.split("\n")
    # The rule's first period starts at the anchor's midnight in the zone.
    midnight = datetime.combine(ANCHOR.astimezone(zone).date(), datetime.min.time())
    rule = du.rrulestr(lines[0], dtstart=midnight)
    excluded = set()
    for line in lines[1:]:
        for item in line.removeprefix("EXDATE:").split(","):
            excluded.add(datetime.strptime(item, "%Y%m%d").date())
    fixed = not text.startswith(("FREQ=HOURLY", "FREQ=MINUTELY"))
    start = (after - timedelta(days=2)).astimezone(zone).replace(tzinfo=None)
    instants: set[datetime] = set()
    for wall in rule.xafter(start):
        if wall.date() in excluded:
            continue
        readings = sorted({wall.replace(tzinfo=zone, fold=f).astimezone(UTC) for f in (0, 1)})
        real = [r for r in readings if r.astimezone(zone).replace(tzinfo=None) == wall]
        if fixed:
            if real:
                instants.add(real[0])
            else:
                moved = wall
                while True:
                    moved += timedelta(minutes=1)
                    reading = moved.replace(tzinfo=zone).astimezone(UTC)
                    if reading.astimezone(zone).replace(tzinfo=None) == moved:
                        instants.add(reading)
                        break
        else:
            instants.update(real)
        later = sorted(i for i in instants if i > after)
        if len(later) >= count and wall - timedelta(days=1) > later[count - 1].astimezone(
            zone
        ).replace(tzinfo=None):
            return later[:count]
    raise AssertionError("the oracle ran out of occurrences")


@settings(max_examples=150, deadline=None)
@given(
    text=calendars(),
    zone=st.sampled_from(ZONES),
    after=st.datetimes(
        min_value=datetime(2026, 1, 1), max_value=datetime(2028, 12, 31), timezones=st.just(UTC)
    ),
)
def test_next_occurrences_are_what_dateutil_yields_in_the_zone(
    text: str, zone: ZoneInfo, after: datetime
) -> None:
    found = fires(text, after, 6, zone=zone)
    # In UTC: two times of one zone compare by their wall clocks, fold ignored, so an hour
    # the clocks repeat would look like going back.
    assert all(a.astimezone(UTC) < b.astimezone(UTC) for a, b in pairwise(found))
    assert found == oracle(text, after, zone, 6)


@settings(max_examples=60, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    after=st.datetimes(
        min_value=datetime(2026, 1, 1), max_value=datetime(2028, 12, 31), timezones=st.just(UTC)
    ),
)
def test_around_every_clock_change_the_daily_half_past_two_is_cron_s(
    zone: ZoneInfo, after: datetime
) -> None:
    calendar = fires("FREQ=DAILY;BYHOUR=2;BYMINUTE=30", after, 3, zone=zone)
    expression = CronExpression.parse("30 2 * * *")
    by_cron, current = [], after
    for _ in range(3):
        current = expression.next_after(current, zone)
        by_cron.append(current)
    assert calendar == by_cron


_PICKING_DAYS = {
    "YEARLY": ["BYMONTH=2,8;BYDAY=MO,FR", "BYWEEKNO=1,20;BYDAY=TU", "BYYEARDAY=1,-1,100",
               "BYMONTH=3;BYDAY=2TU,-1FR", "BYDAY=MO"],
    "MONTHLY": ["BYDAY=MO,TU,WE,TH,FR", "BYMONTHDAY=1,15,-1", "BYDAY=1SU,-1SA",
                "BYMONTHDAY=28,29,30"],
    "WEEKLY": ["BYDAY=MO,WE,FR", "BYDAY=SA,SU", "BYDAY=TU;BYMONTH=1,7"],
    "DAILY": ["", "BYDAY=MO,TU", "BYMONTHDAY=-1"],
    "HOURLY": ["", "BYMONTHDAY=1,2,3", "BYDAY=SU"],
    "MINUTELY": ["BYDAY=SA", "BYMONTHDAY=-1"],
}  # fmt: skip


@st.composite
def picking_calendars(draw: st.DrawFn) -> str:
    """Rules with BYSETPOS of every frequency, on and off an INTERVAL grid."""
    freq = draw(st.sampled_from(sorted(_PICKING_DAYS)))
    intervals = [1, 1, 2, 3] if freq == "DAILY" else [1, 1, 2, 3, 7]  # 7 days: one weekday
    parts = [f"FREQ={freq}", f"INTERVAL={draw(st.sampled_from(intervals))}"]
    days = draw(st.sampled_from(_PICKING_DAYS[freq]))
    if days:
        parts.append(days)
    if freq in ("YEARLY", "MONTHLY", "WEEKLY", "DAILY"):
        parts.append(f"BYHOUR={draw(st.sampled_from(['9', '0,12', '1,2,23']))}")
    if freq != "MINUTELY":
        parts.append(f"BYMINUTE={draw(st.sampled_from(['0', '0,30', '5,10,15,59']))}")
    parts.append(f"BYSECOND={draw(st.sampled_from(['0', '0,1', '7,8,9']))}")
    positions = draw(st.lists(st.sampled_from([2, 3, -2, 5, -7, 40]), max_size=2))
    positions.append(draw(st.sampled_from([1, -1])))
    parts.append("BYSETPOS=" + ",".join(str(p) for p in positions))
    return ";".join(parts)


@settings(max_examples=150, deadline=None)
@given(
    text=picking_calendars(),
    after=st.datetimes(
        min_value=datetime(2026, 1, 1), max_value=datetime(2028, 12, 31), timezones=st.just(UTC)
    ),
)
def test_bysetpos_picks_what_dateutil_picks_from_each_periods_whole_set(
    text: str, after: datetime
) -> None:
    """The positions are found by arithmetic over the period's days and times, never by
    building the set (31 million a year for a rule naming every second): the same picks as
    dateutil's, which builds it."""
    found = fires(text, after, 6, zone=ZoneInfo("UTC"))
    start = ANCHOR.replace(tzinfo=None)  # the anchor's period starts the grid
    if text.startswith("FREQ=WEEKLY"):
        start -= timedelta(days=start.weekday())
    expected = []
    for wall in du.rrulestr(text, dtstart=start).xafter(after.replace(tzinfo=None)):
        if wall > after.replace(tzinfo=None):
            expected.append(wall.replace(tzinfo=UTC))
        if len(expected) == 6:
            break
    assert found == expected


# --- RFC 5545's other forms of RDATE, EXDATE and UNTIL (as calendar tools export them)


def test_an_exdate_in_utc_drops_the_occurrence_at_that_instant_in_any_zone() -> None:
    # 09:00 in Berlin on 2027-01-05 is 08:00 UTC.
    found = fires("FREQ=DAILY;BYHOUR=9\nEXDATE:20270105T080000Z", utc(2027, 1, 4), 3)
    assert walls(found) == [
        "2027-01-04 09:00 +0100", "2027-01-06 09:00 +0100", "2027-01-07 09:00 +0100",
    ]  # fmt: skip
    in_utc = fires("FREQ=DAILY;BYHOUR=9\nEXDATE:20270101T090000Z", utc(2026, 12, 31), 2, zone=UTC)
    assert in_utc == [utc(2026, 12, 31, 9), utc(2027, 1, 2, 9)]


def test_a_windows_zone_name_in_a_tzid_is_read_as_its_iana_zone() -> None:
    """Outlook and Exchange write Windows names (CLDR's mapping gives the IANA zone)."""
    text = "FREQ=DAILY;BYHOUR=9\nEXDATE;TZID=W. Europe Standard Time:20270105T090000"
    assert walls(fires(text, utc(2027, 1, 4), 2)) == [
        "2027-01-04 09:00 +0100", "2027-01-06 09:00 +0100",
    ]  # fmt: skip
    quoted = 'RDATE;TZID="Eastern Standard Time":20270105T090000'
    assert fires(quoted, utc(2027, 1, 1), 1) == [utc(2027, 1, 5, 14)]
    with pytest.raises(CalendarError, match="not a known IANA \\(or Windows\\) time zone"):
        CalendarRule.parse("RDATE;TZID=Customized Time Zone:20270105T090000")


def test_normalised_times_keep_the_years_four_digits() -> None:
    """A refusal quotes the text as it was typed, not ``10101T000000``."""
    assert normalise("FREQ=DAILY;UNTIL=00010101T000000Z", "UTC") == (
        "FREQ=DAILY;UNTIL=00010101T000000"
    )
    assert normalise("RDATE:09990101T120000Z", "UTC") == "RDATE:09990101T120000"


def test_an_rdate_with_a_tzid_fires_at_that_zones_wall_time() -> None:
    found = fires("RDATE;TZID=America/New_York:20270105T090000", utc(2027, 1, 1), 2)
    assert found == [local(NEW_YORK, 2027, 1, 5, 9)]
    assert walls(found) == ["2027-01-05 15:00 +0100"]


def test_an_rdate_in_utc_and_an_exdate_with_a_tzid_of_the_same_instant_cancel_out() -> None:
    text = (
        "FREQ=DAILY;BYHOUR=12\nRDATE:20270105T170000Z\nEXDATE;TZID=America/New_York:20270105T120000"
    )
    found = fires(text, utc(2027, 1, 5, 12), 2)
    assert walls(found) == ["2027-01-06 12:00 +0100", "2027-01-07 12:00 +0100"]


def test_an_all_day_rdate_fires_at_midnight_and_an_all_day_exdate_drops_the_day() -> None:
    text = "FREQ=DAILY;BYHOUR=9\nRDATE;VALUE=DATE:20270110\nEXDATE;VALUE=DATE:20270111"
    found = fires(text, utc(2027, 1, 9, 12), 3)
    assert walls(found) == [
        "2027-01-10 00:00 +0100", "2027-01-10 09:00 +0100", "2027-01-12 09:00 +0100",
    ]  # fmt: skip
    assert fires("RDATE;VALUE=DATE-TIME:20270110T080000", utc(2027, 1, 1), 1) == [
        local(BERLIN, 2027, 1, 10, 8)
    ]


def test_until_in_utc_is_the_instant_the_rule_ends_at() -> None:
    # 09:00 Berlin is 08:00 UTC: an UNTIL of 08:00 UTC keeps that day's occurrence.
    found = fires("FREQ=DAILY;BYHOUR=9;UNTIL=20270103T080000Z", utc(2027, 1, 1), 10)
    assert walls(found) == [
        "2027-01-01 09:00 +0100", "2027-01-02 09:00 +0100", "2027-01-03 09:00 +0100",
    ]  # fmt: skip
    earlier = fires("FREQ=DAILY;BYHOUR=9;UNTIL=20270103T075959Z", utc(2027, 1, 1), 10)
    assert len(earlier) == 2


def test_normalising_in_the_jobs_zone_writes_instants_as_its_wall_times() -> None:
    text = (
        "FREQ=DAILY;BYHOUR=9;UNTIL=20271231T225959Z\n"
        "RDATE;TZID=America/New_York:20270105T090000\n"
        "EXDATE:20270106T080000Z,20270107T080000Z\n"
        "EXDATE;VALUE=DATE:20271225"
    )
    assert normalise(text, zone="Europe/Berlin") == (
        "FREQ=DAILY;BYHOUR=9;UNTIL=20271231T235959\n"
        "RDATE:20270105T150000\n"
        "EXDATE:20270106T090000,20270107T090000\n"
        "EXDATE:20271225"
    )
    # The same occurrences either way.
    assert fires(text, utc(2027, 1, 1), 8) == fires(
        normalise(text, "Europe/Berlin"), utc(2027, 1, 1), 8
    )


def test_an_instant_the_jobs_zone_repeats_stays_in_utc_when_normalised() -> None:
    # 00:30 UTC on 2026-10-25 is 02:30 CEST, a wall time Berlin has twice that night.
    assert normalise("RDATE:20261025T003000Z", zone="Europe/Berlin") == "RDATE:20261025T003000Z"
    assert fires("RDATE:20261025T013000Z", utc(2026, 10, 24), 1) == [utc(2026, 10, 25, 1, 30)]


def test_a_calendar_in_utc_forms_is_saved_in_the_jobs_zone() -> None:
    timing = check_savable(
        "", "", "Europe/Berlin", None, None, None,
        now=utc(2027, 1, 1), rrule="FREQ=DAILY;BYHOUR=9\nEXDATE:20270102T080000Z",
    )  # fmt: skip
    assert timing.next_after(utc(2027, 1, 1, 9), anchor=ANCHOR) == local(BERLIN, 2027, 1, 3, 9)


# --- calendar files

ICS = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Example//EN\r\n"
    "BEGIN:VTIMEZONE\r\nTZID:Europe/Berlin\r\nEND:VTIMEZONE\r\n"
    "BEGIN:VEVENT\r\nUID:standup@example.com\r\nSUMMARY:Stand-up\r\n"
    "DTSTART;TZID=Europe/Berlin:20270104T093000\r\n"
    "RRULE:FREQ=WEEKLY;BYDAY=MO,WE,\r\n FR;UNTIL=20271231T225959Z\r\n"
    "EXDATE;TZID=Europe/Berlin:20270106T093000\r\n"
    "BEGIN:VALARM\r\nACTION:DISPLAY\r\nTRIGGER:-PT10M\r\nEND:VALARM\r\n"
    "END:VEVENT\r\nEND:VCALENDAR\r\n"
)


def test_a_calendar_file_gives_its_events_recurrence_completed_from_dtstart() -> None:
    event = read_ics(ICS)
    assert event.zone == "Europe/Berlin"
    assert event.start == local(BERLIN, 2027, 1, 4, 9, 30)
    assert event.text.splitlines() == [
        "RRULE:FREQ=WEEKLY;BYDAY=MO,WE,FR;UNTIL=20271231T225959Z;BYHOUR=9;BYMINUTE=30;BYSECOND=0",
        "EXDATE;TZID=Europe/Berlin:20270106T093000",
    ]
    found = fires(event.text, utc(2027, 1, 4), 3)
    assert walls(found) == [
        "2027-01-04 09:30 +0100", "2027-01-08 09:30 +0100", "2027-01-11 09:30 +0100",
    ]  # fmt: skip


def test_a_weekly_event_without_byday_fires_on_dtstarts_weekday() -> None:
    ics = "BEGIN:VEVENT\nDTSTART:20270105T080000Z\nRRULE:FREQ=WEEKLY\nEND:VEVENT\n"
    event = read_ics(ics)
    assert event.zone == "UTC"
    assert "BYDAY=TU" in event.text


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("BEGIN:VCALENDAR\nEND:VCALENDAR\n", "holds no VEVENT"),
        ("BEGIN:VEVENT\nRRULE:FREQ=DAILY\nEND:VEVENT\nBEGIN:VEVENT\nEND:VEVENT\n", "2 VEVENTs"),
        ("BEGIN:VEVENT\nSUMMARY:x\nEND:VEVENT\n", "no RRULE or RDATE"),
    ],
)
def test_a_calendar_file_without_exactly_one_recurring_event_is_refused(
    content: str, reason: str
) -> None:
    with pytest.raises(CalendarError, match=reason):
        read_ics(content)
