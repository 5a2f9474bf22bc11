"""Calendars and previews with a database: ``jobs next``, ``--rrule``, the API, the admin.

``jobs next NAME --count N [--json]`` lists a job's next occurrences in UTC and in its zone;
``scheduling.api.next_occurrences`` returns the same as aware datetimes; the job's admin page
lists the next ten, and its preview endpoint answers for an unsaved timing without saving
anything, to users who may view the job.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from scheduling import api
from scheduling.models import Job, JobStatus, Schedule
from scheduling.stages import claims, controls
from tests.factories import create_job
from tests.scheduling.test_admin_jobs import form_data

pytestmark = pytest.mark.django_db

NOOP = "scheduling.diagnostics.noop"
JOBS = "/admin/scheduling/job/"
BERLIN = ZoneInfo("Europe/Berlin")
LAST_DAY = "FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9"


def call(*argv: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*argv, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def refused(*argv: str) -> str:
    with pytest.raises(CommandError) as caught:
        call(*argv)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def calendar_job(owner: Any, name: str = "month end", **options: Any) -> Job:
    return create_job(
        owner=owner, name=name, task=NOOP, rrule=options.pop("rrule", LAST_DAY),
        tz=options.pop("tz", "Europe/Berlin"), now=options.pop("now", timezone.now()), **options,
    )  # fmt: skip


# --- jobs add/edit --rrule


def test_jobs_add_makes_a_calendar_job_read_in_its_zone(owner: Any) -> None:
    out, _ = call(
        "jobs", "add", "month end", "--task", NOOP, "--rrule",
        "RRULE:FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9\nEXDATE:20991231", "--tz", "Europe/Berlin",
        "--json",
    )  # fmt: skip
    data = json.loads(out)
    assert data["schedule"]["kind"] == "calendar"
    assert data["schedule"]["rrule"] == "RRULE:FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9\nEXDATE:20991231"
    assert data["schedule"]["description"].startswith("the last day of every month at 09:00")
    job = Job.objects.get(name="month end")
    due = job.next_occurrence_at.astimezone(BERLIN)
    assert due.hour == 9 and (due + timedelta(days=1)).day == 1


def test_jobs_add_refuses_a_bad_calendar_naming_the_option(owner: Any) -> None:
    message = refused("jobs", "add", "x", "--task", NOOP, "--rrule", "FREQ=MONTHLY;BYHOUR=9")
    assert message.startswith("rrule (--rrule): FREQ=MONTHLY needs the days it fires on")
    assert not Job.objects.exists()
    impossible = "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"
    never = refused("jobs", "add", "x", "--task", NOOP, "--rrule", impossible)
    assert "never fires" in never
    both = refused("jobs", "add", "x", "--task", NOOP, "--rrule", LAST_DAY, "--cron", "0 9 * * *")
    assert "--rrule" in both and "--cron" in both


def test_jobs_edit_moves_a_cron_job_to_a_calendar_and_back(owner: Any) -> None:
    create_job(owner=owner, name="report", task=NOOP, cron="0 9 * * *", tz="Europe/Berlin",
               now=timezone.now())  # fmt: skip
    call("jobs", "edit", "report", "--rrule", "FREQ=WEEKLY;BYDAY=MO;BYHOUR=7")
    schedule = Job.objects.select_related("schedule").get(name="report").schedule
    assert (schedule.cron, schedule.rrule, schedule.timezone) == (
        "", "FREQ=WEEKLY;BYDAY=MO;BYHOUR=7", "Europe/Berlin",
    )  # fmt: skip
    assert Job.objects.get(name="report").next_occurrence_at.astimezone(BERLIN).weekday() == 0
    call("jobs", "edit", "report", "--every", "PT1H")
    schedule = Job.objects.select_related("schedule").get(name="report").schedule
    assert (schedule.interval, schedule.rrule, schedule.timezone) == ("PT1H", "", "UTC")


def test_a_calendar_job_is_claimed_at_its_occurrence_and_moves_to_the_next(owner: Any) -> None:
    now = datetime(2027, 1, 15, tzinfo=UTC)
    job = calendar_job(owner, now=now)
    assert job.next_occurrence_at == datetime(2027, 1, 31, 8, tzinfo=UTC)
    claims.claim_due_jobs(now=datetime(2027, 1, 31, 8, 0, 1, tzinfo=UTC), limit=10)
    job.refresh_from_db()
    assert job.executions.get().scheduled_for == datetime(2027, 1, 31, 8, tzinfo=UTC)
    assert job.next_occurrence_at == datetime(2027, 2, 28, 8, tzinfo=UTC)


# --- jobs next


def test_jobs_next_lists_occurrences_in_utc_and_in_the_zone_across_a_clock_change(
    owner: Any,
) -> None:
    create_job(owner=owner, name="early", task=NOOP, cron="0 3 * * *", tz="Europe/Berlin",
               now=timezone.now())  # fmt: skip
    out, _ = call("jobs", "next", "early", "--count", "3")
    lines = out.splitlines()
    assert lines[1].split() == ["UTC", "Europe/Berlin"]
    rows = lines[2:5]
    assert all(row.split()[1] == "02:00:00" or row.split()[1] == "01:00:00" for row in rows)
    assert all(row.split()[4] == "03:00:00" for row in rows)


def test_jobs_next_of_a_job_in_utc_lists_each_occurrence_once(owner: Any, settings: Any) -> None:
    settings.TIME_ZONE = "America/New_York"  # the first column is UTC whatever the project's
    create_job(owner=owner, name="utc", task=NOOP, every="PT1H", now=timezone.now())
    out, _ = call("jobs", "next", "utc", "--count", "2")
    lines = out.splitlines()
    assert lines[1].split() == ["UTC"]
    assert all(row.split()[2:] == ["UTC"] for row in lines[2:4])


def test_jobs_next_json_is_a_list_of_iso_instants_with_the_offset_of_each(owner: Any) -> None:
    job = create_job(owner=owner, name="early", task=NOOP, cron="0 3 * * *",
                     tz="Europe/Berlin", now=timezone.now())  # fmt: skip
    found, _ = call("jobs", "next", "early", "--json", "--count", "400")
    moments = json.loads(found)
    assert len(moments) == 400
    assert len(set(m[-6:] for m in moments)) == 2  # summer and winter offsets both show
    assert all(m[11:19] == "03:00:00" for m in moments)
    assert moments == [m.isoformat() for m in api.next_occurrences(job.pk, count=400)]
    default, _ = call("jobs", "next", "early", "--json")
    assert len(json.loads(default)) == 10


def test_jobs_next_refuses_a_huge_count_naming_the_option(owner: Any) -> None:
    calendar_job(owner)
    assert refused("jobs", "next", "month end", "--count", "100000") == (
        "--count: '100000' is not a whole number from 1 to 1,000"
    )
    assert refused("jobs", "next", "month end", "--count", "0") == (
        "--count: '0' is not a whole number from 1 to 1,000"
    )


def test_jobs_next_says_whose_job_when_two_owners_use_the_name(
    owner: Any, django_user_model: Any
) -> None:
    other = django_user_model.objects.create_user("bob")
    calendar_job(owner)
    calendar_job(other)
    assert "pass --owner USERNAME" in refused("jobs", "next", "month end")
    out, _ = call("jobs", "next", "month end", "--owner", "bob", "--count", "2", "--json")
    assert len(json.loads(out)) == 2


def test_a_schedule_that_ends_first_shows_fewer_and_says_so(owner: Any) -> None:
    now = timezone.now()
    start = now + timedelta(hours=1)
    create_job(owner=owner, name="short", task=NOOP, every="PT1H", now=now, start=start,
               end=start + timedelta(hours=2, minutes=30))  # fmt: skip
    out, _ = call("jobs", "next", "short")
    assert "the schedule ends: only 3 of 10 occurrences remain" in out
    found, err = call("jobs", "next", "short", "--json")
    assert len(json.loads(found)) == 3
    assert "the schedule ends" in err


def test_a_paused_job_is_previewed_and_said_to_be_paused(owner: Any) -> None:
    job = calendar_job(owner)
    controls.pause_job(job=job, now=timezone.now(), reason="audit")
    out, _ = call("jobs", "next", "month end", "--count", "2")
    assert "'month end' is paused" in out
    assert len([line for line in out.splitlines() if "09:00:00 +0" in line]) == 2


# --- the API


def test_api_next_occurrences_are_aware_datetimes_in_the_job_zone(owner: Any) -> None:
    job = calendar_job(owner)
    now = datetime(2027, 3, 1, tzinfo=UTC)
    found = api.next_occurrences(job.pk, count=3, now=now)
    assert [m.isoformat() for m in found] == [
        "2027-03-31T09:00:00+02:00",
        "2027-04-30T09:00:00+02:00",
        "2027-05-31T09:00:00+02:00",
    ]
    assert all(m.tzinfo == BERLIN for m in found)
    assert api.next_occurrences(api.job(job.pk), count=2, now=now) == found[:2]


def test_api_next_occurrences_refuses_a_bad_count_and_a_naive_now(owner: Any) -> None:
    job = calendar_job(owner)
    with pytest.raises(ValidationError) as caught:
        api.next_occurrences(job.pk, count=0)
    assert list(caught.value.message_dict) == ["count"]
    with pytest.raises(ValidationError) as caught:
        api.next_occurrences(job.pk, now=datetime(2027, 1, 1))
    assert list(caught.value.message_dict) == ["now"]


def test_api_schedules_a_calendar_timing(owner: Any) -> None:
    info = api.schedule_task(NOOP, timing=api.Calendar(LAST_DAY, tz="Europe/Berlin"))
    assert info.schedule.startswith("calendar ")
    assert Job.objects.get(pk=info.id).schedule.rrule == LAST_DAY


# --- the admin


def preview_of(client: Client, url: str, **fields: str) -> Any:
    query = {"interval": "", "cron": "", "rrule": "", "timezone": "UTC", **fields}
    return client.get(url, query)


def preview_list(page: str) -> str:
    """The job page's list of upcoming occurrences (other times on the page are not in it)."""
    start = page.index('<ol class="duecourse-preview-list">')
    return page[start : page.index("</ol>", start)]


