"""A paused job reads as paused everywhere: no next due time, and who or what paused it.

A paused job keeps in ``next_due_at`` the occurrence that was due when it paused (its misfire
policy judges it on resume), so that time soon lies in the past; the job list, its page and
``manage.py jobs list``/``show`` say "paused" instead. The list says who or what paused it: a
person (by name, with when), its failure counter, the code that declared it (the declaration
gone), or the scheduler's timing budget.
"""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from scheduling.models import ChangeSource, Job, JobChange, JobStatus
from scheduling.stages import controls, failures, pauses, reconciliation
from scheduling.stages.audit import Actor
from scheduling.timing import readable
from tests.factories import create_job

pytestmark = pytest.mark.django_db

NOOP = "scheduling.diagnostics.noop"
JOBS = "/admin/scheduling/job/"


def call(*argv: str) -> str:
    out = StringIO()
    call_command(*argv, stdout=out, stderr=StringIO())
    return out.getvalue()


def list_row(page: str, name: str) -> str:
    """The job list's row that names ``name``."""
    start = page.index(f">{name}</a>")
    return page[page.rindex("<tr", 0, start) : page.index("</tr>", start)]


def field(page: str, name: str) -> str:
    """One field's row of an admin page."""
    start = page.index(f'class="form-row field-{name}"')
    return page[start : page.index('class="form-row', start + 1)]


def paused_a_day_ago(owner: Any, name: str = "report", **options: Any) -> Job:
    """A job every hour that a person paused a day ago: its stored next due is long past."""
    then = timezone.now() - timedelta(days=1)
    job = create_job(owner=owner, name=name, task=NOOP, every="PT1H", now=then, **options)
    who = Actor(who=owner.get_username(), source=ChangeSource.ADMIN)
    paused = then + timedelta(hours=2)
    assert controls.pause_job(job=job, now=paused, reason="supplier maintenance", by=who)
    JobChange.objects.filter(job=job, action="paused").update(at=paused)
    job.refresh_from_db()
    assert job.next_due_at is not None and job.next_due_at < timezone.now()
    return job


def test_a_paused_job_is_not_due_and_says_so_instead_of_a_past_time(owner: Any) -> None:
    job = paused_a_day_ago(owner)
    assert pauses.next_due(job) is None
    assert pauses.not_due_word(job) == "paused"
    controls.resume_job(job=job, now=timezone.now())
    job.refresh_from_db()
    assert pauses.next_due(job) == job.next_due_at is not None


def test_the_job_list_shows_no_next_due_for_a_paused_job_and_who_paused_it_when(
    admin_client: Client, owner: Any
) -> None:
    job = paused_a_day_ago(owner)
    create_job(owner=owner, name="running", task=NOOP, every="PT1H", now=timezone.now())
    page = admin_client.get(JOBS).content.decode()
    row = list_row(page, "report")
    assert '<td class="field-next_due">paused</td>' in row
    assert readable.instant(job.next_due_at) not in row.split('class="field-next_due"')[1]
    assert f"by {owner.get_username()}, " in row
    assert ">22 h ago</time>" in row
    assert "supplier maintenance" in row  # the reason, on hover
    running = list_row(page, "running")
    assert "duecourse-pause-origin" not in running
    assert "<time datetime=" in running.split('class="field-next_due"')[1]


def test_the_list_tells_a_pause_by_the_failure_counter_from_a_pause_by_a_person(
    admin_client: Client, owner: Any
) -> None:
    paused_a_day_ago(owner, name="by hand")
    counted = create_job(
        owner=owner, name="flaky", task=NOOP, every="PT1H", now=timezone.now(),
        pause_after_failures=1,
    )  # fmt: skip
    assert failures.count_failure(job_id=counted.pk, error="ValueError: no", now=timezone.now())
    page = admin_client.get(JOBS).content.decode()
    assert "by its failure counter, " in list_row(page, "flaky")
    assert f"by {owner.get_username()}, " in list_row(page, "by hand")
    assert "failure counter" not in list_row(page, "by hand")


