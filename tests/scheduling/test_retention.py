"""History retention: ``prune_history`` removes old finished executions in batches, keeps the
latest of every job and everything unfinished, and says what it removed."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.models import Attempt, Execution, Job
from scheduling.rules.registry import get_schedulable

pytestmark = pytest.mark.specification
#: The execution table as this database quotes it in the statements a test reads.
EXECUTION_TABLE = connection.ops.quote_name("scheduling_execution")

db = pytest.mark.django_db
DAY = timedelta(days=1)


def history(job: Job, *, days_ago: list[int], status: str = "completed") -> None:
    now = timezone.now()
    for days in days_ago:
        execution = Execution.objects.create(
            job=job, task=job.task, scheduled_for=now - days * DAY, status=status
        )
        Attempt.objects.create(
            execution=execution, number=1, started_at=now - days * DAY, outcome="completed"
        )


def prune(*argv: str) -> dict[str, Any]:
    out = StringIO()
    call_command("prune_history", *argv, "--json", stdout=out)
    return json.loads(out.getvalue())


def ages(job: Job) -> list[int]:
    now = timezone.now()
    return sorted(round((now - e.scheduled_for) / DAY) for e in Execution.objects.filter(job=job))


@db
def test_old_executions_go_and_the_latest_of_every_job_stay(
    make_job: Callable[..., Job],
) -> None:
    busy, rare = make_job(name="busy"), make_job(name="rare")
    history(busy, days_ago=[1, 2, 40, 50, 60, 70])
    history(rare, days_ago=[300, 400])
    report = prune("--older-than", "30d", "--keep-last", "3")
    assert ages(busy) == [1, 2, 40]  # the third newest stays although it is old
    assert ages(rare) == [300, 400]  # a job with fewer than 3 keeps all
    assert report["executions"] == 3 and report["attempts"] == 3
    assert report["jobs"] == {"busy": 3}
    assert Attempt.objects.count() == 5


@db
def test_unfinished_executions_are_never_pruned(make_job: Callable[..., Job]) -> None:
    job = make_job()
    for status in ("pending", "queued", "retry", "running"):
        Execution.objects.create(
            job=job,
            task=job.task,
            scheduled_for=timezone.now() - 90 * DAY - len(status) * DAY,
            status=status,
        )
    history(job, days_ago=[100], status="failed")
    report = prune("--older-than", "P30D", "--keep-last", "0")
    assert report["executions"] == 1
    assert sorted(Execution.objects.values_list("status", flat=True)) == [
        "pending",
        "queued",
        "retry",
        "running",
    ]


@db
def test_deletes_in_bounded_batches(make_job: Callable[..., Job]) -> None:
    job = make_job()
    history(job, days_ago=list(range(31, 56)))  # 25 old executions
    with CaptureQueriesContext(connection) as queries:
        report = prune("--older-than", "30d", "--keep-last", "0", "--batch-size", "10")
    assert report["batches"] == 3 and report["executions"] == 25
    deletes = [
        q["sql"] for q in queries if q["sql"].startswith(f"DELETE FROM {EXECUTION_TABLE}")
    ]
    assert len(deletes) == 3  # one per batch, never one statement for everything
    assert not Execution.objects.exists()


@db
def test_dry_run_counts_and_deletes_nothing(make_job: Callable[..., Job]) -> None:
    job = make_job(name="nightly")
    history(job, days_ago=[40, 50, 60])
    report = prune("--older-than", "30d", "--keep-last", "1", "--dry-run")
    assert report["executions"] == 2 and report["jobs"] == {"nightly": 2}
    assert Execution.objects.count() == 3


@db
def test_text_report_names_the_jobs(make_job: Callable[..., Job]) -> None:
    history(make_job(name="nightly"), days_ago=[40, 50])
    out = StringIO()
    call_command("prune_history", "--older-than", "30d", "--keep-last", "0", stdout=out)
    text = out.getvalue()
    assert text.startswith("removed 2 execution(s) and 2 attempt(s)")
    assert re.search(r"; took \d+\.\d\d s\n", text)
    assert "nightly: 2" in text


@db
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--older-than", "soon"],
            "older_than (--older-than): 'soon' is not a duration such as 30d",
        ),
        (
            ["--older-than", "30d", "--keep-last", "-1"],
            "--keep-last: '-1' is not a whole number from 0 to 1,000,000",
        ),
        (
            ["--older-than", "30d", "--batch-size", "0"],
            "--batch-size: '0' is not a whole number from 1 to 100,000",
        ),
        (
            ["--older-than", "30d", "--max-seconds", "nan"],
            "--max-seconds: 'nan' is not a number of seconds from 0.1 to 604,800",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_option(argv: list[str], message: str) -> None:
    with pytest.raises(CommandError) as caught:
        call_command("prune_history", *argv)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


@db
def test_pruning_is_a_schedulable_task(make_job: Callable[..., Job]) -> None:
    job = make_job(name="old")
    history(job, days_ago=[40, 50])
    task = get_schedulable("scheduling.prune_history")
    result = task.run(older_than="30d", keep_last=1)
    assert result["executions"] == 1
    # and it can be scheduled like any other task
    make_job(name="prune", task="scheduling.prune_history", kwargs={"older_than": "90d"})
