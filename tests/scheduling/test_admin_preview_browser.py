"""The job page's preview of upcoming occurrences in a real browser (chromium via Playwright).

The page lists the next ten occurrences of the saved timing; typing another cron expression
or a calendar refreshes the list from the unsaved fields (and shows their errors), under the
engine's Content-Security-Policy, and saves nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from scheduling.models import Job
from tests.conftest import wait_for
from tests.factories import create_job
from tests.scheduling.test_admin_jobs_browser import SCREENSHOTS, browser, logged_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
__all__ = ["browser"]  # the fixture, shared with the other admin browser tests

NOOP = "scheduling.diagnostics.noop"


def listed(page: Any) -> list[str]:
    return list(page.locator(".duecourse-preview-list time").all_inner_texts())


def test_editing_the_cron_field_refreshes_the_preview_of_the_next_ten(
    browser: Any, live_server: Any, admin_user: Any
) -> None:
    job = create_job(owner=admin_user, name="nightly", task=NOOP, cron="0 3 * * *",
                     tz="Europe/Berlin", now=timezone.now())  # fmt: skip
    page = logged_in(browser, live_server.url, "admin", "password")
    page.goto(f"{live_server.url}/admin/scheduling/job/{job.pk}/change/")
    first = listed(page)
    assert len(first) == 10
    assert all(text[11:16] == "03:00" for text in first)

    page.fill("#id_cron", "30 6 * * 1-5")
    wait_for(
        lambda: (found := listed(page)) and all(t[11:16] == "06:30" for t in found),
        timeout=20, interval=0.2, message="the preview shows the typed expression",
    )  # fmt: skip
    assert len(listed(page)) == 10
    page.screenshot(path=str(SCREENSHOTS / "job-preview.png"), full_page=True)

    page.fill("#id_cron", "0 25 * * *")
    wait_for(
        lambda: "cron:" in page.locator(".duecourse-preview-errors").inner_text(),
        timeout=20, interval=0.2, message="the preview shows the field's error",
    )  # fmt: skip
    assert listed(page) == []

    page.fill("#id_cron", "")
    page.fill("#id_rrule", "FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9")
    wait_for(
        lambda: (found := listed(page)) and all(t[11:16] == "09:00" for t in found),
        timeout=20, interval=0.2, message="the preview shows the typed calendar",
    )  # fmt: skip
    # Nothing was saved while the preview was asked.
    job = Job.objects.select_related("schedule").get(pk=job.pk)
    assert (job.schedule.cron, job.schedule.rrule) == ("0 3 * * *", "")
    assert page.csp_violations == []
