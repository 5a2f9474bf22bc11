"""The jobs admin in a real browser (Debian's chromium driven by Playwright).

An operator makes a cron job on one page, sees bad input refused beside the field, pauses and
resumes it, runs it now and watches a real worker complete the execution; a staff user who is
not a superuser cannot reach another owner's job by any URL. Screenshots go to
var/screenshots/ (the README's job list is copied from there).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from scheduling.models import Execution, ExecutionStatus, Job, JobStatus
from scheduling.stages import controls
from tests.conftest import (
    CHROMIUM,
    ROOT,
    celery_worker_command,
    scheduler_command,
    wait_for,
    watch_content_security_policy,
)
from tests.factories import create_job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = ROOT / "var" / "screenshots"
NOOP = "scheduling.diagnostics.noop"


@pytest.fixture
def browser(live_server: Any) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert os.path.exists(CHROMIUM), "Debian's chromium is required: apt-get install chromium"
    # Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
    # between page actions are still synchronous and safe.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        try:
            yield browser
        finally:
            browser.close()
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


def logged_in(browser: Any, base: str, username: str, password: str) -> Any:
    """A page logged in as ``username``; ``page.csp_violations`` collects what the engine's
    Content-Security-Policy refused (it must stay empty: the admin works under it)."""
    page = browser.new_page(viewport={"width": 1440, "height": 760})
    page.set_default_timeout(20_000)
    page.csp_violations = watch_content_security_policy(page)
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    return page


def choose_action(page: Any, job: Job, action: str) -> None:
    page.check(f"input[name=_selected_action][value='{job.pk}']")
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")


def status_in_list(page: Any, job: Job) -> str:
    """The badge: the first line of the status cell (who paused a job is the line under it)."""
    row = page.locator("#result_list tbody tr", has=page.locator(f"a:text-is('{job.name}')"))
    return str(row.locator(".field-status_badge").inner_text()).splitlines()[0]


def test_an_operator_makes_pauses_resumes_and_runs_a_cron_job(
    browser: Any,
    live_server: Any,
    admin_user: Any,
    processes: Any,
    process_env: dict[str, str],
    publish_under_prefix: str,
) -> None:
    processes.start(celery_worker_command(name="admin-ui"), env=process_env, name="worker")
    processes.start(scheduler_command(), env=process_env, name="scheduler")
    page = logged_in(browser, live_server.url, "admin", "password")

    added = page.goto(f"{live_server.url}/admin/scheduling/job/add/")
    # The engine's policy: through Django 6's middleware (with its nonce), or the view's own.
    assert "script-src 'self'" in added.headers["content-security-policy"]
    # The owner is the operator, already chosen: nobody types a user's id.
    assert page.locator("#id_owner option:checked").inner_text() == "admin"
    page.fill("#id_name", "weekday report")
    page.select_option("#id_task", NOOP)
    page.fill("#id_interval", "PT0S")
    page.click("input[name=_save]")
    assert "shorter than one second" in page.locator(".field-interval .errorlist").inner_text()

    page.fill("#id_interval", "")
    page.fill("#id_cron", "0 25 * * 1-5")
    page.click("input[name=_save]")
    assert "25" in page.locator(".field-cron .errorlist").inner_text()
    page.screenshot(path=str(SCREENSHOTS / "job-form-errors.png"), full_page=True)
    assert not Job.objects.exists()

    page.fill("#id_cron", "0 9 * * 1-5")
    page.select_option("#id_timezone", "Europe/Paris")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist .success")
    job = Job.objects.select_related("schedule").get(name="weekday report")
    assert (job.schedule.cron, job.schedule.timezone) == ("0 9 * * 1-5", "Europe/Paris")
    assert "at 09:00, Monday through Friday (Europe/Paris)" in page.content()

    choose_action(page, job, "pause_jobs")
    page.fill("#id_reason", "quarter close")
    page.click("input[name=confirm]")
    assert "1 job paused." in page.locator(".messagelist").inner_text()
    assert status_in_list(page, job) == "paused"
    assert Job.objects.get(pk=job.pk).pause_reason == "quarter close"

    # The job's own page offers the actions that apply to it now.
    page.goto(f"{live_server.url}/admin/scheduling/job/{job.pk}/change/")
    assert page.locator(".job-action-pause_jobs").count() == 0
    page.click(".job-action-resume_jobs button")
    assert "1 job resumed." in page.locator(".messagelist").inner_text()
    assert status_in_list(page, job) == "active"

    page.goto(f"{live_server.url}/admin/scheduling/job/{job.pk}/change/")
    page.click(".job-action-run_now button")
    assert "1 job queued to run now." in page.locator(".messagelist").inner_text()

    def completed_on_the_jobs_page() -> bool:
        page.goto(f"{live_server.url}/admin/scheduling/job/{job.pk}/change/")
        return "completed" in page.locator(".duecourse-executions").inner_text()

    wait_for(completed_on_the_jobs_page, timeout=60, interval=0.5, message="run now completes")
    assert "#1 completed on admin-ui@" in page.locator(".duecourse-executions").inner_text()
    page.screenshot(path=str(SCREENSHOTS / "job-page.png"), full_page=True)

    some_history(admin_user)
    page.goto(f"{live_server.url}/admin/scheduling/job/")
    page.wait_for_selector("#result_list")
    page.click("#toggle-nav-sidebar")
    assert "completed" in page.locator("#result_list").inner_text()
    assert "failing" in status_in_list(page, Job.objects.get(name="sync invoices"))
    page.screenshot(path=str(SCREENSHOTS / "job-list.png"), full_page=True)
    # Every page above ran its scripts (the calendar, the time-zone select, the sidebar, the
    # actions) under the engine's Content-Security-Policy, and nothing was refused.
    assert page.csp_violations == []


def some_history(owner: Any) -> None:
    """A few more jobs with a past, so the job list shows every kind of row."""
    now = timezone.now()
    hourly = create_job(owner=owner, name="nightly export", task=NOOP, cron="30 2 * * *",
                             tz="America/New_York", now=now)  # fmt: skip
    failing = create_job(owner=owner, name="sync invoices", task=NOOP,
                              cron="*/15 * * * *", now=now)  # fmt: skip
    paused = create_job(owner=owner, name="cleanup", task=NOOP, every="P1D", now=now)
    controls.pause_job(job=paused, now=now, reason="disk migration")
    for job, status, retries, ago in (
        (hourly, ExecutionStatus.COMPLETED, 0, timedelta(hours=7)),
        (failing, ExecutionStatus.FAILED, 3, timedelta(minutes=14)),
        (failing, ExecutionStatus.FAILED, 3, timedelta(minutes=29)),
    ):
        Execution.objects.create(
            job=job, task=job.task, scheduled_for=now - ago, status=status, retry_count=retries,
            started_at=now - ago + timedelta(seconds=1.4),
            finished_at=now - ago + timedelta(seconds=3),
        )  # fmt: skip


def test_a_staff_user_cannot_reach_another_owners_job_by_any_url(
    browser: Any, live_server: Any, django_user_model: Any
) -> None:
    alice = django_user_model.objects.create_user("alice", password="alice-pw", is_staff=True)
    alice.user_permissions.set(Permission.objects.filter(content_type__app_label="scheduling"))
    bob = django_user_model.objects.create_user("bob", password="bob-pw", is_staff=True)
    now = timezone.now()
    mine = create_job(owner=alice, name="mine", task=NOOP, every="PT1H", now=now)
    theirs = create_job(owner=bob, name="theirs", task=NOOP, every="PT1H", now=now)
    execution = controls.run_job_now(job=theirs, now=now)
    page = logged_in(browser, live_server.url, "alice", "alice-pw")
    base = f"{live_server.url}/admin/scheduling"

    page.goto(f"{base}/job/")
    names = page.locator("#result_list tbody th a").all_inner_texts()
    assert names == ["mine"]
    for url in (
        f"{base}/job/{theirs.pk}/change/",
        f"{base}/job/{theirs.pk}/delete/",
        f"{base}/job/{theirs.pk}/history/",
        f"{base}/execution/{execution.pk}/change/",
    ):
        page.goto(url)
        assert page.url == f"{live_server.url}/admin/", url
        assert "Perhaps it was deleted?" in page.locator(".messagelist").inner_text()

    # A checkbox rewritten to point at the other owner's job acts on nothing.
    page.goto(f"{base}/job/")
    page.eval_on_selector(
        f"input[name=_selected_action][value='{mine.pk}']",
        f"box => {{ box.value = '{theirs.pk}'; box.checked = true; }}",
    )
    page.select_option("select[name=action]", "run_now")
    page.click("button[name=index]")
    assert "0 jobs queued to run now." in page.locator(".messagelist").inner_text()
    assert Execution.objects.filter(job=theirs).count() == 1
    theirs.refresh_from_db()
    assert (theirs.owner_id, theirs.status) == (bob.pk, JobStatus.ACTIVE)
    page.screenshot(path=str(SCREENSHOTS / "staff-user-job-list.png"), full_page=True)
    assert page.csp_violations == []
