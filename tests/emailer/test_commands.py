"""``manage.py emailer``: each action's result, its ``--json`` form and one-line errors."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from emailer.models import Participant, Project, SendEmailTask
from scheduling.api import jobs_for_row

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
    first = emailer_json("participants", "import", "survey", str(csv_file))
    assert (first["added"], first["updated"]) == (2, 0)
    assert first["refused"] == [
        {"line": 3, "reason": "email: 'not-an-address' is not an email address"},
        {"line": 4, "reason": "status: 'retired' is not one of invited, started, completed"},
        {"line": 6, "reason": "expected the columns email,name[,status]; got 1 columns"},
    ]
    csv_file.write_text("ada@example.com,Ada Lovelace,started\nalan@example.com,Alan\n")
    again = emailer_json("participants", "import", "survey", str(csv_file))
    assert (again["added"], again["updated"], again["unchanged"]) == (0, 1, 1)
    ada = Participant.objects.get(email="ada@example.com")
    assert (ada.name, ada.status) == ("Ada Lovelace", "started")
    text = emailer("participants", "import", "survey", str(csv_file))
    assert text.startswith("0 added, 0 updated, 2 unchanged, 0 refused")


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
          "--batch-size", "0"), "batch_size (--batch-size): Ensure this value is greater"),
        (("task", "schedule", "nothing", "--every", "PT1H"), "name: no task named 'nothing'"),
        (("task", "schedule", "invite", "--every", "PT0S"), "interval (--every): 'PT0S' is"),
        (("task", "schedule", "invite", "--at", "2030-01-01T09:00"), "at: '2030-01-01T09:00' has"),
        (("task", "schedule", "invite", "--every", "PT1H", "--expires", "0"),
         "expires: must be at least 1 second"),
        (("deliveries", "--task", "nothing"), "task: no task named 'nothing'"),
    ],
)
def test_bad_input_ends_with_one_line_naming_the_field(
    args: tuple[str, ...], expected: str
) -> None:
    emailer("project", "add", "survey")
    emailer("task", "add", "invite", "--project", "survey", "--subject", "s", "--body", "b")
    assert error_of(*args).startswith(expected)


def test_history_and_deliveries_say_when_there_is_nothing_yet() -> None:
    assert emailer("history") == "no runs yet\n"
    assert emailer_json("history") == []
