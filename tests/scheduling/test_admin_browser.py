"""The admin in a real browser (Debian's chromium driven by Playwright).

Bad input is refused with the field and the reason, as on the command line; the execution
history is read-only. The jobs pages have their own file, test_admin_jobs_browser.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from scheduling.models import Schedule
from scheduling.stages import controls
from tests.conftest import wait_for
from tests.factories import create_job

# On every stack: each Django ships its own admin templates and scripts.
pytestmark = [pytest.mark.slow, pytest.mark.stack, pytest.mark.django_db(transaction=True)]


def test_admin_refuses_a_bad_interval_naming_the_field(page: Any) -> None:
    response = page.goto(f"{page.base}/admin/scheduling/schedule/add/")
    assert "content-security-policy" in response.headers
    page.fill("#id_interval", "PT0S")
    page.click("input[name=_save]")
    error = page.locator(".field-interval .errorlist").inner_text()
    assert "shorter than one second" in error
    assert Schedule.objects.count() == 0

    page.fill("#id_interval", "PT1H")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist .success")
    assert Schedule.objects.get().interval == "PT1H"
    assert page.csp_violations == []  # the calendar and clock widgets ran under the policy


def test_execution_history_is_read_only(page: Any, admin_user: Any) -> None:
    job = create_job(
        owner=admin_user, name="once", task="scheduling.diagnostics.noop", every="PT1H",
        now=timezone.now(),
    )  # fmt: skip
    execution = controls.run_job_now(job=job, now=timezone.now())
    page.goto(f"{page.base}/admin/scheduling/execution/{execution.pk}/change/")
    page.wait_for_selector("#content")
    assert page.locator("input[name=_save]").count() == 0
    assert "pending" in page.locator(".field-status").inner_text().lower()
    page.goto(f"{page.base}/admin/scheduling/execution/add/")
    assert "403" in page.title() or page.locator("text=Forbidden").count() > 0
    assert page.csp_violations == []


def test_the_engines_policy_is_enforced_and_what_it_refuses_is_seen(page: Any) -> None:
    """The watch the other browser tests rely on: an inline script (what an injected payload
    would be) is refused by the dashboard's policy, never run, and reported."""
    page.goto(f"{page.base}/dashboard/")
    page.wait_for_selector("#panel-chart")
    assert page.csp_violations == []
    page.evaluate(
        """() => {
            const injected = document.createElement('script');
            injected.textContent = 'window.injected = true';
            document.body.appendChild(injected);
        }"""
    )
    wait_for(lambda: page.csp_violations, timeout=10, message="the refusal is reported")
    assert "script-src" in " ".join(page.csp_violations)
    assert page.evaluate("window.injected === undefined")
