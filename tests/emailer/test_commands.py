"""``manage.py emailer``: each action's result, its ``--json`` form and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from emailer.models import Participant, Project, SendEmailTask
from scheduling.api import jobs_for_row
from tests.conftest import ROOT, database_url

pytestmark = [pytest.mark.django_db]


def emailer(*args: str) -> str:
    out = StringIO()
    call_command("emailer", *args, stdout=out)
    return out.getvalue()


def emailer_json(*args: str) -> Any:
    return json.loads(emailer(*args, "--json"))


def error_of(*args: str) -> str:
    with pytest.raises(CommandError) as caught:
        emailer(*args)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_project_is_added_changed_and_removed_with_its_tasks_and_their_jobs() -> None:
    assert emailer_json("project", "add", "survey") == {
        "id": Project.objects.get().pk, "name": "survey", "state": "draft",
    }
    assert emailer_json("project", "state", "survey", "active")["state"] == "active"
    emailer("task", "add", "invite", "--project", "survey", "--subject", "Hi", "--body", "B")
    emailer("task", "schedule", "invite", "--every", "PT1H")
    task = SendEmailTask.objects.get()
    assert len(jobs_for_row(task)) == 1
    removed = emailer_json("project", "remove", "survey")
    assert removed["deleted"]["sendemailtask"] == 1
    assert not jobs_for_row(task)


def test_participants_import_is_idempotent_by_email_and_reports_refused_lines(
    tmp_path: Path,
) -> None:
    emailer("project", "add", "survey")
    csv_file = tmp_path / "people.csv"
    csv_file.write_text(
        "email,name,status\n"
        "Ada@Example.com,Ada,invited\n"
        "not-an-address,Bob\n"
        "grace@example.com,Grace,retired\n"
        "alan@example.com,Alan\n"
        "only-one-column\n"
    )
    first, error = import_json(csv_file)
    assert (first["rows"], first["added"], first["updated"], first["invalid"]) == (5, 2, 0, 3)
    assert first["refused"] == [
        {"line": 3, "reason": "email: 'not-an-address' is not an email address"},
        {"line": 4, "reason": "status: 'retired' is not one of invited, started, completed"},
        {"line": 6, "reason": "email: 'only-one-column' is not an email address"},
    ]
    assert error == "file: 3 of 5 rows not imported (0 duplicate in file, 3 invalid)"
    csv_file.write_text("ada@example.com,Ada Lovelace,started\nalan@example.com,Alan\n")
    again = emailer_json("participants", "import", "survey", str(csv_file))
    assert (again["added"], again["updated"], again["unchanged"]) == (0, 1, 1)
    ada = Participant.objects.get(email="ada@example.com")
    assert (ada.name, ada.status) == ("Ada Lovelace", "started")
    text = emailer("participants", "import", "survey", str(csv_file))
    assert text == "0 added, 0 updated, 2 already there, 0 duplicate in file, 0 invalid (2 rows)\n"
    csv_file.write_text("ada@example.com,Ada Lovelace,started\nx\n")
    assert import_json(csv_file)[0]["refused"] == [
        {"line": 2, "reason": "expected the columns email,name[,status]; got 1 columns"}
    ]


def import_json(path: Path) -> tuple[Any, str]:
    """An import that leaves rows out: its one JSON report on stdout, and its error line."""
    out = StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("emailer", "participants", "import", "survey", str(path), "--json",
                     stdout=out)  # fmt: skip
    assert out.getvalue().count("\n") == 1
    message = str(caught.value)
    assert "\n" not in message
    return json.loads(out.getvalue()), message


def test_an_address_given_twice_in_a_file_is_imported_once_and_the_repeat_reported(
    tmp_path: Path,
) -> None:
    emailer("project", "add", "survey")
    csv_file = tmp_path / "people.csv"
    csv_file.write_text("email,name\nada@example.com,Ada\nADA@Example.com,Ada Again\n")
    report, error = import_json(csv_file)
    assert (report["rows"], report["added"], report["duplicates"], report["invalid"]) == (
        2, 1, 1, 0,
    )
    assert report["refused"] == [
        {
            "line": 3,
            "reason": "email: 'ada@example.com' repeats line 2 (addresses are compared in "
            "lower case); not imported",
        }
    ]
    assert error == "file: 1 of 2 rows not imported (1 duplicate in file, 0 invalid)"
    assert Participant.objects.get().name == "Ada"  # the first line wins


def test_a_header_names_the_columns_in_any_order(tmp_path: Path) -> None:
    emailer("project", "add", "survey")
    csv_file = tmp_path / "people.csv"
    csv_file.write_text("Name,Status,Email\nAda,started,ada@example.com\n")
    assert emailer_json("participants", "import", "survey", str(csv_file))["added"] == 1
    assert Participant.objects.values_list("email", "name", "status").get() == (
        "ada@example.com", "Ada", "started",
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("", "file: has no participant rows; expected the columns email,name[,status]"),
        ("\n\n", "file: has no participant rows"),
        ("email,name\n", "file: has no participant rows"),
        (
            "name,address\nAda,ada@example.com\n",
            "file: line 1 has no email column (name,address); expected the columns",
        ),
        ("email,name,phone\nada@example.com,Ada,123\n", "file: line 1 names unknown column"),
    ],
    ids=["empty", "blank lines", "header only", "no email column", "unknown column"],
)
def test_a_file_that_cannot_be_read_as_participants_is_refused_whole(
    tmp_path: Path, content: str, expected: str
) -> None:
    emailer("project", "add", "survey")
    csv_file = tmp_path / "people.csv"
    csv_file.write_text(content)
    assert error_of("participants", "import", "survey", str(csv_file)).startswith(expected)
    assert not Participant.objects.exists()


def test_unsubscribe_from_the_command_line() -> None:
    emailer("project", "add", "survey")
    Participant.objects.create(project=Project.objects.get(), email="ada@example.com")
    assert emailer_json("participants", "unsubscribe", "survey", "ADA@example.com")["changed"]
    assert "already unsubscribed" in emailer("participants", "unsubscribe", "survey",
                                             "ada@example.com")


def test_a_task_schedule_with_cron_time_zone_and_expiry() -> None:
    emailer("project", "add", "survey", "--state", "active")
    emailer("task", "add", "invite", "--project", "survey",
            "--subject", "Hi {{ participant.name }}", "--body", "B",
            "--statuses", "invited,started", "--batch-size", "10000",
            "--rate", "20", "--on-uncertain", "resend")
    task = SendEmailTask.objects.get()
    assert (task.statuses, task.batch_size, task.rate, task.on_uncertain) == (
        ["invited", "started"], 10000, 20.0, "resend",
    )
    job = emailer_json("task", "schedule", "invite", "--cron", "0 10-18/2 * * MON-FRI",
                       "--tz", "Europe/Berlin", "--expires", "3600")
    assert job["task"] == "invite" and "0 10-18/2 * * MON-FRI" in job["schedule"]
    preview = emailer_json("task", "preview", "invite")
    assert preview["subject"] == "Hi Someone" and preview["jobs"] == [job["name"]]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("project", "add", "survey"), "name: Project with this Name already exists."),
        (("project", "state", "nowhere", "active"), "name: no project named 'nowhere'"),
        (("participants", "import", "survey", "/no/such.csv"),
         "file: /no/such.csv is not a readable file"),
        (("participants", "unsubscribe", "survey", "x@example.com"),
         "email: no participant 'x@example.com' in project 'survey'"),
        (("task", "add", "t", "--project", "survey", "--subject", "{% if %}", "--body", "b"),
         "subject: template error:"),
        (("task", "add", "t", "--project", "survey", "--subject", "s", "--body", "b",
          "--statuses", "dead"), "statuses: ['dead'] is not a list of statuses"),
        (("task", "add", "t", "--project", "survey", "--subject", "s", "--body", "b",
          "--batch-size", "0"), "--batch-size: '0' is not a whole number from 1 to"),
        (("task", "schedule", "nothing", "--every", "PT1H"), "name: no task named 'nothing'"),
        (("task", "schedule", "invite", "--every", "PT0S"), "interval (--every): 'PT0S' is"),
        (("task", "schedule", "invite", "--at", "2030-01-01T09:00"), "at: '2030-01-01T09:00' has"),
        (("task", "schedule", "invite", "--every", "PT1H", "--expires", "0"),
         "--expires: '0' is not a whole number from 1 to"),
        (("deliveries", "--task", "nothing"), "task: no task named 'nothing'"),
        (("task", "add", "t", "--project", "survey", "--subject", "s", "--body", "b",
          "--from", "not an address"), "from_email (--from): 'not an address' is not an email"),
        (("task", "add", "t", "--project", "survey", "--subject", "s", "--body", "b",
          "--from", "a@example.com, b@example.com"), "from_email (--from): 'a@example.com, b@"),
        (("task", "add", "t", "--project", "survey", "--subject", "s", "--body", "b",
          "--rate", "nan"), "--rate: 'nan' is not a number from 0 to 100,000"),
        (("task", "add", "t", "--project", "survey", "--subject", "s", "--body", "b",
          "--rate", "inf"), "--rate: 'inf' is not a number from 0 to 100,000"),
        (("history", "--limit", "0"), "--limit: '0' is not a whole number from 1 to 100,000"),
        (("deliveries", "--task", "invite", "--limit", "-1"), "--limit: '-1' is not a whole"),
        (("project", "add", "other", "--state", "open"), "--state: invalid choice: 'open'"),
        (("task", "add", "t", "--project", "survey"), "--subject, --body: are required"),
        (("task", "launch"), "ACTION: invalid choice: 'launch'"),
    ],
)
def test_bad_input_ends_with_one_line_naming_the_field(
    args: tuple[str, ...], expected: str
) -> None:
    emailer("project", "add", "survey")
    emailer("task", "add", "invite", "--project", "survey", "--subject", "s", "--body", "b")
    assert error_of(*args).startswith(expected)
    assert SendEmailTask.objects.count() == Project.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_shell_sees_one_line_and_a_failing_exit_status_never_the_usage(
    tmp_path: Path,
) -> None:
    emailer("project", "add", "survey")
    people = tmp_path / "people.csv"
    people.write_text("email,name\nada@example.com,Ada\nADA@example.com,Ada\n")
    for argv, status, line in (
        (("project", "add", "p", "--state", "open"), 2,
         "manage.py emailer project add: error: --state: invalid choice: 'open' "
         "(choose from 'draft', 'active', 'closed')"),
        (("task", "add", "t", "--project", "survey"), 2,
         "manage.py emailer task add: error: --subject, --body: are required"),
        (("history", "--limit", "0"), 2,
         "manage.py emailer history: error: --limit: '0' is not a whole number from 1 to "
         "100,000"),
        (("task", "add", "t", "--project", "survey", "--subject", "s", "--body", "b", "--rate",
          "0.001"), 1, "CommandError: rate: 0.001 messages per second; give 0 (no limit) or "
         "from 0.01 (one message every 100 s) to 100,000"),
        (("participants", "import", "survey", str(people)), 1,
         "CommandError: file: 1 of 2 rows not imported (1 duplicate in file, 0 invalid)"),
    ):  # fmt: skip
        result = subprocess.run(
            [sys.executable, "manage.py", "emailer", *argv],
            cwd=ROOT,
            env=os.environ | {"DATABASE_URL": database_url()},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (result.returncode, result.stderr.strip()) == (status, line), argv
    assert SendEmailTask.objects.count() == 0
    assert Participant.objects.count() == 1


def test_a_sender_with_a_display_name_is_taken() -> None:
    emailer("project", "add", "survey")
    emailer("task", "add", "t", "--project", "survey", "--subject", "s", "--body", "b",
            "--from", "Survey Team <survey@example.org>")  # fmt: skip
    assert SendEmailTask.objects.get().from_email == "Survey Team <survey@example.org>"


def test_history_and_deliveries_say_when_there_is_nothing_yet() -> None:
    assert emailer("history") == "no runs yet\n"
    assert emailer_json("history") == []


JOBS_ADD = ("add", "same", "--task", "scheduling.diagnostics.noop")


def jobs_error(*args: str) -> str:
    with pytest.raises(CommandError) as caught:
        call_command("jobs", *JOBS_ADD, *args, stdout=StringIO())
    return str(caught.value)


@pytest.mark.parametrize(
    "timing",
    [
        ("--every", "PT1H", "--tz", "Europe/Berlin"),
        ("--at", "2030-01-01T09:00Z", "--tz", "Europe/Berlin"),
        ("--at", "2020-01-01T09:00Z"),
        ("--at", "2030-01-01T09:00"),
        ("--cron", "0 9 * * *", "--tz", ""),
        ("--every", "PT1H", "--end", "2020-01-01T00:00Z"),
        ("--every", "PT1H", "--start", "tomorrow"),
        ("--every", "PT0S"),
        ("--cron", "0 9 * * *", "--tz", "Mars/Base"),
    ],
    ids=" ".join,
)
def test_task_schedule_refuses_the_timing_jobs_add_refuses_in_the_same_words(
    timing: tuple[str, ...], admin_user: Any
) -> None:
    emailer("project", "add", "survey")
    emailer("task", "add", "invite", "--project", "survey", "--subject", "s", "--body", "b")
    expected = jobs_error(*timing)
    assert error_of("task", "schedule", "invite", *timing) == expected
    assert not jobs_for_row(SendEmailTask.objects.get())


def test_task_schedule_takes_a_past_at_with_allow_past_as_jobs_add_does() -> None:
    emailer("project", "add", "survey")
    emailer("task", "add", "invite", "--project", "survey", "--subject", "s", "--body", "b")
    job = emailer_json("task", "schedule", "invite", "--at", "2020-01-01T09:00Z", "--allow-past")
    assert job["next_due_at"].startswith("2020-01-01 09:00")
