"""Every time an operator reads follows the one rule (``scheduling.timing.readable``): the
instant to the second, never with microseconds, in the project's ``TIME_ZONE`` with the zone named.

The timing preview, the reasons the engine writes on executions it supersedes, cancels or
reaps, the audit trail (``jobs history`` and the job page's *Changes*), and the dashboard's
header, which sits inside each Django's own admin bar.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import django
import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from scheduling.models import Execution, ExecutionStatus, Job, JobChange
from scheduling.stages import audit, backfill, controls, edits, liveness, overlaps
from scheduling.timing import readable
from tests.factories import create_job
from tests.scheduling.test_overlap_claims import claim, start

pytestmark = pytest.mark.django_db

NOOP = "scheduling.diagnostics.noop"
JOBS = "/admin/scheduling/job/"
#: An instant with microseconds, as the clock gives them.
PRECISE = datetime(2030, 1, 31, 9, 0, 5, 123456, tzinfo=UTC)
#: Anything that reads like ISO 8601 or carries a fraction of a second.
ISO_OR_FRACTION = re.compile(r"\d{4}-\d\d-\d\dT\d\d:|\d\d:\d\d:\d\d\.\d")


@pytest.fixture
def new_york(settings: Any) -> None:
    settings.TIME_ZONE = "America/New_York"


# --- the timing preview


def test_the_preview_writes_each_occurrence_as_every_time_is_written(
    admin_client: Client, owner: Any
) -> None:
    job = create_job(owner=owner, name="evening", task=NOOP, cron="0 18 * * *",
                     tz="Europe/Berlin", now=timezone.now())  # fmt: skip
    page = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    listed = page[page.index('<ol class="duecourse-preview-list">') :]
    listed = listed[: listed.index("</ol>")]
    shown = re.findall(r'<time datetime="([^"]+)">([^<]+)</time> <span[^>]*>\(([^)]+)\)', listed)
    assert len(shown) == 10
    for machine, local, utc in shown:
        assert re.fullmatch(r"\d{4}-\d\d-\d\d 18:00:00 CES?T", local), local
        assert re.fullmatch(r"\d{4}-\d\d-\d\d 1[67]:00:00 UTC", utc), utc
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT1[67]:00:00\+00:00", machine), machine
    answer = admin_client.get(
        f"{JOBS}preview/",
        {"interval": "", "cron": "0 18 * * *", "rrule": "", "timezone": "Europe/Berlin"},
    ).json()
    rows = answer["occurrences"]
    assert [(row["machine"], row["local"], row["utc"]) for row in rows] == shown
    assert {row["offset"] for row in rows} <= {"+0100", "+0200"}


# --- reasons the engine writes


def test_superseded_and_cancelled_reasons_name_the_instant_to_the_second(new_york: None) -> None:
    assert overlaps.superseded_note(PRECISE) == (
        "superseded by the occurrence of 2030-01-31 04:00:05 EST (overlap policy)"
    )
    assert overlaps.cancelled_note(PRECISE) == (
        "cancelled by the occurrence of 2030-01-31 04:00:05 EST (overlap cancel_other)"
    )


def test_a_cancel_other_claim_writes_its_reasons_without_microseconds(owner: Any) -> None:
    at = PRECISE  # the job's grid starts at its creation, microseconds and all
    job = create_job(owner=owner, name="slow", task=NOOP, every="PT1M", now=at,
                     overlap="cancel_other")  # fmt: skip
    [first] = claim(at).bells
    start(first.execution_id, at)
    claim(at + timedelta(minutes=3))
    reasons = [
        e.last_error
        for e in Execution.objects.filter(job=job).exclude(last_error="")
        if e.status in (ExecutionStatus.CANCELLED, ExecutionStatus.SUPERSEDED)
    ]
    assert len(reasons) >= 2
    assert any(
        r.startswith("cancelled by the occurrence of 2030-01-31 09:03:05 UTC") for r in reasons
    )
    assert not [r for r in reasons if ISO_OR_FRACTION.search(r)]


def test_a_reaped_run_says_since_when_to_the_second(owner: Any) -> None:
    job = create_job(owner=owner, name="lost", task=NOOP, every="PT1H", now=PRECISE)
    execution = controls.run_job_now(job=job, now=PRECISE)
    start(execution.pk, PRECISE)
    Execution.objects.filter(pk=execution.pk).update(last_heartbeat_at=PRECISE)
    later = PRECISE + timedelta(hours=1)
    assert liveness.reap_execution(execution_id=execution.pk, now=later, stale_after=60)
    error = Execution.objects.get(pk=execution.pk).last_error
    assert "no heartbeat since 2030-01-31 09:00:05 UTC" in error
    assert not ISO_OR_FRACTION.search(error)


def test_a_backfill_past_now_names_now_to_the_second() -> None:
    with pytest.raises(ValidationError) as caught:
        backfill.check_range(
            start=PRECISE - timedelta(days=1), end=PRECISE + timedelta(days=1), now=PRECISE
        )
    assert "is after now (2030-01-31 09:00:05 UTC)" in caught.value.message_dict["end"][0]


# --- the audit trail


def test_jobs_history_reads_times_in_the_projects_zone_without_microseconds(
    owner: Any, new_york: None
) -> None:
    job = create_job(owner=owner, name="nightly", task=NOOP, cron="0 3 * * *", now=PRECISE)
    edits.edit_job(job=job, now=PRECISE, timing={"cron": "0 5 * * *"})
    JobChange.objects.filter(job=job, action="changed").update(at=PRECISE)
    out = StringIO()
    call_command("jobs", "history", "nightly", stdout=out)
    text = out.getvalue()
    assert text.splitlines()[0].startswith("2030-01-31 04:00:05 EST changed by ")
    assert not ISO_OR_FRACTION.search(text), text
    assert audit.value_text("2031-02-03T04:05:06.000789+00:00") == "2031-02-02 23:05:06 EST"
    assert audit.value_text("not 2031-02-03T04:05:06") == '"not 2031-02-03T04:05:06"'


def test_the_job_pages_changes_read_times_by_the_rule(admin_client: Client, owner: Any) -> None:
    job = create_job(owner=owner, name="nightly", task=NOOP, cron="0 3 * * *", now=PRECISE)
    edits.edit_job(job=job, now=PRECISE, timing={"cron": "0 5 * * *"})
    page = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    trail = page[page.index('<table class="duecourse-changes">') :]
    trail = trail[: trail.index("</table>")]
    assert "when (UTC)" not in trail
    assert ">2030-01-31 09:00:05 UTC</time>" in trail
    assert not ISO_OR_FRACTION.search(re.sub(r'datetime="[^"]+"', "", trail)), trail


# --- the dashboard's header


def test_the_dashboard_names_the_zone_once_in_a_sentence_that_ends_once(
    admin_client: Client, new_york: None
) -> None:
    page = admin_client.get("/dashboard/").content.decode()
    assert '<span id="dc-zone">Times in America/New_York.</span>' in page
    assert ".." not in page[page.index("As of") : page.index("Refreshes every")]


def test_the_dashboards_breadcrumbs_take_the_shape_this_django_styles(
    admin_client: Client,
) -> None:
    page = admin_client.get("/dashboard/").content.decode()
    crumbs = page[page.index('<nav aria-label="Breadcrumbs">') :]
    crumbs = crumbs[: crumbs.index("</nav>")]
    if django.VERSION[:2] >= (6, 1):
        assert '<ol class="breadcrumbs">' in crumbs
        assert '<li><a href="/admin/">Home</a></li>' in crumbs
        assert '<li aria-current="page">Dashboard</li>' in crumbs
        assert "&rsaquo;" not in crumbs and "<div" not in crumbs
    else:
        assert '<div class="breadcrumbs"><a href="/admin/">Home</a> &rsaquo; Dashboard</div>' in (
            crumbs
        )


def test_the_pause_page_breadcrumbs_take_the_same_shape(admin_client: Client, owner: Any) -> None:
    job = create_job(owner=owner, name="nightly", task=NOOP, every="PT1H", now=timezone.now())
    page = admin_client.post(
        JOBS, {"action": "pause_jobs", "_selected_action": [job.pk]}
    ).content.decode()
    crumbs = page[page.index('<nav aria-label="Breadcrumbs">') :]
    crumbs = crumbs[: crumbs.index("</nav>")]
    shape = (
        '<ol class="breadcrumbs">' if django.VERSION[:2] >= (6, 1) else '<div class="breadcrumbs">'
    )
    assert shape in crumbs
    assert 'href="/admin/scheduling/job/">Jobs</a>' in crumbs
    assert Job.objects.get(pk=job.pk).status == "active"  # the page only asks for a reason
    assert readable.caption()  # the zone the page's times are in has a name
