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