def test_the_job_page_lists_the_next_ten_occurrences(admin_client: Client, owner: Any) -> None:
    job = calendar_job(owner)
    page = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert preview_list(page).count('<time datetime="') == 10
    assert f"{JOBS}{job.pk}/preview/" in page
    assert "scheduling/timing_preview.js" in page
    assert "the last day of every month at 09:00 (Europe/Berlin)" in page


def test_a_paused_job_s_page_says_it_runs_them_only_if_resumed(
    admin_client: Client, owner: Any
) -> None:
    job = calendar_job(owner)
    controls.pause_job(job=job, now=timezone.now(), reason="audit")
    page = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert "The job is paused: it runs these only if it is resumed." in page
    assert preview_list(page).count('<time datetime="') == 10
    answer = preview_of(admin_client, f"{JOBS}{job.pk}/preview/", cron="0 9 * * *").json()
    assert answer["notes"] == ["The job is paused: it runs these only if it is resumed."]


def test_the_preview_answers_for_an_unsaved_timing_and_saves_nothing(
    admin_client: Client, owner: Any
) -> None:
    job = calendar_job(owner)
    before = list(Schedule.objects.values_list("pk", "rrule", "cron"))
    response = preview_of(
        admin_client, f"{JOBS}{job.pk}/preview/", cron="30 2 * * *", timezone="Europe/Berlin"
    )
    assert response.status_code == 200
    data = response.json()
    assert data["zone"] == "Europe/Berlin"
    assert len(data["occurrences"]) == 10
    assert all(row["local"][11:16] in ("02:30", "03:00") for row in data["occurrences"])
    assert list(Schedule.objects.values_list("pk", "rrule", "cron")) == before
    assert Job.objects.get(pk=job.pk).schedule.rrule == LAST_DAY
    fresh = preview_of(admin_client, f"{JOBS}preview/", rrule="FREQ=DAILY;BYHOUR=6")
    assert fresh.status_code == 200 and len(fresh.json()["occurrences"]) == 10


