"""The emailer's admin pages (Django's test client; the engine's browser tests drive chromium).

A broken template is refused beside its field when the task is saved; a task shows its
message rendered for a participant; a CSV import reports refused rows by line number.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from emailer.models import Participant, SendEmailHistory, SendEmailTask

pytestmark = [pytest.mark.django_db]


def task_form(project: Any, **overrides: Any) -> dict[str, Any]:
    data = {
        "project": project.pk,
        "name": "invite",
        "from_email": "",
        "note": "",
        "subject": "Hello {{ participant.name }}",
        "body": "Body",
        "html_body": "",
        "statuses": ["invited"],
        "requires_state": "active",
        "batch_size": "10000",
        "rate": "0",
        "once_per_participant": "on",
        "on_uncertain": "skip",
    }
    data.update(overrides)
    return data


def test_a_broken_template_is_refused_beside_its_field_when_saving(
    admin_client: Any, make_project: Any
) -> None:
    project = make_project()
    response = admin_client.post(
        reverse("admin:emailer_sendemailtask_add"),
        task_form(project, body="Dear {{ participant.name|nosuchfilter }}"),
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["body"]
    assert "template error: Invalid filter: 'nosuchfilter'" in errors["body"][0]
    assert not SendEmailTask.objects.exists()

    admin_client.post(reverse("admin:emailer_sendemailtask_add"), task_form(project))
    assert SendEmailTask.objects.get().statuses == ["invited"]


def test_the_task_page_previews_the_message_for_its_first_due_participant(
    admin_client: Any, make_project: Any, make_task: Any
) -> None:
    task = make_task(make_project(participants=2), html_body="<b>Hi {{ participant.name }}</b>")
    page = admin_client.get(reverse("admin:emailer_sendemailtask_change", args=[task.pk]))
    html = page.content.decode()
    assert "Your survey, Person 0" in html
    preview = reverse("admin:emailer_sendemailtask_preview", args=[task.pk])
    assert f'sandbox src="{preview}"' in html  # the HTML part, in a sandboxed frame
    assert admin_client.get(preview).content.decode() == "<b>Hi Person 0</b>"
    assert "none yet" in html  # no job runs it yet


def test_csv_import_reports_added_rows_and_refused_rows_by_line_number(
    admin_client: Any, make_project: Any
) -> None:
    project = make_project()
    upload = SimpleUploadedFile(
        "people.csv", b"email,name\nada@example.com,Ada\nbroken,Bob\ngrace@example.com,Grace\n"
    )
    response = admin_client.post(
        reverse("admin:emailer_project_import", args=[project.pk]), {"file": upload}
    )
    said = [str(m) for m in get_messages(response.wsgi_request)]
    assert said == [
        "2 added, 0 updated, 0 unchanged, 1 refused",
        "line 3: email: 'broken' is not an email address",
    ]
    assert Participant.objects.filter(project=project).count() == 2
    page = admin_client.get(reverse("admin:emailer_project_change", args=[project.pk]))
    assert "grace@example.com" in page.content.decode()  # small projects list them inline


def test_history_is_read_only_and_refreshes_while_a_run_is_live(
    admin_client: Any, make_project: Any, make_task: Any
) -> None:
    from django.utils import timezone

    task = make_task(make_project())
    now = timezone.now()
    SendEmailHistory.objects.create(
        task=task, execution_id=1, scheduled_batch_start_time=now, started_at=now,
        updated_at=now, sent=120,
    )
    page = admin_client.get(reverse("admin:emailer_sendemailhistory_changelist"))
    html = page.content.decode()
    assert 'http-equiv="refresh"' in html and ">120 sent<" in html
    assert admin_client.get(reverse("admin:emailer_sendemailhistory_add")).status_code == 403


def test_an_import_page_for_an_id_that_is_not_a_project_is_not_found(
    admin_client: Any, make_project: Any
) -> None:
    project = make_project()
    for bad in ("abc", "0", str(project.pk + 1000)):
        url = reverse("admin:emailer_project_import", args=[bad])
        assert admin_client.get(url).status_code == 404, bad
        assert admin_client.post(url, {}).status_code == 404, bad


def test_a_sender_that_is_not_an_address_is_refused_beside_its_field(
    admin_client: Any, make_project: Any
) -> None:
    response = admin_client.post(
        reverse("admin:emailer_sendemailtask_add"),
        task_form(make_project(), from_email="not an address"),
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["from_email"]
    assert "'not an address' is not an email address" in errors["from_email"][0]
    assert not SendEmailTask.objects.exists()


def test_an_import_accounts_for_a_repeated_address_and_an_empty_file_is_refused(
    admin_client: Any, make_project: Any
) -> None:
    project = make_project()
    url = reverse("admin:emailer_project_import", args=[project.pk])
    upload = SimpleUploadedFile("people.csv", b"ada@example.com,Ada\nAda@Example.com,Ada\n")
    said = [str(m) for m in get_messages(admin_client.post(url, {"file": upload}).wsgi_request)]
    assert said[0] == "1 added, 0 updated, 0 unchanged, 1 refused"
    assert said[1].startswith("line 2: email: 'ada@example.com' repeats line 1")

    response = admin_client.post(url, {"file": SimpleUploadedFile("empty.csv", b"\n")})
    assert response.status_code == 200
    assert "has no participant rows" in response.context["form"].errors["file"][0]
    assert Participant.objects.count() == 1
