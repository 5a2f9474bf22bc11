"""``jobs add|edit --rrule @FILE.ics``: a calendar tool's export becomes a job's calendar.

The file's one VEVENT gives its RRULE, RDATE and EXDATE lines (in the forms calendar tools
write: UTC, TZID, folded lines), its DTSTART the time of day, the zone and the start; a file
with no event or several is refused in one line naming the file.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from scheduling.models import Job

pytestmark = pytest.mark.django_db

NOOP = "scheduling.diagnostics.noop"
EXPORT = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Example Calendar//EN\r\n"
    "BEGIN:VEVENT\r\nUID:1@example.com\r\nSUMMARY:Month end\r\n"
    "DTSTART;TZID=Europe/Berlin:20260130T090000\r\n"
    "RRULE:FREQ=MONTHLY;BYMONTHDAY=-1;UNTIL=20301231T\r\n 225959Z\r\n"
    "EXDATE:20261231T080000Z\r\n"
    "RDATE;TZID=America/New_York:20270115T090000\r\n"
    "END:VEVENT\r\nEND:VCALENDAR\r\n"
)


def add(*argv: str) -> str:
    out = StringIO()
    call_command("jobs", "add", *argv, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_a_calendar_export_makes_a_job_in_its_zone_with_its_times_written_there(
    tmp_path: Path, owner: Any
) -> None:
    path = tmp_path / "month-end.ics"
    path.write_text(EXPORT, encoding="utf-8")
    add("month-end", "--task", NOOP, "--owner", owner.username, "--rrule", f"@{path}")
    schedule = Job.objects.select_related("schedule").get(name="month-end").schedule
    assert schedule.timezone == "Europe/Berlin"
    assert schedule.rrule.splitlines() == [
        "RRULE:FREQ=MONTHLY;BYMONTHDAY=-1;UNTIL=20301231T235959;BYHOUR=9;BYMINUTE=0;BYSECOND=0",
        "EXDATE:20261231T090000",
        "RDATE:20270115T150000",
    ]
    assert schedule.starts_at is not None and schedule.starts_at.isoformat().startswith(
        "2026-01-30T08:00"
    )


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("BEGIN:VCALENDAR\nEND:VCALENDAR\n", "holds no VEVENT"),
        ("BEGIN:VEVENT\nRRULE:FREQ=DAILY\nEND:VEVENT\n" * 2, "holds 2 VEVENTs"),
    ],
)
def test_a_file_without_exactly_one_event_is_refused_naming_it(
    tmp_path: Path, owner: Any, content: str, reason: str
) -> None:
    path = tmp_path / "bad.ics"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CommandError) as caught:
        add("bad", "--task", NOOP, "--owner", owner.username, "--rrule", f"@{path}")
    assert str(path) in str(caught.value) and reason in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_tz_other_than_the_events_is_refused(tmp_path: Path, owner: Any) -> None:
    path = tmp_path / "month-end.ics"
    path.write_text(EXPORT, encoding="utf-8")
    with pytest.raises(CommandError, match="DTSTART zone Europe/Berlin"):
        add("x", "--task", NOOP, "--owner", owner.username, "--rrule", f"@{path}", "--tz", "UTC")


#: An Outlook export: Windows zone names (quoted and not), a VTIMEZONE block whose own RRULE
#: lines belong to the zone, an alarm inside the event, folded lines and CRLF.
OUTLOOK_EXPORT = "\r\n".join(
    [
        "BEGIN:VCALENDAR",
        "PRODID:-//Microsoft Corporation//Outlook 16.0 MIMEDIR//EN",
        "VERSION:2.0",
        "METHOD:PUBLISH",
        "X-MS-OLK-FORCEINSPECTOROPEN:TRUE",
        "BEGIN:VTIMEZONE",
        "TZID:W. Europe Standard Time",
        "BEGIN:STANDARD",
        "DTSTART:16011028T030000",
        "RRULE:FREQ=YEARLY;BYDAY=-1SU;BYMONTH=10",
        "TZOFFSETFROM:+0200",
        "TZOFFSETTO:+0100",
        "END:STANDARD",
        "BEGIN:DAYLIGHT",
        "DTSTART:16010325T020000",
        "RRULE:FREQ=YEARLY;BYDAY=-1SU;BYMONTH=3",
        "TZOFFSETFROM:+0100",
        "TZOFFSETTO:+0200",
        "END:DAYLIGHT",
        "END:VTIMEZONE",
        "BEGIN:VEVENT",
        "CLASS:PUBLIC",
        "CREATED:20261120T101500Z",
        "DESCRIPTION:Weekly planning\\, with the notes of the previous week and the agen",
        " da for the next.\\n",
        'DTEND;TZID="W. Europe Standard Time":20261202T093000',
        "DTSTAMP:20261120T101500Z",
        'DTSTART;TZID="W. Europe Standard Time":20261202T090000',
        "EXDATE;TZID=W. Europe Standard Time:20261223T090000,20261230T09000",
        " 0",
        "LAST-MODIFIED:20261120T101500Z",
        "LOCATION:Microsoft Teams Meeting",
        "PRIORITY:5",
        "RRULE:FREQ=WEEKLY;BYDAY=WE;WKST=MO",
        "SEQUENCE:0",
        "SUMMARY;LANGUAGE=en-us:Weekly planning",
        "TRANSP:OPAQUE",
        "UID:040000008200E00074C5B7101A82E00800000000D0B5C2E4A8F1DA01000000000000000010",
        " 000000B2C5E0F0A1E3B44B9A1C2D3E4F5A6B7C8",
        "X-MICROSOFT-CDO-BUSYSTATUS:BUSY",
        "X-MICROSOFT-CDO-IMPORTANCE:1",
        "BEGIN:VALARM",
        "TRIGGER:-PT15M",
        "ACTION:DISPLAY",
        "DESCRIPTION:Reminder",
        "END:VALARM",
        "END:VEVENT",
        "END:VCALENDAR",
        "",
    ]
)


def test_an_outlook_export_with_windows_zone_names_makes_a_job_in_the_iana_zone(
    tmp_path: Path, owner: Any
) -> None:
    """Outlook and Exchange name zones the Windows way; each is read as its IANA zone (CLDR's
    mapping), for DTSTART and for the TZID of EXDATE and RDATE alike."""
    path = tmp_path / "outlook.ics"
    path.write_bytes(OUTLOOK_EXPORT.encode("utf-8"))
    add("planning", "--task", NOOP, "--owner", owner.username, "--rrule", f"@{path}")
    schedule = Job.objects.select_related("schedule").get(name="planning").schedule
    assert schedule.timezone == "Europe/Berlin"
    assert schedule.rrule.splitlines() == [
        "EXDATE:20261223T090000,20261230T090000",
        "RRULE:FREQ=WEEKLY;BYDAY=WE;WKST=MO;BYHOUR=9;BYMINUTE=0;BYSECOND=0",
    ]
    assert schedule.starts_at is not None
    assert schedule.starts_at.isoformat() == "2026-12-02T08:00:00+00:00"


def test_the_tz_of_an_outlook_export_may_be_given_as_the_zone_it_maps_to(
    tmp_path: Path, owner: Any
) -> None:
    path = tmp_path / "outlook.ics"
    path.write_bytes(OUTLOOK_EXPORT.encode("utf-8"))
    argv = ["--task", NOOP, "--owner", owner.username, "--rrule", f"@{path}"]
    add("planning", *argv, "--tz", "Europe/Berlin")
    with pytest.raises(CommandError, match="DTSTART zone Europe/Berlin") as caught:
        add("elsewhere", *argv, "--tz", "Europe/Paris")
    assert "\n" not in str(caught.value)


def test_a_windows_zone_name_is_read_in_typed_rdate_and_exdate_lines(owner: Any) -> None:
    rrule = (
        "FREQ=DAILY;BYHOUR=9\n"
        "EXDATE;TZID=Pacific Standard Time:20270105T000000\n"
        'RDATE;TZID="India Standard Time":20270110T093000'
    )
    add("daily", "--task", NOOP, "--owner", owner.username, "--tz", "UTC", "--rrule", rrule)
    schedule = Job.objects.select_related("schedule").get(name="daily").schedule
    assert schedule.rrule.splitlines() == [
        "FREQ=DAILY;BYHOUR=9",
        "EXDATE:20270105T080000",
        "RDATE:20270110T040000",
    ]


def test_an_unknown_zone_name_is_refused_naming_the_line(tmp_path: Path, owner: Any) -> None:
    path = tmp_path / "custom.ics"
    path.write_text(
        OUTLOOK_EXPORT.replace('TZID="W. Europe Standard Time":2026', "TZID=Customized:2026"),
        encoding="utf-8",
    )
    with pytest.raises(CommandError) as caught:
        add("custom", "--task", NOOP, "--owner", owner.username, "--rrule", f"@{path}")
    assert "DTSTART TZID='Customized' is not a known IANA (or Windows) time zone" in str(
        caught.value
    )
