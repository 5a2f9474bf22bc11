"""Escaping, both ways: user text is escaped on every emailer admin page, and mail is not.

A task body or a participant's name holding a script is shown as text in the admin (the HTML
part only inside a sandboxed frame, as a document of its own under a policy that runs no
script and fetches nothing). The subject and the
text body are plain text and go out verbatim; only the HTML part escapes what it interpolates.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from emailer.models import Participant, SendEmailTask
from emailer.sending import run_send_email_task
from tests.emailer.test_runs import context

pytestmark = [pytest.mark.django_db]

SCRIPT = "<script>alert(1)</script>"
ATTRIBUTE = '"><img src=x onerror=alert(1)>'
PAYLOADS = (SCRIPT, ATTRIBUTE)
NAME = "Seán O'Brien & Co"


def assert_shown_escaped(html: str, *payloads: str) -> None:
    for payload in payloads:
        assert payload not in html, f"{payload!r} reached the page unescaped"
        assert escape(payload) in html, f"{payload!r} is not shown at all"


def page(client: Client, name: str, *args: Any) -> str:
    response = client.get(reverse(name, args=args))
    assert response.status_code == 200, name
    return response.content.decode()


@pytest.fixture
def hostile_task(make_project: Any, make_task: Any) -> SendEmailTask:
    """A project, a participant and a task whose every typed field carries a payload."""
    project = make_project(name=SCRIPT)
    Participant.objects.create(project=project, email="eve@example.com", name=ATTRIBUTE)
    return make_task(
        project,
        name=SCRIPT,
        note=ATTRIBUTE,
        subject=SCRIPT + " {{ participant.name }}",
        body=SCRIPT + "\nDear {{ participant.name }}",
        html_body="<p>{{ participant.name }}</p>" + SCRIPT,
    )


def test_typed_fields_are_shown_escaped_on_every_emailer_admin_page(
    admin_client: Client, hostile_task: SendEmailTask, smtp_settings: Any
) -> None:
    smtp_settings.recorder.refuse["eve@example.com"] = f"550 5.1.1 {SCRIPT}"
    run_send_email_task(hostile_task, context())  # a history row and a failed delivery
    project = hostile_task.project

    assert_shown_escaped(page(admin_client, "admin:emailer_project_changelist"), SCRIPT)
    assert_shown_escaped(page(admin_client, "admin:emailer_project_change", project.pk), *PAYLOADS)
    assert_shown_escaped(page(admin_client, "admin:emailer_project_import", project.pk), SCRIPT)
    assert_shown_escaped(page(admin_client, "admin:emailer_participant_changelist"), *PAYLOADS)
    assert_shown_escaped(page(admin_client, "admin:emailer_sendemailtask_changelist"), SCRIPT)
    assert_shown_escaped(page(admin_client, "admin:emailer_sendemailhistory_changelist"), SCRIPT)
    assert_shown_escaped(page(admin_client, "admin:emailer_delivery_changelist"), SCRIPT)


def test_the_preview_shows_text_parts_as_text_and_the_html_part_only_in_a_sandbox(
    admin_client: Client, hostile_task: SendEmailTask
) -> None:
    html = page(admin_client, "admin:emailer_sendemailtask_change", hostile_task.pk)
    assert_shown_escaped(html, *PAYLOADS)
    assert f"<strong>Subject:</strong> {escape(SCRIPT)} {escape(ATTRIBUTE)}</p>" in html
    assert f">{escape(SCRIPT)}\nDear {escape(ATTRIBUTE)}</pre>" in html
    # The HTML part is not on the page: a sandboxed frame loads it as a document of its own,
    # where the interpolation is escaped by its template and the policy runs no script.
    assert SCRIPT not in html and "<p>" + escape(ATTRIBUTE) not in html
    url = reverse("admin:emailer_sendemailtask_preview", args=[hostile_task.pk])
    assert f'<iframe class="emailer-html-preview" sandbox src="{url}"' in html
    framed = admin_client.get(url)
    assert framed.content.decode() == f"<p>{escape(ATTRIBUTE)}</p>{SCRIPT}"
    assert "script-src" not in framed["Content-Security-Policy"]
    assert framed["Content-Security-Policy"].startswith("default-src 'none';")


def test_subject_and_text_body_go_out_verbatim_and_the_html_part_escaped(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    project = make_project(name=NAME)
    Participant.objects.create(project=project, email="sean@example.com", name=NAME)
    task = make_task(
        project,
        subject="For {{ participant.name }} & {{ project.name }}",
        body="Dear {{ participant.name }},\n<{{ project.name }}> says hello.",
        html_body="<p>Dear {{ participant.name }}</p>",
    )
    assert run_send_email_task(task, context())["sent"] == 1

    (received,) = smtp_settings.recorder.received
    message = received.message
    # .strip(): Python folds a long encoded subject onto a continuation line.
    assert message["Subject"].strip() == f"For {NAME} & {NAME}"
    assert message.get_body(("plain",)).get_content().splitlines() == [
        f"Dear {NAME},",
        f"<{NAME}> says hello.",
    ]
    assert message.get_body(("html",)).get_content().strip() == (
        "<p>Dear Seán O&#x27;Brien &amp; Co</p>"
    )


def test_the_preview_escapes_a_plain_name_once(
    admin_client: Client, make_project: Any, make_task: Any
) -> None:
    project = make_project()
    Participant.objects.create(project=project, email="sean@example.com", name=NAME)
    task = make_task(
        project, subject="For {{ participant.name }}", body="Dear {{ participant.name }}"
    )
    html = page(admin_client, "admin:emailer_sendemailtask_change", task.pk)
    assert f"<strong>Subject:</strong> For {escape(NAME)}</p>" in html
    assert "&amp;amp;" not in html and "&amp;#x27;" not in html
