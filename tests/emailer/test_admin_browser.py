"""The emailer's admin in a real browser (Debian's chromium driven by Playwright).

A template typo is shown beside its field when the task is saved, not found by the 3 a.m. run;
the saved task shows its message rendered for a participant.
"""

from __future__ import annotations

from typing import Any

import pytest

from emailer.models import SendEmailTask

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_template_error_is_shown_beside_its_field_and_the_saved_task_is_previewed(
    page: Any,
    make_project: Any,
) -> None:
    project = make_project("spring-survey", participants=2)
    page.goto(f"{page.base}/admin/emailer/sendemailtask/add/")
    page.select_option("#id_project", str(project.pk))
    page.fill("#id_name", "spring-invite")
    page.fill("#id_subject", "{{ participant.name }}, five minutes?")
    page.fill("#id_body", "Hello {% if participant.name %}{{ participant.name }}")
    page.check("input[name=statuses][value=invited]")
    page.click("input[name=_continue]")

    error = page.locator(".field-body .errorlist")
    assert "template error: Unclosed tag on line 1: 'if'" in error.inner_text()
    assert page.locator(".field-subject .errorlist").count() == 0
    assert not SendEmailTask.objects.exists()

    page.fill("#id_body", "Hello {{ participant.name }},\nplease answer.")
    page.click("input[name=_continue]")
    preview = page.locator(".field-preview .readonly")
    preview.wait_for()
    assert "Person 0, five minutes?" in preview.inner_text()
    assert "Hello Person 0," in preview.inner_text()
    assert SendEmailTask.objects.get().statuses == ["invited"]
