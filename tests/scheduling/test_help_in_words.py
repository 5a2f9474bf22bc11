"""Help text says what a field means in words, never where the code behind it lives.

An operator reads a field's help on the job's, the schedule's and the execution's pages (and
on every page of the emailer and subscriptions); a module path such as
``scheduling.stages.failures`` or an API name such as ``RunContext.report_failures`` tells
them nothing, and goes stale with the code.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.apps import apps
from django.test import Client
from django.utils import timezone

from scheduling.models import Job
from scheduling.stages import controls

#: A dotted path of code: ``scheduling.stages.failures``, ``RunContext.report_failures``,
#: ``app.module`` in parentheses; a file name.
CODE_PATH = re.compile(
    r"\b[a-z_]+\.[a-z_]+\.[a-z_]+\b|\b[A-Z][A-Za-z]+\.[a-z_]+\b|\([a-z_]+\.[a-z_]+\)|\w+\.py\b"
)
APPS = ("scheduling", "emailer", "subscriptions")


def test_no_field_of_the_apps_names_code_in_its_help() -> None:
    found = {
        f"{model._meta.label}.{field.name}": str(field.help_text)
        for label in APPS
        for model in apps.get_app_config(label).get_models()
        for field in model._meta.get_fields()
        if CODE_PATH.search(str(getattr(field, "help_text", "") or ""))
    }
    assert found == {}


@pytest.mark.django_db
def test_a_jobs_schedules_and_runs_pages_explain_their_fields_in_words(
    client: Client, admin_user: Any, make_job: Callable[..., Job]
) -> None:
    job = make_job(name="invoices", owner=admin_user, cron="0 9 * * 1-5")
    execution = controls.run_job_now(job=job, now=timezone.now())
    client.force_login(admin_user)
    for url in (
        f"/admin/scheduling/job/{job.pk}/change/",
        "/admin/scheduling/job/add/",
        f"/admin/scheduling/schedule/{job.schedule_id}/change/",
        f"/admin/scheduling/execution/{execution.pk}/change/",
    ):
        page = client.get(url).content.decode()
        helps = re.findall(r'<div class="help"[^>]*>(.*?)</div>', page, re.S)
        assert helps, url
        assert [text for text in helps if CODE_PATH.search(text)] == [], url
    page = client.get(f"/admin/scheduling/job/{job.pk}/change/").content.decode()
    assert "the job pauses itself" in page
