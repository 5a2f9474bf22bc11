"""A job's form in a real browser whose clock is in another zone than the project's: the
zone is named beside each date-time field, and the admin script's "Note: You are N hours
ahead of server time" appears under none of them (it appeared under all three)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import CHROMIUM

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def tokyo_browser(live_server: Any, admin_user: Any, settings: Any) -> Iterator[Any]:
    """The admin, logged in, in a browser that lives in Tokyo; the project runs in New York."""
    from playwright.sync_api import sync_playwright

    settings.TIME_ZONE = "America/New_York"
    assert os.path.exists(CHROMIUM), "Debian's chromium is required: apt-get install chromium"
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        context = browser.new_context(timezone_id="Asia/Tokyo")
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.goto(f"{live_server.url}/admin/login/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", "password")
        page.click("input[type=submit]")
        page.wait_for_selector("#site-name")
        page.base = live_server.url  # type: ignore[attr-defined]
        try:
            yield page
        finally:
            browser.close()
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


def test_a_job_form_names_the_zone_instead_of_saying_you_are_hours_ahead(
    tokyo_browser: Any,
) -> None:
    page = tokyo_browser
    page.goto(f"{page.base}/admin/scheduling/job/add/")
    # The admin's date-time script has run: it adds a calendar link beside each date field.
    page.wait_for_function("document.querySelectorAll('.datetimeshortcuts').length >= 6")
    text = page.inner_text("#content")
    assert "hours ahead" not in text and "hours behind" not in text
    assert page.locator(".duecourse-zone").all_inner_texts() == ["America/New_York"] * 3
