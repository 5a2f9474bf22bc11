"""The command line as a specification: ``jobs``, ``executions`` and every command's help.

Most tests call the commands in-process; two run ``manage.py`` for real to pin down what a
shell sees: exit codes, one JSON value on stdout, one error line on stderr, no traceback.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, ManagementUtility, call_command, get_commands

from scheduling.models import AttemptOutcome, Execution, ExecutionStatus, Job, JobStatus, Schedule
from scheduling.stages import attempts, claims, controls, liveness
from tests.conftest import ROOT, database_url
from tests.factories import create_job
from tests.scheduling.test_admin_jobs import form_data

NOOP = "scheduling.diagnostics.noop"
MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)
MakeJob = Callable[..., Job]

db = pytest.mark.django_db


def call(*argv: str) -> str:
    """Run a command in-process; return its stdout."""
    out, err = StringIO(), StringIO()
    call_command(*argv, stdout=out, stderr=err)
    return out.getvalue()


def call_json(*argv: str) -> Any:
    out = call(*argv, "--json")
    assert out.count("\n") == 1 and out.endswith("\n"), out  # exactly one JSON value
    return json.loads(out)


def refused(*argv: str) -> str:
    """Run a command that must fail; return its one-line message; prove nothing was written."""
    before = (Job.objects.count(), Schedule.objects.count())
    with pytest.raises(CommandError) as caught:
        call(*argv)
    assert (Job.objects.count(), Schedule.objects.count()) == before
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- jobs add ---------------------------------------------------------------------------------


@db
def test_jobs_add_with_every_and_all_the_options(owner: Any) -> None:
    data = call_json(
        "jobs", "add", "report",
        "--task", NOOP,
        "--every", "PT10M",
        "--max-retries", "5",
        "--timeout", "60",
        "--jitter", "2.5",
        "--misfire", "skip",
        "--overlap", "allow",
        "--owner", "owner",
        "--queue", "reports",
        "--priority", "3",
        "--args", '[1, "a"]',
        "--kwargs", '{"k": 1}',
        "--start", "2030-01-01T00:00:00Z",
        "--end", "2031-01-01T00:00:00+01:00",
        "--note", "monthly numbers",
    )  # fmt: skip
    job = Job.objects.get(name="report")
    assert data["id"] == job.pk
    assert (job.owner, job.task, job.args, job.kwargs) == (owner, NOOP, [1, "a"], {"k": 1})
    assert (job.max_retries, job.timeout, job.jitter) == (5, 60, timedelta(seconds=2.5))
    assert (job.misfire, job.overlap, job.queue, job.priority) == ("skip", "allow", "reports", 3)
    assert job.note == "monthly numbers"
    schedule = job.schedule
    assert schedule.interval == "PT10M"
    assert schedule.starts_at == datetime(2030, 1, 1, tzinfo=UTC)
    assert schedule.ends_at == datetime(2030, 12, 31, 23, 0, tzinfo=UTC)
    assert job.next_occurrence_at == datetime(2030, 1, 1, tzinfo=UTC)
    assert data["schedule"]["kind"] == "interval"
    assert data["schedule"]["start"] == "2030-01-01T00:00:00+00:00"
    assert (data["misfire"], data["overlap"], data["jitter"]) == ("skip", "allow", 2.5)


@db
def test_jobs_add_with_cron_in_a_time_zone(owner: Any) -> None:
    data = call_json(
        "jobs", "add", "morning", "--task", NOOP, "--cron", "0 9 * * 1-5", "--tz", "Europe/Berlin"
    )  # fmt: skip
    assert data["schedule"] | {"description": None} == {
        "kind": "cron",
        "interval": None,
        "cron": "0 9 * * 1-5",
        "rrule": None,
        "timezone": "Europe/Berlin",
        "at": None,
        "start": None,
        "end": None,
        "description": None,
    }
    local = datetime.fromisoformat(data["next_occurrence_at"]).astimezone(ZoneInfo("Europe/Berlin"))
    assert (local.hour, local.minute) == (9, 0) and local.weekday() < 5


@db
def test_jobs_add_once_at_an_instant(owner: Any) -> None:
    data = call_json("jobs", "add", "once", "--task", NOOP, "--at", "2030-01-07T10:00:00+01:00")
    assert data["schedule"]["kind"] == "once"
    assert data["schedule"]["at"] == "2030-01-07T09:00:00+00:00"
    assert data["next_due_at"] == "2030-01-07T09:00:00+00:00"


@db
def test_jobs_add_without_owner_uses_the_first_superuser(django_user_model: Any) -> None:
    django_user_model.objects.create(username="plain")
    django_user_model.objects.create(username="admin", is_superuser=True)
    assert call_json("jobs", "add", "x", "--task", NOOP, "--every", "PT1H")["owner"] == "admin"


@db
def test_jobs_add_in_text_says_what_was_created(owner: Any) -> None:
    out = call("jobs", "add", "report", "--task", NOOP, "--every", "PT3H")
    assert out.startswith("created job 'report' (every 3 hours), next due ")
    assert out.count("\n") == 1


@db
def test_jobs_add_for_a_task_table_row(owner: Any) -> None:
    from tests.tasktable_app.models import Chore

    row = Chore.objects.create(name="digest")
    data = call_json(
        "jobs", "add", "mail", "--task", "scheduling.run_task_row", "--every", "PT1H",
        "--task-table", "tasktable_app.Chore", "--task-row-id", str(row.pk),
    )  # fmt: skip
    assert (data["task_table"], data["task_row_id"]) == ("tasktable_app.Chore", row.pk)
    message = refused(
        "jobs", "add", "gone", "--task", "scheduling.run_task_row", "--every", "PT1H",
        "--task-table", "tasktable_app.Chore", "--task-row-id", str(row.pk + 1000),
    )  # fmt: skip
    assert message.startswith("task_row_id (--task-row-id): no tasktable_app.Chore row with id")


# --- jobs list, show, pause, resume, run, remove ----------------------------------------------


@db
def test_jobs_list_shows_every_job(make_job: MakeJob, django_user_model: Any) -> None:
    make_job(name="b-job", every="PT3H")
    paused = make_job(name="a-job", cron="0 9 * * *", tz="Europe/Berlin")
    controls.pause_job(job=paused, now=paused.created_at)
    data = call_json("jobs", "list")
    assert [(j["name"], j["status"]) for j in data] == [("a-job", "paused"), ("b-job", "active")]
    text = call("jobs", "list").splitlines()
    headers = ["NAME", "OWNER", "STATUS", "SCHEDULE", "NEXT", "DUE", "RUNS", "TARGET"]
    assert text[0].split() == headers
    assert text[1].split()[1] == "owner"
    assert text[1].startswith("a-job") and "paused" in text[1] and "Europe/Berlin" in text[1]
    assert text[2].startswith("b-job") and "every 3 hours" in text[2]


@db
def test_arguments_a_task_cannot_take_are_refused_when_the_job_is_made(owner: Any) -> None:
    add = ("jobs", "add", "nightly", "--every", "PT1H", "--task", "scheduling.diagnostics.sleep")
    assert refused(*add, "--kwargs", '{"nope": 1}') == (
        "kwargs: 'nope' is not a parameter of scheduling.diagnostics.sleep(seconds=1.0)"
    )
    assert refused(*add, "--args", "[1, 2]") == (
        "args: sleep() takes from 0 to 1 positional arguments but 2 were given"
    )
    call(*add, "--kwargs", '{"seconds": 2}')  # what it takes is made
    assert Job.objects.get().kwargs == {"seconds": 2}


@db
def test_a_task_table_typed_in_another_case_is_stored_as_registered(owner: Any) -> None:
    from tests.tasktable_app.models import Chore

    row = Chore.objects.create(name="weekly")
    call(
        "jobs",
        "add",
        "weekly",
        "--every",
        "PT1H",
        "--task-table",
        "TASKTABLE_APP.chore",
        "--task-row-id",
        str(row.pk),
    )
    assert Job.objects.get().task_table == "tasktable_app.Chore"
    row.delete()  # and so its delete takes the job
    assert not Job.objects.exists()


@db
def test_a_decorated_task_is_checked_by_what_its_wrapper_takes(owner: Any) -> None:
    add = ("jobs", "add", "--every", "PT1H", "--task", "tasktable_app.close_ledger")
    call(*add[:2], "close-main", *add[2:], "--kwargs", '{"ledger": "main"}')
    assert refused(*add[:2], "close-fx", *add[2:], "--kwargs", '{"client": "c", "ledger": "fx"}')
    assert [job.name for job in Job.objects.all()] == ["close-main"]


@db
def test_a_task_table_without_a_row_and_a_negative_retry_count_name_their_options(
    owner: Any,
) -> None:
    every = ("--every", "PT1H")
    assert refused("jobs", "add", "t", "--task-table", "tasktable_app.Chore", *every) == (
        "task_row_id (--task-row-id): is required with a task table: the id of the row to run"
    )
    assert refused(
        "jobs", "add", "m", "--task", "scheduling.diagnostics.noop", *every, "--max-retries", "-1"
    ) == ("--max-retries: '-1' is not a whole number from 0 to 2,147,483,647")


@db
def test_jobs_list_for_an_owner_who_does_not_exist_is_refused(make_job: MakeJob) -> None:
    make_job(name="a-job")
    assert refused("jobs", "list", "--owner", "nobody") == "owner: no user named 'nobody'"
    assert [j["name"] for j in call_json("jobs", "list", "--owner", "owner")] == ["a-job"]


@db
def test_jobs_list_json_of_no_jobs_is_an_empty_array() -> None:
    assert call_json("jobs", "list") == []


@db
def test_jobs_show_includes_recent_executions(make_job: MakeJob, now: datetime) -> None:
    job = make_job(name="nightly", every="PT1M", overlap="allow")
    for i in range(3):
        claims.claim_due_jobs(now=now + i * MINUTE, limit=10)
    data = call_json("jobs", "show", "nightly")
    assert data["name"] == "nightly" and data["id"] == job.pk
    assert [e["scheduled_for"] for e in data["recent_executions"]] == [
        (now + i * MINUTE).isoformat() for i in (2, 1, 0)
    ]
    assert all(e["status"] == "pending" for e in data["recent_executions"])
    text = call("jobs", "show", "nightly")
    assert "name: nightly" in text
    assert "recent executions:" in text
    assert text.count("pending") == 3


@db
def test_jobs_pause_resume_run_and_remove(make_job: MakeJob) -> None:
    job = make_job(name="nightly", every="PT1H")
    assert call_json("jobs", "pause", "nightly")["status"] == "paused"
    assert Job.objects.get(pk=job.pk).status == JobStatus.PAUSED
    assert "unchanged" in call("jobs", "pause", "nightly")
    assert call_json("jobs", "resume", "nightly")["status"] == "active"
    assert Job.objects.get(pk=job.pk).status == JobStatus.ACTIVE

    run = call_json("jobs", "run", "nightly")
    execution = Execution.objects.get(pk=run["id"])
    # Published at once, as a claimed occurrence is: no wait for the pending grace.
    assert (execution.job_id, execution.status) == (job.pk, ExecutionStatus.QUEUED)
    assert run["job"] == "nightly" and run["task_id"] == str(execution.task_id)

    removed = call_json("jobs", "remove", "nightly")
    assert removed["name"] == "nightly"
    assert not Job.objects.filter(pk=job.pk).exists()
    assert not Schedule.objects.filter(pk=job.schedule_id).exists()
    assert not Execution.objects.exists()


@db
def test_jobs_with_the_same_name_are_told_apart_by_owner(
    make_job: MakeJob, django_user_model: Any
) -> None:
    other = django_user_model.objects.create(username="other")
    make_job(name="nightly")
    make_job(name="nightly", owner=other)
    assert "--owner" in refused("jobs", "pause", "nightly")
    assert call_json("jobs", "pause", "nightly", "--owner", "other")["owner"] == "other"
    assert Job.objects.get(owner=other).status == JobStatus.PAUSED


@db
def test_a_name_two_owners_use_is_refused_naming_both(
    make_job: MakeJob, django_user_model: Any
) -> None:
    other = django_user_model.objects.create(username="other")
    make_job(name="nightly")
    make_job(name="nightly", owner=other)
    message = refused("jobs", "show", "nightly")
    assert message == (
        "name: other, owner each have a job named 'nightly'; pass --owner USERNAME to say whose"
    )
    assert "no job named 'nightly' owned by 'nobody'" in refused(
        "jobs", "show", "nightly", "--owner", "nobody"
    )
    listed = call("jobs", "list", "--owner", "other").splitlines()
    assert len(listed) == 2 and listed[1].split()[:2] == ["nightly", "other"]


# --- jobs edit --------------------------------------------------------------------------------


@db
def test_jobs_edit_changes_only_the_given_options_and_keeps_the_history(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(name="nightly", every="PT1H", max_retries=5, queue="reports", note="n")
    claims.claim_due_jobs(now=now, limit=10)
    data = call_json("jobs", "edit", "nightly", "--cron", "30 2 * * *", "--tz", "Europe/Paris",
                     "--timeout", "60")  # fmt: skip
    edited = Job.objects.select_related("schedule").get(pk=job.pk)
    assert (edited.schedule.interval, edited.schedule.cron) == ("", "30 2 * * *")
    assert edited.schedule.timezone == "Europe/Paris"
    assert (edited.timeout, edited.max_retries, edited.queue, edited.note) == (
        60, 5, "reports", "n"
    )  # fmt: skip
    assert Execution.objects.filter(job=edited).count() == 1
    local = edited.next_occurrence_at.astimezone(ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute) == (2, 30)
    assert data["schedule"]["cron"] == "30 2 * * *" and data["timeout"] == 60

    call("jobs", "edit", "nightly", "--rename", "nightly-2", "--start", "2031-01-01T00:00Z")
    renamed = Job.objects.select_related("schedule").get(pk=job.pk)
    assert renamed.name == "nightly-2"
    assert renamed.schedule.starts_at == datetime(2031, 1, 1, tzinfo=UTC)
    assert renamed.next_occurrence_at >= datetime(2031, 1, 1, tzinfo=UTC)
    call("jobs", "edit", "nightly-2", "--start", "")
    assert Schedule.objects.get(pk=renamed.schedule_id).starts_at is None
    call("jobs", "edit", "nightly-2", "--every", "PT5M")  # the Paris zone went with the cron
    assert Schedule.objects.filter(pk=renamed.schedule_id).values_list(
        "interval", "timezone"
    ).get() == ("PT5M", "UTC")
    assert "--tz" in refused("jobs", "edit", "nightly-2", "--tz", "Europe/Paris")


@db
def test_jobs_edit_refuses_bad_input_naming_the_option(make_job: MakeJob) -> None:
    job = make_job(name="nightly", every="PT1H")
    make_job(name="taken")
    assert refused("jobs", "edit", "nightly", "--every", "PT0S").startswith(
        "interval (--every): 'PT0S' is shorter than one second"
    )
    assert refused("jobs", "edit", "nightly", "--cron", "61 * * * *").startswith("cron: ")
    assert refused("jobs", "edit", "nightly", "--task", "nope.task").startswith("task: ")
    assert "already has a job named 'taken'" in refused(
        "jobs", "edit", "nightly", "--rename", "taken"
    )
    assert "nothing to change" in refused("jobs", "edit", "nightly")
    unchanged = Job.objects.select_related("schedule").get(pk=job.pk)
    assert (unchanged.name, unchanged.schedule.interval, unchanged.task) == (
        "nightly", "PT1H", NOOP
    )  # fmt: skip


@db
def test_jobs_edit_of_a_shared_schedule_leaves_the_other_jobs_alone(make_job: MakeJob) -> None:
    first = make_job(name="first", every="PT1H")
    second = make_job(name="second", schedule=first.schedule)
    call("jobs", "edit", "second", "--every", "PT5M")
    assert Job.objects.get(pk=first.pk).schedule.interval == "PT1H"
    assert Job.objects.get(pk=second.pk).schedule.interval == "PT5M"
    assert Schedule.objects.count() == 2


# --- executions -------------------------------------------------------------------------------


@pytest.fixture
def history(make_job: MakeJob, now: datetime) -> dict[str, Execution]:
    """Four occurrences of 'nightly' in four states, and one of another job."""
    job = make_job(name="nightly", every="PT1M", overlap="allow", max_retries=0)
    make_job(name="other", every="PT1H")
    for i in range(4):
        claims.claim_due_jobs(now=now + i * MINUTE, limit=10)
    rows = {e.scheduled_for: e.pk for e in Execution.objects.filter(job=job)}
    done, failed, running, pending = (rows[now + i * MINUTE] for i in range(4))
    attempts.start_execution(execution_id=done, worker="w1@a", pid=1, now=now + 5 * SECOND)
    liveness.record_heartbeat(execution_ids=[done], now=now + 20 * SECOND)
    attempts.complete_execution(execution_id=done, now=now + 30 * SECOND)
    at = now + MINUTE + 5 * SECOND
    attempts.start_execution(execution_id=failed, worker="w2@b", pid=2, now=at)
    attempts.fail_attempt(
        execution_id=failed,
        error="RuntimeError: boom\n  File x, line 1",
        outcome=AttemptOutcome.FAILED,
        now=at + 10 * SECOND,
    )
    at = now + 2 * MINUTE + 5 * SECOND
    attempts.start_execution(execution_id=running, worker="w1@a", pid=3, now=at)
    liveness.record_heartbeat(execution_ids=[running], now=at + 10 * SECOND)
    return {
        name: Execution.objects.get(pk=pk)
        for name, pk in (
            ("done", done),
            ("failed", failed),
            ("running", running),
            ("pending", pending),
        )
    }


@db
def test_executions_of_a_job_newest_first_with_their_details(
    history: dict[str, Execution], now: datetime
) -> None:
    rows = call_json("executions", "--job", "nightly")
    assert [r["status"] for r in rows] == ["pending", "running", "failed", "completed"]
    assert {r["job"] for r in rows} == {"nightly"}
    failed = rows[2]
    row = history["failed"]
    assert failed["scheduled_for"] == (now + MINUTE).isoformat()
    assert failed["retry_count"] == 0
    assert failed["task_id"] == str(row.task_id)
    assert failed["worker"] == "w2@b"
    assert failed["started_at"] == (now + MINUTE + 5 * SECOND).isoformat()
    assert failed["finished_at"] == (now + MINUTE + 15 * SECOND).isoformat()
    assert failed["last_heartbeat_at"] == (now + MINUTE + 5 * SECOND).isoformat()
    assert failed["last_error"].startswith("RuntimeError: boom")
    running = rows[1]
    assert running["last_heartbeat_at"] == (now + 2 * MINUTE + 15 * SECOND).isoformat()
    assert running["finished_at"] is None


@db
def test_executions_filter_by_status_and_limit(history: dict[str, Execution]) -> None:
    [failed] = call_json("executions", "--job", "nightly", "--status", "failed")
    assert failed["id"] == history["failed"].pk
    newest = call_json("executions", "--job", "nightly", "--limit", "2")
    assert [r["id"] for r in newest] == [history["pending"].pk, history["running"].pk]
    everything = call_json("executions")
    assert {r["job"] for r in everything} == {"nightly", "other"}
    with_attempts = call_json("executions", "--job", "nightly", "--status", "failed", "--attempts")
    assert [a["outcome"] for a in with_attempts[0]["attempts"]] == ["failed"]


@db
def test_executions_in_text_show_one_line_each(
    history: dict[str, Execution], now: datetime
) -> None:
    lines = call("executions", "--job", "nightly").splitlines()
    assert len(lines) == 4
    failed = lines[2]
    for part in (
        f"{now + MINUTE:%Y-%m-%d %H:%M:%S} UTC",
        "nightly",
        "failed",
        "retries=0",
        "worker=w2@b",
        "started=+5 s",
        "finished=+15 s",
        "heartbeat=+5 s",
        f"task_id={history['failed'].task_id}",
        "RuntimeError: boom",
    ):
        assert part in failed, (part, failed)
    assert "File x" not in failed  # only the error's first line
    assert "pending" in lines[0] and "worker=-" in lines[0]


@db
def test_executions_in_text_with_attempts_show_each_attempt_under_its_run(
    history: dict[str, Execution],
) -> None:
    lines = call("executions", "--job", "nightly", "--status", "failed", "--attempts").splitlines()
    assert len(lines) == 2 and "failed" in lines[0]
    attempt = lines[1]
    for part in ("  attempt 1 failed", "worker=w2@b", "pid=2", "started=+5 s", "finished=+15 s"):
        assert part in attempt, (part, attempt)
    assert attempt.endswith("RuntimeError: boom")


@db
def test_executions_with_no_rows_says_so() -> None:
    assert call("executions") == "no executions\n"


# --- help -------------------------------------------------------------------------------------

SCHEDULING_COMMANDS = sorted(name for name, app in get_commands().items() if app == "scheduling")
JOBS_ACTIONS = ["add", "edit", "list", "show", "pause", "resume", "run", "remove"]


@pytest.mark.parametrize(
    "argv",
    [[name] for name in SCHEDULING_COMMANDS] + [["jobs", action] for action in JOBS_ACTIONS],
    ids=" ".join,
)
def test_every_command_has_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        ManagementUtility(["manage.py", *argv, "--help"]).execute()
    assert caught.value.code in (0, None)
    out = capsys.readouterr().out
    assert out.startswith("usage: manage.py ")
    assert " ".join(argv) in out.splitlines()[0]


def test_jobs_add_help_lists_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        ManagementUtility(["manage.py", "jobs", "add", "--help"]).execute()
    out = capsys.readouterr().out
    for option in ("--every", "--cron", "--at", "--tz", "--misfire", "--overlap", "--jitter"):
        assert option in out


def test_the_commands_this_file_knows_are_all_the_commands() -> None:
    assert SCHEDULING_COMMANDS == [
        "executions",
        "import_beat",
        "jobs",
        "loaddemo",
        "prune_history",
        "reap",
        "runscheduler",
        "runstack",
    ]


# --- errors -----------------------------------------------------------------------------------

ADD = ["jobs", "add", "bad", "--task", NOOP]


@db
@pytest.mark.parametrize(
    ("argv", "field", "words"),
    [
        ([*ADD, "--every", "3 hours"], "interval", "not an ISO-8601 duration"),
        ([*ADD, "--every", "PT0S"], "interval", "shorter than one second"),
        ([*ADD, "--every", "P1M"], "interval", "months or years"),
        ([*ADD, "--cron", "0 25 * * *"], "cron", "hour"),
        ([*ADD, "--cron", "0 9 * * *", "--tz", "Europe/Nowhere"], "timezone", "IANA"),
        ([*ADD, "--every", "PT1H", "--args", "{}"], "args", "JSON list"),
        ([*ADD, "--every", "PT1H", "--kwargs", "[]"], "kwargs", "JSON object"),
        ([*ADD, "--every", "PT1H", "--args", "[1,"], "args", "not valid JSON"),
        (["jobs", "add", "bad", "--task", "gone.task", "--every", "PT1H"], "task", "registered"),
        (["jobs", "add", "bad", "--task", "celery.backend_cleanup", "--every", "PT1H"], "task", ""),
        ([*ADD, "--at", "2030-01-07T09:00:00"], "at", "time zone offset"),
        ([*ADD, "--at", "next tuesday"], "at", "not an ISO-8601 date-time"),
        (
            [*ADD, "--every", "PT1H", "--start", "2030-02-01T00:00Z", "--end", "2030-01-01T00:00Z"],
            "ends_at",
            "after",
        ),
        ([*ADD, "--every", "PT1H", "--owner", "ghost"], "owner", "no user named 'ghost'"),
        ([*ADD, "--every", "PT1H", "--timeout", "0"], "--timeout", "from 1 to"),
        ([*ADD, "--every", "PT1H", "--max-retries", "-1"], "--max-retries", "from 0 to"),
        ([*ADD, "--every", "PT1H", "--jitter", "-1"], "jitter", "zero or more"),
        ([*ADD, "--every", "PT1H", "--jitter", "nan"], "jitter", "'nan' is not a number"),
        ([*ADD, "--every", "PT1H", "--jitter", "inf"], "jitter", "'inf' is not a number"),
        ([*ADD, "--every", "PT1H", "--jitter", "1e15"], "jitter", "at most 86400 seconds"),
        ([*ADD, "--every", "P99999999D"], "interval", "beyond the year 9999"),
        ([*ADD, "--every=-PT5S"], "interval", "negative"),
        (
            [*ADD, "--every", "PT1H", "--start", "9999-12-31T23:30Z"],
            "interval",
            "beyond the year 9999",
        ),
        (
            [*ADD, "--every", "PT1H", "--tz", "Europe/Berlin"],
            "timezone",
            "cron expression or a calendar only",
        ),
        (
            [*ADD, "--at", "2030-01-07T09:00Z", "--tz", "Europe/Berlin"],
            "timezone",
            "cron expression or a calendar only",
        ),
        ([*ADD, "--every", "PT1H", "--note", "x" * 501], "note", "501 characters"),
        ([*ADD, "--every", "PT1H", "--kwargs", '{"a": NaN}'], "kwargs", "must be finite"),
        ([*ADD, "--every", "PT1H", "--args", "[Infinity]"], "args", "must be finite"),
        ([*ADD, "--every", "PT1H", "--args", '[{"deep": [-1e999]}]'], "args", "must be finite"),
        ([*ADD, "--every", "PT1H", "--end", "2020-01-01T00:00Z"], "end", "already passed"),
        ([*ADD, "--cron", "0 9 * * *", "--tz", ""], "timezone", "must not be empty"),
        ([*ADD, "--cron", "0 9 * * *", "--tz", " "], "timezone", "must not be empty"),
        (["executions", "--owner", "ghost"], "owner", "no user named 'ghost'"),
        (["prune_history", "--older-than", "99999999d"], "older_than", "before the year 1"),
        (["prune_history", "--older-than", "99999999999d"], "older_than", "longer than any"),
        (["jobs", "show", "nobody"], "name", "no job named 'nobody'"),
        (["jobs", "pause", "nobody"], "name", "no job named 'nobody'"),
        (["jobs", "remove", "nobody"], "name", "no job named 'nobody'"),
        (["executions", "--job", "nobody"], "name", "no job named 'nobody'"),
        (["executions", "--status", "bogus"], "status", "'bogus' is not one of"),
        (["executions", "--limit", "0"], "--limit", "from 1 to 10,000"),
    ],
    ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else None,
)
def test_errors_are_one_line_naming_the_field(
    owner: Any, argv: list[str], field: str, words: str
) -> None:
    message = refused(*argv)
    assert re.search(rf"(^|; ){field}( \(--[a-z-]+\))?: ", message), message
    assert words in message


@db
def test_a_reason_checked_by_django_and_by_our_rules_is_said_once(owner: Any) -> None:
    assert refused("jobs", "add", "", "--task", NOOP, "--every", "PT1H") == (
        "name: must not be empty"
    )


@db
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [*ADD, "--every", "-PT5S"],
            "--every: expected a value (for one that starts with '-', write --every=VALUE)",
        ),
        ([*ADD, "--every", "PT1H", "--cron", "* * * * *"], "--cron: not allowed with --every"),
        (ADD, "--every: one of --every, --cron, --at, --rrule is required"),
        ([*ADD, "--every", "PT1H", "--timeout", "soon"], "--timeout: 'soon' is not a whole number"),
        ([*ADD, "--every", "PT1H", "--misfire", "later"], "--misfire: invalid choice: 'later'"),
        (["jobs", "launch"], "ACTION: invalid choice: 'launch'"),
        (["reap", "--stale-after", "nan"], "--stale-after: 'nan' is not a number of seconds"),
        (["reap", "--stale-after", "-5"], "--stale-after: '-5' is not a number of seconds"),
        (["runscheduler", "--max-sleep", "inf"], "--max-sleep: 'inf' is not a number of seconds"),
        (["runscheduler", "--batch-size", "0"], "--batch-size: '0' is not a whole number from 1"),
        (["runstack", "--concurrency", "two"], "--concurrency: 'two' is not a whole number from"),
    ],
    ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else None,
)
def test_option_errors_are_one_line_naming_the_option(argv: list[str], message: str) -> None:
    assert refused(*argv).startswith(message)


@db
@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (["--kwargs", '{"a": NaN}'], "kwargs", "must be finite"),
        (["--args", "[Infinity]"], "args", "must be finite"),
        (["--end", "2020-01-01T00:00Z"], "end", "already passed"),
        (["--tz", ""], "timezone (--tz)", "must not be empty"),
    ],
)
def test_jobs_edit_refuses_what_jobs_add_refuses_and_changes_nothing(
    make_job: MakeJob, change: list[str], field: str, words: str
) -> None:
    job = make_job(name="report", cron="0 9 * * *", tz="Europe/Paris", kwargs={"a": 1})
    before = Job.objects.values().get(pk=job.pk), Schedule.objects.values().get(pk=job.schedule_id)
    message = refused("jobs", "edit", "report", *change)
    assert message.startswith(f"{field}: ") and words in message
    after = Job.objects.values().get(pk=job.pk), Schedule.objects.values().get(pk=job.schedule_id)
    assert after == before


@db
def test_non_finite_json_is_refused_by_the_model_for_the_admin_and_the_api_too(
    owner: Any, admin_client: Any
) -> None:
    with pytest.raises(ValidationError) as caught:
        create_job(
            owner=owner, name="api", task=NOOP, every="PT1H", kwargs={"a": float("nan")},
            now=datetime.now(UTC),
        )  # fmt: skip
    assert "must be finite" in caught.value.message_dict["kwargs"][0]
    response = admin_client.post("/admin/scheduling/job/add/", form_data(args="[Infinity]"))
    assert response.status_code == 200
    assert "must be finite" in response.context["adminform"].form.errors["args"][0]
    assert not Job.objects.exists()


@db
def test_executions_owner_alone_lists_that_owners_executions(
    make_job: MakeJob, django_user_model: Any, now: datetime
) -> None:
    mine = make_job(name="mine")
    theirs = make_job(name="theirs", owner=django_user_model.objects.create(username="bob"))
    claims.claim_due_jobs(now=now, limit=10)
    assert {e["job"] for e in call_json("executions")} == {"mine", "theirs"}
    assert [e["job"] for e in call_json("executions", "--owner", "bob")] == [theirs.name]
    assert [e["job"] for e in call_json("executions", "--owner", mine.owner.username)] == ["mine"]


@db
def test_duplicate_job_name_is_refused_on_the_command_line(owner: Any) -> None:
    call("jobs", "add", "report", "--task", NOOP, "--every", "PT1H")
    message = refused("jobs", "add", "report", "--task", NOOP, "--every", "PT2H")
    assert message.startswith("name: ") and "already has a job named 'report'" in message


# --- the real command line --------------------------------------------------------------------


def manage(*argv: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"DATABASE_URL": database_url(), "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "manage.py", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.django_db(transaction=True)
def test_a_shell_sees_one_json_value_or_one_error_line(owner: Any) -> None:
    ok = manage("jobs", "add", "report", "--task", NOOP, "--every", "PT1H", "--json")
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert isinstance(data, dict) and data["name"] == "report"
    assert ok.stdout.count("\n") == 1
    assert Job.objects.filter(name="report").exists()

    bad = manage("jobs", "add", "late", "--task", NOOP, "--every", "3 hours", "--json")
    assert bad.returncode != 0
    assert bad.stdout == ""
    assert "Traceback" not in bad.stderr
    [line] = bad.stderr.strip().splitlines()
    assert "interval (--every): '3 hours' is not an ISO-8601 duration" in line
    assert not Job.objects.filter(name="late").exists()


@pytest.mark.django_db(transaction=True)
def test_a_shell_sees_option_errors_as_one_line_and_help_in_full(owner: Any) -> None:
    bad = manage("jobs", "add", "x", "--task", NOOP, "--every", "PT1H", "--cron", "* * * * *")
    assert bad.returncode == 2
    assert bad.stdout == ""
    [line] = bad.stderr.strip().splitlines()
    assert line == "manage.py jobs add: error: --cron: not allowed with --every"

    jitter = manage("jobs", "add", "x", "--task", NOOP, "--every", "PT1H", "--jitter", "nan")
    assert jitter.returncode == 1
    assert "Traceback" not in jitter.stderr
    [line] = jitter.stderr.strip().splitlines()
    assert line == "CommandError: jitter: 'nan' is not a number of seconds"

    nan = manage("jobs", "add", "x", "--task", NOOP, "--every", "PT1H", "--kwargs", '{"a": NaN}')
    assert nan.returncode == 1 and "Traceback" not in nan.stderr
    [line] = nan.stderr.strip().splitlines()
    assert line.startswith("CommandError: kwargs: holds nan; JSON numbers must be finite")

    helped = manage("jobs", "add", "--help")
    assert helped.returncode == 0
    assert helped.stdout.startswith("usage: manage.py jobs add")
    assert "--tz TZ" in helped.stdout and len(helped.stdout.splitlines()) > 20
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_jobs_add_never_points_a_job_at_an_internal_task_table(admin_user: Any) -> None:
    from tests.tasktable_app.models import ChoreBatch

    batch = ChoreBatch.objects.create(name="monday")
    with pytest.raises(CommandError, match="never by a job made by hand"):
        call_command(
            "jobs", "add", "early", "--task-table", "tasktable_app.ChoreBatch",
            "--task-row-id", str(batch.pk), "--every", "PT1H",
        )  # fmt: skip
    assert not Job.objects.filter(name="early").exists()


def test_runscheduler_logs_to_stderr_only_where_the_project_configured_no_handler() -> None:
    import logging

    from scheduling.management.commands.runscheduler import log_to_stderr_unless_configured

    unconfigured = logging.Logger("scheduling-unconfigured")
    log_to_stderr_unless_configured(unconfigured, None)
    assert unconfigured.level == logging.INFO and len(unconfigured.handlers) == 1

    configured = logging.Logger("scheduling-configured")
    configured.addHandler(logging.NullHandler())
    log_to_stderr_unless_configured(configured, "WARNING")
    assert configured.level == logging.WARNING and len(configured.handlers) == 1


@db
def test_runscheduler_refuses_an_unknown_log_level() -> None:
    with pytest.raises(CommandError, match="loglevel"):
        call("runscheduler", "--once", "--loglevel", "chatty")