def test_the_preview_answers_field_errors_with_the_rules_of_saving(
    admin_client: Client, owner: Any
) -> None:
    url = f"{JOBS}preview/"
    bad_cron = preview_of(admin_client, url, cron="61 * * * *")
    assert bad_cron.status_code == 400 and list(bad_cron.json()["errors"]) == ["cron"]
    bad_rrule = preview_of(admin_client, url, rrule="FREQ=MONTHLY", timezone="Europe/Berlin")
    assert bad_rrule.status_code == 400
    assert "needs the days" in bad_rrule.json()["errors"]["rrule"][0]
    zoned = preview_of(admin_client, url, interval="PT1H", timezone="Europe/Berlin")
    assert zoned.status_code == 200  # the zone belongs to cron and calendars, as when saving
    nothing = preview_of(admin_client, url)
    assert nothing.status_code == 400 and "exactly one" in json.dumps(nothing.json())


def test_the_preview_needs_the_view_permission_on_jobs(
    client: Client, owner: Any, django_user_model: Any
) -> None:
    job = calendar_job(owner)
    staff = django_user_model.objects.create_user("carol", password="pw", is_staff=True)
    client.force_login(staff)
    assert preview_of(client, f"{JOBS}preview/", cron="0 9 * * *").status_code == 403
    assert preview_of(client, f"{JOBS}{job.pk}/preview/", cron="0 9 * * *").status_code in (
        403,
        404,
    )
    staff.user_permissions.add(Permission.objects.get(codename="view_job"))
    assert preview_of(client, f"{JOBS}preview/", cron="0 9 * * *").status_code == 200
    # Another owner's job stays out of reach even with the permission.
    assert preview_of(client, f"{JOBS}{job.pk}/preview/", cron="0 9 * * *").status_code in (
        403,
        404,
    )


def test_a_calendar_job_is_made_on_its_own_page_and_read_back_in_words(
    admin_client: Client, admin_user: Any
) -> None:
    response = admin_client.post(
        f"{JOBS}add/",
        form_data(owner=admin_user.pk, interval="", rrule=LAST_DAY, timezone="Europe/Berlin"),
    )
    assert response.status_code == 302
    job = Job.objects.select_related("schedule").get(name="report")
    assert (job.schedule.rrule, job.schedule.timezone) == (LAST_DAY, "Europe/Berlin")
    assert job.status == JobStatus.ACTIVE
    page = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert "Reads: the last day of every month at 09:00 (Europe/Berlin)." in page
    refused_page = admin_client.post(
        f"{JOBS}add/",
        form_data(owner=admin_user.pk, name="two", interval="", rrule="FREQ=WEEKLY"),
    )
    assert "needs the days" in " ".join(refused_page.context["adminform"].form.errors["rrule"])
