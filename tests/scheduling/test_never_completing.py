"""A job whose runs never complete says so: in the job list and on the dashboard.

A job under ``cancel_other`` whose body outlasts its interval has every run cancelled by the
next one; it read "active" and looked healthy. Once its last N finished runs
(``SCHEDULING_WARN_AFTER_UNFINISHED_RUNS``, 5) all ended cancelled, superseded or failed, the
job list shows a warning under its status and the dashboard lists it. The list reads it for
the whole page in its one statement, never a query per row.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling import checks
from scheduling.models import Execution, Job, JobStatus
from scheduling.stages import selectors

pytestmark = [pytest.mark.django_db, pytest.mark.specification]

JOBS = "/admin/scheduling/job/"
WARNING = "none of its last 5 runs completed (cancelled, superseded or failed)"


def ended(job: Job, *statuses: str, running: bool = False) -> None:
    """Runs of ``job`` a second apart ending in ``statuses``, oldest first, ending a minute
    ago; with ``running``, one more still running after them."""
    now = timezone.now()
    for i, status in enumerate([*statuses, *(["running"] if running else [])]):
        Execution.objects.create(
            job=job, task=job.task, status=status,
            scheduled_for=now - timedelta(minutes=1) + timedelta(seconds=i - len(statuses)),
            finished_at=None if status == "running" else now,
        )  # fmt: skip


def never_completes(job: Job) -> bool:
    row = selectors.with_health(Job.objects.filter(pk=job.pk), now=timezone.now()).get()
    return bool(row.never_completes)


def test_five_runs_cancelled_in_a_row_make_the_job_never_complete(make_job: Any) -> None:
    job = make_job(overlap="cancel_other")
    ended(job, *["cancelled"] * 5, running=True)  # the run in flight is not counted
    assert never_completes(job)


def test_cancelled_superseded_and_failed_runs_count_alike(make_job: Any) -> None:
    job = make_job()
    ended(job, "superseded", "failed", "cancelled", "superseded", "failed")
    assert never_completes(job)


def test_fewer_runs_than_the_setting_or_a_completed_one_among_them_is_no_warning(
    make_job: Any,
) -> None:
    few, mixed, recovered = make_job(), make_job(), make_job()
    ended(few, *["cancelled"] * 4)
    ended(mixed, "cancelled", "cancelled", "completed", "cancelled", "cancelled")
    ended(recovered, *["failed"] * 6, "completed")
    assert not never_completes(few)
    assert not never_completes(mixed)
    assert not never_completes(recovered)


def test_the_setting_says_how_many_runs_in_a_row(make_job: Any, settings: Any) -> None:
    settings.SCHEDULING_WARN_AFTER_UNFINISHED_RUNS = 2
    job = make_job()
    ended(job, "completed", "cancelled", "cancelled")
    assert never_completes(job)
    assert selectors.never_completes_warning() == (
        "none of its last 2 runs completed (cancelled, superseded or failed)"
    )


def test_the_job_list_shows_the_warning_without_a_query_per_row(
    admin_client: Client, make_job: Any
) -> None:
    def listed() -> tuple[int, str]:
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.get(JOBS)
        assert response.status_code == 200
        return len(captured.captured_queries), response.content.decode()

    stuck = make_job(name="stuck", overlap="cancel_other")
    ended(stuck, *["cancelled"] * 5)
    queries, page = listed()
    assert page.count(WARNING) == 1
    for i in range(8):
        ended(make_job(name=f"also-stuck-{i}"), *["failed"] * 5)
    more_queries, page = listed()
    assert more_queries == queries
    assert page.count(WARNING) == 9


def test_a_paused_job_shows_no_warning(admin_client: Client, make_job: Any) -> None:
    job = make_job(name="stuck")
    ended(job, *["cancelled"] * 5)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PAUSED)
    assert WARNING not in admin_client.get(JOBS).content.decode()


def test_the_dashboard_lists_the_jobs_whose_runs_never_complete(
    admin_client: Client, make_job: Any
) -> None:
    healthy = make_job(name="healthy")
    ended(healthy, "cancelled", *["completed"] * 5)
    page = admin_client.get("/dashboard/").content.decode()
    assert 'id="panel-never-completing"' not in page
    stuck = make_job(name="stuck-report", overlap="cancel_other")
    ended(stuck, *["cancelled"] * 5, running=True)
    page = admin_client.get("/dashboard/").content.decode()
    assert 'id="panel-never-completing"' in page
    panel = page[page.index('id="panel-never-completing"') :]
    panel = panel[: panel.index("</section>")]
    assert "stuck-report" in panel and "healthy" not in panel
    assert f"Active jobs of which {WARNING}." in panel


@pytest.mark.parametrize("value", [0, -1, 1001, "five", 2.5])
def test_a_setting_out_of_range_is_refused_by_the_system_checks(
    settings: Any, value: Any
) -> None:
    settings.SCHEDULING_WARN_AFTER_UNFINISHED_RUNS = value
    [message] = checks.check_settings()
    assert message.id == "scheduling.E008"
    assert message.msg.startswith(f"SCHEDULING_WARN_AFTER_UNFINISHED_RUNS = {value!r} ")
    assert message.msg.endswith("it accepts a whole number from 1 to 1,000")
