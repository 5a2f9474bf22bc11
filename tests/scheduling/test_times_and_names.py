"""Times and names: one rule everywhere (docs/operations.md, *Times and names*).

Every page and command shows an instant to the second in the project's ``TIME_ZONE`` with the
zone named, the time from now beside it unless it is further than 30 days away; every run is
named for what it is (its job's name, a row in its app's words, a Django task's path); the
command line prints JSON values as JSON and cuts nothing it shows. The project here runs in
New York, so a page that fell back on UTC or on Django's own format would show it.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from scheduling import api
from scheduling.models import Execution, ExecutionStatus, Job
from scheduling.timing import readable
from tests.tasktable_app import tasks
from tests.tasktable_app.models import Chore

pytestmark = pytest.mark.django_db

NEW_YORK = "America/New_York"
#: The longest zone name there is: a column sized to a fixed width would cut it.
LONG_ZONE = "America/Argentina/ComodRivadavia"
#: Django's own date-time format in a page ("Nov. 25, 2026, 11:35 a.m."), to the minute.
DJANGOS_FORMAT = re.compile(r"\b\d{1,2}:\d\d [ap]\.m\.|\bmidnight\b|\bnoon\b")
#: A relative time in thousands of days: what a far instant must never read as.
THOUSANDS_OF_DAYS = re.compile(r"\d{4,} d\b")
#: An instant as the rule writes it in New York.
NEW_YORK_INSTANT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d E[SD]T")


@pytest.fixture(autouse=True)
def in_new_york(settings: Any) -> None:
    settings.TIME_ZONE = NEW_YORK


def call(*argv: str) -> str:
    out = StringIO()
    call_command(*argv, stdout=out, stderr=StringIO())
    return out.getvalue()


# --- the rule itself -----------------------------------------------------------------------


def test_an_instant_reads_to_the_second_in_the_projects_zone_with_the_zone_named() -> None:
    moment = datetime(2026, 11, 25, 16, 35, 7, 123456, tzinfo=UTC)
    assert readable.instant(moment) == "2026-11-25 11:35:07 EST"
    assert readable.instant(moment, readable.zone_named("UTC")) == "2026-11-25 16:35:07 UTC"
    assert readable.caption() == "Times in America/New_York"
    now = moment - timedelta(minutes=5)
    assert readable.when(moment, now) == "2026-11-25 11:35:07 EST (in 5 min)"


def test_an_instant_beyond_thirty_days_reads_as_a_date_not_as_thousands_of_days() -> None:
    now = datetime(2026, 11, 25, 12, tzinfo=UTC)
    far = datetime(9999, 6, 1, tzinfo=UTC)
    assert readable.ago(far, now) == "9999-05-31"  # the evening before, in New York
    assert readable.when(far, now) == "9999-05-31 20:00:00 EDT"
    assert readable.ago(now - timedelta(days=400), now) == "2025-10-21"
    assert readable.ago(now + timedelta(days=29), now) == "in 29 d"
    assert readable.ago(datetime.max.replace(tzinfo=UTC), now) == "9999-12-31"


def test_cron_and_interval_descriptions_are_lower_case_fragments_alike() -> None:
    assert readable.describe_interval("PT10M") == "every 10 minutes"
    assert readable.describe_cron("*/10 * * * *") == "every 10 minutes"
    assert readable.describe_cron("0 9 * * 1-5") == "at 09:00, Monday through Friday"


# --- the admin and the dashboard -----------------------------------------------------------


def chore_job(*, name: str = "sweep") -> Job:
    """A job an app made for its row without a name: stored as ``tasktable_app.Chore:N:1``."""
    chore = Chore.objects.create(name=name)
    info = api.schedule_row(chore, timing=api.Every("PT10S"))
    return Job.objects.get(pk=info.id)


def test_a_jobs_page_shows_its_times_to_the_second_with_the_zone_named(
    admin_client: Client, make_job: Any
) -> None:
    job = make_job(name="report", every="PT10S", now=timezone.now())
    page = admin_client.get(f"/admin/scheduling/job/{job.pk}/change/").content.decode()
    assert readable.instant(job.next_due_at) in page
    assert readable.instant(job.created_at) in page
    assert not DJANGOS_FORMAT.search(page), DJANGOS_FORMAT.search(page)
    # The three date-time fields name the zone each, and suppress the admin script's
    # "You are N hours ahead" (one per field) with the marker it looks for.
    assert page.count('<span class="timezonewarning" hidden></span>') == 3
    assert page.count(f'<span class="duecourse-zone help">{NEW_YORK}</span>') == 3


def test_the_job_list_shows_the_next_due_instant_and_names_a_row_in_its_apps_words(
    admin_client: Client, admin_user: Any
) -> None:
    job = chore_job()
    assert job.name.startswith("tasktable_app.Chore:")
    page = admin_client.get("/admin/scheduling/job/").content.decode()
    assert "chore &#x27;sweep&#x27;" in page
    assert "tasktable_app.Chore:" not in page
    assert readable.instant(job.next_due_at) in page and NEW_YORK_INSTANT.search(page)


def test_the_executions_list_names_every_run_and_shows_a_far_run_as_a_date(
    admin_client: Client, admin_user: Any, django_capture_on_commit_callbacks: Any
) -> None:
    job = chore_job()
    Execution.objects.create(job=job, task=job.task, scheduled_for=timezone.now())
    with django_capture_on_commit_callbacks(execute=False):  # nothing is published
        tasks.add.enqueue(2, 3)
        tasks.add.using(run_after=datetime(9999, 6, 1, tzinfo=UTC)).enqueue(1, 1)
    page = admin_client.get("/admin/scheduling/execution/").content.decode()
    # A Django task run by its path (which may wrap after a dot: ``<wbr>``).
    runs = [
        run.replace("<wbr>", "")
        for run in re.findall(r'class="field-run"><a href="[^"]+">(.+?)</a>', page)
    ]
    assert runs.count("tests.tasktable_app.tasks.add") == 2
    assert "chore &#x27;sweep&#x27;" in page and "tasktable_app.Chore:" not in page
    assert "9999-05-31 20:00:00 EDT" in page
    assert not THOUSANDS_OF_DAYS.search(page), THOUSANDS_OF_DAYS.search(page)
    assert not DJANGOS_FORMAT.search(page)


def test_an_executions_page_shows_its_times_and_its_attempts_times_by_the_rule(
    admin_client: Client, admin_user: Any
) -> None:
    job = chore_job()
    started = datetime(2026, 11, 25, 16, 35, 7, 250000, tzinfo=UTC)
    execution = Execution.objects.create(
        job=job,
        task=job.task,
        scheduled_for=started - timedelta(seconds=1),
        started_at=started,
        finished_at=started + timedelta(seconds=10),
        status=ExecutionStatus.COMPLETED,
    )
    execution.attempts.create(number=1, started_at=started, outcome="completed")
    page = admin_client.get(f"/admin/scheduling/execution/{execution.pk}/change/")
    text = page.content.decode()
    assert page.status_code == 200
    assert text.count("2026-11-25 11:35:07 EST") >= 2  # the run's start and its attempt's
    assert "2026-11-25 11:35:17 EST" in text
    assert not DJANGOS_FORMAT.search(text)


def test_the_dashboard_names_its_zone_once_and_every_run_for_what_it_is(
    admin_client: Client, admin_user: Any
) -> None:
    job = chore_job()
    now = timezone.now()
    for task, owner_job in ((job.task, job), ("tests.tasktable_app.tasks.explode", None)):
        Execution.objects.create(
            job=owner_job,
            task=task,
            scheduled_for=now - timedelta(minutes=2),
            finished_at=now - timedelta(minutes=1),
            status=ExecutionStatus.FAILED,
            last_error="boom",
        )
    page = admin_client.get("/dashboard/").content.decode()
    assert page.count(">Times in America/New_York.<") == 1
    assert "chore &#x27;sweep&#x27;" in page and "tests.tasktable_app.tasks.explode" in page
    assert "tasktable_app.Chore:" not in page
    assert NEW_YORK_INSTANT.search(page)


# --- the command line ----------------------------------------------------------------------


def test_jobs_show_prints_json_values_as_json_and_times_by_the_rule(make_job: Any) -> None:
    make_job(
        name="stock",
        task="scheduling.diagnostics.sleep",
        kwargs={"seconds": 2},
        cron="0 9 * * 1-5",
        tz="Europe/Berlin",
    )
    text = call("jobs", "show", "stock")
    assert 'kwargs: {"seconds":2}' in text
    assert "args: []" in text
    assert "{'" not in text and "None" not in text  # no Python reprs
    assert re.search(r"^next_due_at: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d E[SD]T$", text, re.M)
    assert "schedule: at 09:00, Monday through Friday (Europe/Berlin)" in text
    utc = call("jobs", "show", "stock", "--tz", "UTC")
    assert re.search(r"^next_due_at: \S+ \d\d:\d\d:\d\d UTC$", utc, re.M)


def test_jobs_list_cuts_no_value_and_prints_times_in_the_zone_asked(make_job: Any) -> None:
    long_name = "a-job-with-a-name-longer-than-any-fixed-column-would-hold"
    make_job(name=long_name, cron="0 9 * * *", tz=LONG_ZONE)
    text = call("jobs", "list", "--tz", "Asia/Kolkata")
    assert long_name in text
    assert f"({LONG_ZONE})" in text
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d IST", text)
    header, row = text.splitlines()
    assert header.index("SCHEDULE") == row.index("at 09:00")  # columns sized to content


def test_jobs_list_names_a_row_job_by_its_row(owner: Any) -> None:
    chore_job(name="polish")
    text = call("jobs", "list")
    assert "chore 'polish'" in text


def test_job_messages_carry_no_microseconds(owner: Any) -> None:
    add = ("jobs", "add", "ping", "--every", "PT10S", "--owner", "owner")
    text = call(*add, "--task", "scheduling.diagnostics.noop")
    assert re.search(r"next due \d{4}-\d\d-\d\d \d\d:\d\d:\d\d E[SD]T$", text.strip()), text
    assert not re.search(r"\d\d:\d\d:\d\d\.\d+", text)
    call("jobs", "pause", "ping")
    resumed = call("jobs", "resume", "ping", "--tz", "UTC")
    assert re.search(r"next due \S+ \d\d:\d\d:\d\d UTC$", resumed.strip()), resumed


def test_executions_names_each_run_whole_in_the_zone_asked(
    owner: Any, django_capture_on_commit_callbacks: Any
) -> None:
    job = chore_job(name="a chore whose name is longer than twenty-four characters")
    Execution.objects.create(
        job=job, task=job.task, scheduled_for=datetime(2026, 11, 25, 16, 35, 7, tzinfo=UTC)
    )
    with django_capture_on_commit_callbacks(execute=False):
        tasks.add.using(run_after=datetime(9999, 6, 1, tzinfo=UTC)).enqueue(1, 1)
    lines = call("executions", "--tz", "Europe/Berlin").splitlines()
    assert lines[0].startswith("9999-06-01 02:00:00 CEST tests.tasktable_app.tasks.add ")
    assert lines[1].startswith(
        "2026-11-25 17:35:07 CET chore 'a chore whose name is longer than twenty-four characters'"
    )
    [run] = [e for e in _json("executions") if e["job"] == job.name]
    assert run["title"] == "chore 'a chore whose name is longer than twenty-four characters'"
    assert run["scheduled_for"] == "2026-11-25T16:35:07+00:00"  # JSON stays ISO-8601 in UTC


def test_a_zone_that_is_not_one_is_refused_naming_the_option() -> None:
    with pytest.raises(CommandError) as refused:
        call("executions", "--tz", "Mars/Olympus_Mons")
    assert str(refused.value) == (
        "timezone (--tz): 'Mars/Olympus_Mons' is not an IANA time zone "
        "(such as Europe/Berlin or UTC)"
    )


def _json(*argv: str) -> Any:
    return json.loads(call(*argv, "--json"))


def test_a_view_only_page_shows_each_time_once(admin_client: Client) -> None:
    job = chore_job()
    execution = Execution.objects.create(
        job=job, task=job.task, scheduled_for=datetime(2026, 11, 25, 16, 35, 7, tzinfo=UTC)
    )
    text = admin_client.get(f"/admin/scheduling/execution/{execution.pk}/change/").content
    page = text.decode()
    assert page.count('<div class="readonly"><time datetime="2026-11-25T16:35:07+00:00"') == 1
    for field in ("scheduled_for", "created_at", "started_at", "updated_at"):
        assert page.count(f"field-{field}") == 1, field