def test_the_list_says_a_job_whose_declaration_is_gone_was_removed_from_code(
    admin_client: Client, settings: Any
) -> None:
    now = timezone.now()
    settings.SCHEDULING_JOBS = {"tidy": {"task": NOOP, "every": "PT1M"}}
    reconciliation.reconcile(now=now, apply=True)
    settings.SCHEDULING_JOBS = {}
    reconciliation.reconcile(now=now, apply=True)
    job = Job.objects.get(name="tidy")
    assert job.status == JobStatus.PAUSED
    assert pauses.paused_by(job) == "removed from code"
    page = admin_client.get(JOBS).content.decode()
    assert "removed from code, " in list_row(page, "tidy")


def test_a_pause_by_the_timing_budget_and_by_the_scheduler_are_told_apart(owner: Any) -> None:
    job = create_job(owner=owner, name="odd", task=NOOP, every="PT1H", now=timezone.now())
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.PAUSED,
        pause_reason="paused by the scheduler: rrule: its next occurrence cannot be found "
        "within the timing budget of 0.5 s",
    )
    assert pauses.paused_by(Job.objects.get(pk=job.pk)) == "by the timing budget"
    Job.objects.filter(pk=job.pk).update(pause_reason="next_occurrence_at: cannot be planned")
    assert pauses.paused_by(Job.objects.get(pk=job.pk)) == "by the scheduler"


def test_the_job_page_shows_who_paused_it_and_no_next_due(admin_client: Client, owner: Any) -> None:
    job = paused_a_day_ago(owner)
    page = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert f"by {owner.get_username()}, " in field(page, "paused_by")
    assert '<div class="readonly">paused</div>' in field(page, "next_due")
    assert readable.instant(job.next_due_at) not in field(page, "next_due")
    assert '<div class="readonly">paused</div>' in field(page, "next_occurrence")
    assert job.next_occurrence_at is not None
    assert readable.instant(job.next_occurrence_at) not in field(page, "next_occurrence")


def test_jobs_list_and_show_print_paused_and_who_paused_it_instead_of_a_next_due(
    owner: Any,
) -> None:
    job = paused_a_day_ago(owner)
    listed = call("jobs", "list").splitlines()
    row = next(line for line in listed if line.startswith("report"))
    assert f"paused by {owner.get_username()}" in row
    assert readable.instant(job.next_due_at) not in row
    assert row[listed[0].index("NEXT DUE") :].startswith("paused ")
    shown = call("jobs", "show", "report").splitlines()
    assert "next_due_at: paused" in shown
    assert "next_occurrence_at: paused" in shown
    assert f"paused: by {owner.get_username()}" in shown
    data = json.loads(call("jobs", "show", "report", "--json"))
    assert data["paused"] == f"by {owner.get_username()}"
    assert data["next_due_at"] is not None  # machines still read the stored instant


def test_the_dashboard_counts_a_paused_job_neither_due_nor_late(
    admin_client: Client, owner: Any
) -> None:
    job = paused_a_day_ago(owner)
    page = admin_client.get("/dashboard/").content.decode()
    for panel in ("panel-due", "panel-late"):
        found = page[page.index(f'id="{panel}"') :]
        found = found[: found.index("</section>")]
        assert f"/admin/scheduling/job/{job.pk}/change/" not in found, panel
    controls.resume_job(job=job, now=timezone.now())  # resumed, its missed occurrence is late
    page = admin_client.get("/dashboard/").content.decode()
    late = page[page.index('id="panel-late"') :]
    assert f"/admin/scheduling/job/{job.pk}/change/" in late[: late.index("</section>")]


def test_jobs_pause_takes_a_reason_and_refuses_one_that_is_not_one_line(owner: Any) -> None:
    create_job(owner=owner, name="nightly", task=NOOP, every="PT1H", now=timezone.now())
    call("jobs", "pause", "nightly", "--reason", "supplier maintenance")
    assert Job.objects.get(name="nightly").pause_reason == "supplier maintenance"
    create_job(owner=owner, name="weekly", task=NOOP, every="P7D", now=timezone.now())
    with pytest.raises(CommandError, match="reason"):
        call("jobs", "pause", "weekly", "--reason", "two\nlines")
    assert Job.objects.get(name="weekly").status == JobStatus.ACTIVE


def test_jobs_pause_json_says_who_paused_the_job(owner: Any) -> None:
    create_job(owner=owner, name="hourly", task=NOOP, every="PT1H", now=timezone.now())
    data = json.loads(call("jobs", "pause", "hourly", "--by", owner.get_username(), "--json"))
    assert data["status"] == "paused"
    assert data["paused"].startswith(f"by {owner.get_username()}")

