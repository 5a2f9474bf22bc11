"""A run that completes although some of its items failed says so through its run context
(``run.report_failures``); the dashboard, ``/metrics`` and ``manage.py executions`` count the
failed items beside failed runs."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from scheduling.models import Execution
from scheduling.web import overview
from scheduling.worker import runtime
from scheduling.worker.run_context import RunContext

pytestmark = [pytest.mark.django_db]


def completed_run(job: Any, *, minutes_ago: int = 5) -> Execution:
    now = timezone.now()
    return Execution.objects.create(
        job=job,
        task=job.task,
        scheduled_for=now - timedelta(minutes=minutes_ago),
        status="completed",
        started_at=now - timedelta(minutes=minutes_ago),
        finished_at=now - timedelta(minutes=minutes_ago - 1),
    )


def context_of(execution: Execution) -> RunContext:
    """The run context a worker hands the runner, writing its reports to the ledger."""
    return RunContext(
        execution_id=execution.pk,
        job_id=execution.job_id,
        scheduled_for=execution.scheduled_for,
        attempt=1,
        _report=runtime._report_failures,
    )


def test_reported_failures_add_up_on_the_execution_with_the_latest_detail(make_job: Any) -> None:
    execution = completed_run(make_job(name="renewals"))
    run = context_of(execution)
    run.report_failures(2, "subscription 4: PaymentDeclined: card declined")
    run.report_failures(1, "subscription 9: GatewayError: timeout")
    run.report_failures(0, "nothing")
    execution.refresh_from_db()
    assert execution.status == "completed"
    assert execution.item_failures == 3
    assert execution.item_failure_detail == "subscription 9: GatewayError: timeout"


def test_the_dashboard_metrics_and_executions_count_failed_items(
    make_job: Any, admin_client: Any, client: Any
) -> None:
    job = make_job(name="renewals")
    context_of(completed_run(job)).report_failures(3, "PaymentDeclined: card declined")
    context_of(completed_run(job, minutes_ago=60 * 30)).report_failures(5, "too old to count")

    counted = overview.item_failures(now=timezone.now())
    assert counted.count == 3 and len(counted.runs.rows) == 1

    page = admin_client.get(reverse("scheduling:dashboard")).content.decode()
    assert "0 failed runs, 3 failed items inside runs" in page
    assert "PaymentDeclined: card declined" in page

    metrics = client.get("/metrics").content.decode()
    assert "duecourse_item_failures_last_day 3.0" in metrics

    out = StringIO()
    call_command("executions", "--job", "renewals", "--json", stdout=out)
    rows = json.loads(out.getvalue())
    assert [r["item_failures"] for r in rows] == [3, 5]
    assert rows[0]["item_failure_detail"] == "PaymentDeclined: card declined"
    text = StringIO()
    call_command("executions", "--job", "renewals", stdout=text)
    assert "failed_items=3" in text.getvalue()


def test_the_dashboard_judges_failures_against_the_thresholds_in_settings(
    make_job: Any, admin_client: Any, settings: Any
) -> None:
    job = make_job(name="renewals")
    context_of(completed_run(job)).report_failures(3, "declined")
    url = reverse("scheduling:dashboard")
    settings.SCHEDULING_DASHBOARD_FAILURES_WARN = 1
    settings.SCHEDULING_DASHBOARD_FAILURES_ALERT = 10
    assert 'class="dc-big dc-warn"' in admin_client.get(url).content.decode()
    settings.SCHEDULING_DASHBOARD_FAILURES_ALERT = 3
    assert 'class="dc-big dc-bad"' in admin_client.get(url).content.decode()
    settings.SCHEDULING_DASHBOARD_FAILURES_WARN = 5
    settings.SCHEDULING_DASHBOARD_FAILURES_ALERT = 50
    assert 'class="dc-big dc-ok"' in admin_client.get(url).content.decode()
