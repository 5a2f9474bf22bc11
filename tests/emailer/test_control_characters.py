"""Names, addresses, subjects and notes hold no control characters; bodies may hold tabs and
line breaks, nothing else. The admin, the command line and the CSV import refuse alike, naming
the field and the character; reasons the emailer records from someone else's words (an SMTP
server's reply) are kept as one line."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from emailer import services
from emailer.models import Delivery, Participant, Project, SendEmailTask
from emailer.sending import run_send_email_task
from tests.emailer.test_admin import task_form
from tests.emailer.test_runs import context

pytestmark = [pytest.mark.django_db]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("spring\nsurvey", "must be one line: it holds a line break at character 7"),
        ("spring\tsurvey", "holds a tab at character 7"),
        ("spring\x00survey", "holds a NUL byte at character 7"),
        ("spring\x1bsurvey", "holds the control character U+001B at character 7"),
        ("spring\u2028survey", "must be one line: it holds a line separator (U+2028)"),
        ("spring\x85survey", "holds the control character U+0085"),
    ],
)
def test_a_project_name_with_a_control_character_is_refused(value: str, reason: str) -> None:
    with pytest.raises(ValidationError) as refused:
        services.add_project(name=value)
    assert reason in refused.value.message_dict["name"][0]
    assert not Project.objects.exists()


def test_the_admin_refuses_a_control_character_beside_its_field(
    admin_client: Client, make_project: Any
) -> None:
    response = admin_client.post(
        reverse("admin:emailer_project_add"), {"name": "a\x07b", "state": "draft"}
    )
    assert response.status_code == 200
    assert "holds the control character U+0007" in response.context["adminform"].form.errors[
        "name"
    ][0]

    project = make_project()
    response = admin_client.post(
        reverse("admin:emailer_participant_add"),
        {"project": project.pk, "email": "a@example.com", "name": "A\x0bL", "status": "invited"},
    )
    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == ["name"]
    assert not Participant.objects.exists()


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("subject", "Hello\x1b[31m", "holds the control character U+001B"),
        ("note", "line one\u2029line two", "must be one line"),
        ("body", "Dear\x0cyou", "holds the control character U+000C"),
        ("html_body", "<p>\x08</p>", "holds the control character U+0008"),
    ],
)
def test_a_task_field_with_a_control_character_is_refused_beside_it(
    admin_client: Client, make_project: Any, field: str, value: str, reason: str
) -> None:
    response = admin_client.post(
        reverse("admin:emailer_sendemailtask_add"), task_form(make_project(), **{field: value})
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field] and reason in errors[field][0]
    assert not SendEmailTask.objects.exists()


def test_a_body_may_hold_tabs_and_line_breaks_and_no_nul(
    make_project: Any, make_task: Any
) -> None:
    project = make_project()
    task = make_task(project, body="Dear you,\r\n\tplease answer.\n", html_body="<p>\t</p>")
    assert task.pk
    with pytest.raises(ValidationError) as refused:
        services.add_task(project=project, name="nul", subject="S", body="a\x00b")
    assert refused.value.message_dict == {
        "body": ["holds a NUL byte at character 2; only printable text is taken"]
    }


def test_a_subject_with_a_line_break_is_refused_on_the_command_line(make_project: Any) -> None:
    make_project("survey")
    with pytest.raises(CommandError) as refused:
        call_command(
            "emailer", "task", "add", "invite", "--project", "survey",
            "--subject", "Hello\nBcc: everyone@example.com", "--body", "B", stdout=StringIO(),
        )
    assert str(refused.value) == (
        "subject: must be one line: it holds a line break at character 6"
    )


def test_csv_rows_with_control_characters_are_refused_by_line(
    tmp_path: Path, make_project: Any
) -> None:
    project = make_project("survey")
    people = tmp_path / "people.csv"
    people.write_bytes(
        b"email,name\n"
        b"ada@example.com,Ada\x00Lovelace\n"
        b"alan@example.com,Alan\x1bTuring\n"
        b'"grace@example.com\x01",Grace\n'
        b"barbara@example.com,Barbara\tLiskov\n"
        b"edsger@example.com,Edsger\n"
    )
    report = services.import_participants_file(project=project, data=people.read_bytes())
    assert report.added == 1
    assert report.refused == [
        (2, "name: holds a NUL byte at character 4; only printable text is taken"),
        (3, "name: holds the control character U+001B at character 5; only printable text is "
            "taken"),
        (4, "email: holds the control character U+0001 at character 18; only printable text is "
            "taken"),
        (5, "name: holds a tab at character 8; only printable text is taken"),
    ]
    assert list(Participant.objects.values_list("email", flat=True)) == ["edsger@example.com"]


def test_an_smtp_servers_reply_over_several_lines_is_kept_as_one(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    project = make_project()
    Participant.objects.create(project=project, email="eve@example.com", name="Eve")
    smtp_settings.recorder.refuse["eve@example.com"] = (
        "550-5.1.1 The account does not exist.\r\n550 5.1.1 Please\x07 check it."
    )
    run_send_email_task(make_task(project), context())
    (delivery,) = Delivery.objects.all()
    assert delivery.state == "failed"
    assert delivery.reply == "550 5.1.1 The account does not exist. 5.1.1 Please check it."
