"""The admin's *Backfill…* action in a real browser (Debian's chromium driven by Playwright).

An operator picks the action on the job list, types a range, sees a range that reaches into
the future refused beside *To*, previews the instants, confirms, and reads the count; the
page works under the engine's Content-Security-Policy. The screenshot of the preview goes to
var/screenshots/.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from scheduling.models import Execution, ExecutionStatus
from tests.factories import create_job
from tests.scheduling.test_admin_jobs_browser import (
    SCREENSHOTS,
    browser,
    choose_action,
    logged_in,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

__all__ = ["browser"]  # the fixture, used by name

HOUR = timedelta(hours=1)
NOOP = "scheduling.diagnostics.noop"


def test_an_operator_previews_then_backfills_a_job_s_missed_hours(
    browser: Any, live_server: Any, admin_user: Any
) -> None:
    now = timezone.now()
    start = now.replace(minute=0, second=0, microsecond=0) - 10 * HOUR
    job = create_job(owner=admin_user, name="nightly-report", task=NOOP, every="PT1H",
                     start=start, now=now)  # fmt: skip
    page = logged_in(browser, live_server.url, "admin", "password")
    page.goto(f"{live_server.url}/admin/scheduling/job/")
    choose_action(page, job, "backfill_jobs")

    page.fill("#id_start", start.isoformat())
    page.fill("#id_end", (now + HOUR).isoformat())
    page.click("input[name=preview]")
    assert "is after now" in page.locator(".field-end .errorlist").inner_text()
    assert page.locator("input[name=apply]").count() == 0, "nothing to confirm"

    page.fill("#id_end", (start + 4 * HOUR).isoformat())
    page.click("input[name=preview]")
    preview = page.locator(f"#backfill-preview-{job.pk}")
    assert "4 occurrences would be made" in preview.inner_text()
    assert preview.locator(".backfill-instants li").count() == 4
    page.screenshot(path=str(SCREENSHOTS / "backfill-preview.png"), full_page=True)
    assert not Execution.objects.filter(job=job).exists(), "a preview writes nothing"

    page.click("input[name=apply]")
    said = page.locator(".messagelist").inner_text()
    assert "4 occurrences backfilled for nightly-report" in said
    made = Execution.objects.filter(job=job).order_by("scheduled_for")
    assert [run.scheduled_for for run in made] == [start + i * HOUR for i in range(4)]
    assert {run.status for run in made} == {ExecutionStatus.WAITING}
    assert page.csp_violations == []
