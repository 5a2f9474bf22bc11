"""What users type is shown escaped on every scheduling admin page, never run as markup.

Each test saves script payloads into the fields a user can type (job name, note, arguments,
pause reason, schedule name, an execution's error) and reads the pages a superuser opens.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils.html import escape

from scheduling.models import Execution, ExecutionStatus, Job
from scheduling.stages import controls
from tests.scheduling.test_admin_jobs import form_data

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert(1)</script>"
ATTRIBUTE = '"><img src=x onerror=alert(1)>'
PAYLOADS = (SCRIPT, ATTRIBUTE)


def assert_shown_escaped(html: str, *payloads: str) -> None:
    for payload in payloads:
        assert payload not in html, f"{payload!r} reached the page unescaped"
        assert escape(payload) in html, f"{payload!r} is not shown at all"


def page(client: Client, url: str) -> str:
    response = client.get(url, follow=True)
    assert response.status_code == 200, url
    return response.content.decode()


def test_a_jobs_typed_fields_are_escaped_on_its_list_page_and_its_page(
    admin_client: Client, make_job: Any, now: Any
) -> None:
    job: Job = make_job(
        name=SCRIPT, note=ATTRIBUTE, args=[SCRIPT], kwargs={"who": ATTRIBUTE}, cron="0 9 * * *"
    )
    job.schedule.name = ATTRIBUTE
    job.schedule.save(update_fields=["name"])
    controls.pause_job(job=job, now=now, reason=SCRIPT + ATTRIBUTE)

    listing = page(admin_client, "/admin/scheduling/job/")
    assert_shown_escaped(listing, SCRIPT)  # the name, and the paused badge's reason
    assert_shown_escaped(page(admin_client, f"/admin/scheduling/job/{job.pk}/change/"), *PAYLOADS)
    assert_shown_escaped(page(admin_client, f"/admin/scheduling/job/{job.pk}/delete/"), SCRIPT)
    assert_shown_escaped(page(admin_client, f"/admin/scheduling/job/{job.pk}/history/"), SCRIPT)


def test_an_executions_error_is_escaped_on_the_execution_pages_and_the_dashboard(
    admin_client: Client, make_job: Any, now: Any
) -> None:
    job = make_job(name=SCRIPT)
    execution = Execution.objects.create(
        job=job,
        task=job.task,
        scheduled_for=now,
        status=ExecutionStatus.FAILED,
        finished_at=now,
        last_error=f"ValueError: {SCRIPT} {ATTRIBUTE}",
    )
    assert_shown_escaped(page(admin_client, "/admin/scheduling/execution/"), SCRIPT)
    assert_shown_escaped(
        page(admin_client, f"/admin/scheduling/execution/{execution.pk}/change/"), *PAYLOADS
    )
    assert_shown_escaped(page(admin_client, f"/admin/scheduling/job/{job.pk}/change/"), *PAYLOADS)
    assert_shown_escaped(page(admin_client, "/admin/dashboard/"), SCRIPT)


def test_a_typed_cron_expression_the_describer_cannot_read_is_echoed_escaped(
    admin_client: Client,
) -> None:
    response = admin_client.post(
        "/admin/scheduling/job/add/", form_data(name="report", interval="", cron=SCRIPT)
    )
    assert response.status_code == 200  # refused, shown again with the expression read back
    assert not Job.objects.exists()
    assert_shown_escaped(response.content.decode(), SCRIPT)
