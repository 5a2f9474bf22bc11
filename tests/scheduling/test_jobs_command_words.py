"""``jobs list``, ``jobs show`` and ``jobs history`` say what the admin says, in its words.

A job whose runs never complete carries the admin's warning; a paused job's STATUS names who
paused it without parentheses inside parentheses; a job of a task-table row names the row it
runs, not the engine's runner; a job's ``created`` entry lists only the values it was made
with.
"""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling import api
from scheduling.models import Execution, Job
from scheduling.stages import audit, controls, selectors
from tests.tasktable_app.models import Chore

pytestmark = pytest.mark.django_db

WARNING = "none of its last 5 runs completed (cancelled, superseded or failed)"


def call(*argv: str) -> str:
    out = StringIO()
    call_command(*argv, stdout=out, stderr=StringIO())
    return out.getvalue()


def row_of(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(name + " "))


def cancelled_five_times(job: Job) -> None:
    now = timezone.now()
    for i in range(5):
        Execution.objects.create(
            job=job, task=job.task, status="cancelled", finished_at=now,
            scheduled_for=now - timedelta(minutes=10 - i),
        )  # fmt: skip


def test_jobs_list_and_show_carry_the_warning_of_a_job_whose_runs_never_complete(
    make_job: Any,
) -> None:
    stuck = make_job(name="stuck", overlap="cancel_other")
    make_job(name="healthy")
    cancelled_five_times(stuck)
    listed = call("jobs", "list")
    assert "active (none of its last 5 runs completed)" in row_of(listed, "stuck")
    assert "none of its last" not in row_of(listed, "healthy")
    [data] = [j for j in json.loads(call("jobs", "list", "--json")) if j["name"] == "stuck"]
    assert data["warning"] == WARNING
    shown = call("jobs", "show", "stuck").splitlines()
    assert f"warning: {WARNING}" in shown
    assert json.loads(call("jobs", "show", "stuck", "--json"))["warning"] == WARNING
    assert "warning: none" in call("jobs", "show", "healthy").splitlines()
    assert json.loads(call("jobs", "show", "healthy", "--json"))["warning"] is None


def test_the_command_line_and_the_admin_warn_by_the_same_rule(make_job: Any) -> None:
    job = make_job(name="stuck")
    cancelled_five_times(job)
    read = selectors.with_health(Job.objects.filter(pk=job.pk), now=timezone.now()).get()
    assert selectors.job_warning(read) == selectors.job_warning(job) == WARNING
    controls.pause_job(job=job, now=timezone.now())
    assert selectors.job_warning(Job.objects.get(pk=job.pk)) is None  # paused: no warning
    assert "none of its last" not in row_of(call("jobs", "list"), "stuck")


def test_a_paused_jobs_status_names_who_paused_it_without_nested_parentheses(
    make_job: Any, owner: Any
) -> None:
    make_job(name="nightly")
    call("jobs", "pause", "nightly", "--by", owner.get_username())
    status = row_of(call("jobs", "list"), "nightly")
    assert f"paused by {owner.get_username()} (os: " in status
    assert "(by " not in status and "))" not in status


def test_a_job_of_a_task_table_row_is_listed_by_its_row_not_the_runner() -> None:
    chore = Chore.objects.create(name="polish")
    api.schedule_row(chore, timing=api.Every("PT10S"), name="polishing")
    row = row_of(call("jobs", "list"), "polishing")
    assert row.rstrip().endswith("chore: polish")
    assert "run_task_row" not in row
    shown = call("jobs", "show", "polishing").splitlines()
    assert "target: chore: polish" in shown
    assert json.loads(call("jobs", "show", "polishing", "--json"))["target"] == "chore: polish"


def test_jobs_list_reads_the_rows_it_names_in_one_query_not_one_per_job() -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            call("jobs", "list")
        return len(captured.captured_queries)

    for name in ("polish", "sweep"):
        api.schedule_row(Chore.objects.create(name=name), timing=api.Every("PT10S"), name=name)
    two = queries()
    for name in ("dust", "mop", "wax"):
        api.schedule_row(Chore.objects.create(name=name), timing=api.Every("PT10S"), name=name)
    assert queries() == two
    listed = call("jobs", "list")
    assert all(row_of(listed, n).rstrip().endswith(f"chore: {n}") for n in ("dust", "wax"))


def test_the_admin_and_the_command_line_describe_a_target_with_one_function() -> None:
    from scheduling.web.admin import display
    from scheduling.web.admin import jobs as admin_jobs

    assert admin_jobs.selectors.describe_target is selectors.describe_target
    assert not hasattr(display, "describe_target")


def test_a_created_entry_lists_only_the_values_the_job_was_made_with(make_job: Any) -> None:
    job = make_job(name="plain", every="PT1H")
    [created] = audit.trail(job_id=job.pk)
    assert created.action == "created"
    assert created.changes["interval"] == {"from": None, "to": "PT1H"}
    assert created.changes["max_retries"] == {"from": None, "to": 3}
    assert created.changes["args"] == {"from": None, "to": []}  # no arguments is a value
    for unset in ("cron", "rrule", "note", "task_table", "retry_backoff", "pause_after_failures"):
        assert unset not in created.changes
    history = call("jobs", "history", "plain")
    assert "- -> -" not in history and '- -> ""' not in history
    assert '  interval: - -> "PT1H"' in history.splitlines()
