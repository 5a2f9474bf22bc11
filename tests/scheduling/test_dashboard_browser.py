"""The dashboard in a real browser (Debian's chromium driven by Playwright), with a day of
history: every panel renders and the chart draws its bars. (The README's picture of it is
``tests/test_admin_screenshots_browser.py``'s, with the demo's data.)"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone

from scheduling.models import Execution, Job, SchedulerState
from tests.conftest import ROOT
from tests.factories import create_job

# On every stack: the dashboard sits in each Django's own admin header.
pytestmark = [pytest.mark.slow, pytest.mark.stack, pytest.mark.django_db(transaction=True)]

#: Every run saves its screenshot here (ignored by git).
ARTIFACT = ROOT / "var" / "screenshots" / "dashboard-a-day-of-history.png"


def a_day_of_history(owner: Any) -> None:
    """Three jobs, an execution every 20 minutes each for 24 hours, some failed, two running."""
    now = timezone.now()
    names = ("nightly-report", "sync-invoices", "send-digest")
    for index, name in enumerate(names):
        job = create_job(
            owner=owner, name=name, task="scheduling.diagnostics.noop", every="PT20M", now=now
        )
        Job.objects.filter(pk=job.pk).update(next_due_at=now + timedelta(minutes=5 + index * 10))
        rows = []
        for step in range(72):
            due = now - timedelta(minutes=20 * step + 7 * index + 1)
            failed = (step + index) % 17 == 0
            rows.append(
                Execution(
                    job=job,
                    task=job.task,
                    scheduled_for=due,
                    status="failed" if failed else "completed",
                    started_at=due + timedelta(seconds=0.2 + (step % 5) * 0.3),
                    finished_at=due + timedelta(seconds=2),
                    last_error="TimeoutError: upstream did not answer" if failed else "",
                )
            )
        Execution.objects.bulk_create(rows)
    # Written directly: record_tick writes at most once per interval per process, and another
    # test in this process may have just used that interval.
    SchedulerState.objects.create(
        name="scheduler-a:1",
        last_tick_at=now,
        last_tick_seconds=0.002,
        ticks_total=1,
        claimed_total=216,
        started_at=now - timedelta(hours=1),
    )
    running = Job.objects.get(name="send-digest")
    Execution.objects.create(
        job=running,
        task=running.task,
        scheduled_for=now + timedelta(seconds=1),
        status="running",
        worker="worker-a@host",
        started_at=now,
        last_heartbeat_at=now,
    )


def test_the_dashboard_renders_with_a_day_of_history(page: Any, admin_user: Any) -> None:
    cache.clear()
    a_day_of_history(admin_user)
    page.goto(f"{page.base}/admin/")
    page.click("#duecourse-dashboard-link a")
    page.wait_for_selector("#panel-chart svg")
    # The panels can be in the page before its stylesheets have loaded: the styles are read
    # once the page has loaded.
    page.wait_for_load_state("load")
    assert page.locator("#panel-due .dc-big").inner_text() == "3"
    assert page.locator("#panel-running .dc-big").inner_text() == "1"
    assert int(page.locator("#panel-failures .dc-big").inner_text()) >= 10
    assert "nightly-report" in page.locator("#panel-due").inner_text()
    assert page.locator("#panel-chart rect").count() >= 24
    assert "last tick" in page.locator("#dc-scheduler").inner_text()
    assert "s" in page.locator("#panel-lag .dc-lag").first.inner_text()
    # Styled: the admin's stylesheet and the engine's were served and applied, under the
    # engine's Content-Security-Policy, with nothing refused.
    assert page.evaluate("getComputedStyle(document.querySelector('#header')).display") == "flex"
    assert page.evaluate("getComputedStyle(document.querySelector('.dc-grid')).display") == "grid"
    # The breadcrumbs are this Django's own (a list on 6.1, a div before): styled as the
    # admin's bar, right under its header and as wide, never bare text under it.
    crumbs = page.evaluate(
        """() => {
          const bar = document.querySelector('nav .breadcrumbs');
          const header = document.querySelector('#header').getBoundingClientRect();
          const box = bar.getBoundingClientRect();
          const style = getComputedStyle(bar);
          return {text: bar.innerText, background: style.backgroundColor,
                  expected: getComputedStyle(document.documentElement)
                    .getPropertyValue('--breadcrumbs-bg').trim(),
                  gap: box.top - header.bottom, left: box.left, width: box.width,
                  headerWidth: header.width, padding: parseFloat(style.paddingLeft)};
        }"""
    )
    assert crumbs["text"].startswith("Home") and crumbs["text"].endswith("Dashboard")
    assert crumbs["background"] == page.evaluate(
        "(c) => { const e = document.createElement('div'); e.style.color = c;"
        " document.body.appendChild(e); const v = getComputedStyle(e).color; e.remove();"
        " return v; }",
        crumbs["expected"],
    )
    assert (crumbs["gap"], crumbs["left"]) == (0, 0)
    assert crumbs["width"] == crumbs["headerWidth"] and crumbs["padding"] > 0
    assert ".." not in page.locator("#content p").first.inner_text()
    assert page.csp_violations == []
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACT), full_page=True)
    assert ARTIFACT.stat().st_size > 10_000
