"""A template cannot hold a web process or a worker.

Mail templates are written in a short list of Django's tags and filters, with loops nested at
most two deep; every render (a run's message, the admin's preview, the check on save) stops at
a budget of characters produced, times round loops and seconds. The check made on save renders
with the longest values a participant may have, not the twelve-character sample, and a run
makes it again, so a row written behind the admin's back fails its run at once with the
reason, before anyone is claimed.
"""

from __future__ import annotations

import time
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from emailer.models import (
    Delivery,
    Participant,
    SendEmailHistory,
    SendEmailTask,
    template_samples,
)
from emailer.rendering import SAMPLE_CONTEXT, template_errors
from emailer.sending import run_send_email_task
from scheduling.api import PermanentError
from tests.emailer.test_admin import task_form
from tests.emailer.test_runs import context

pytestmark = [pytest.mark.django_db]

NAME_LOOP = "{% for a in participant.name %}"


def loops(depth: int, body: str = ".") -> str:
    return NAME_LOOP * depth + body + "{% endfor %}" * depth


def body_error(admin_client: Client, project: Any, **fields: str) -> str:
    response = admin_client.post(
        reverse("admin:emailer_sendemailtask_add"), task_form(project, **fields)
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    (field,) = errors
    return f"{field}: {errors[field][0]}"


def test_three_nested_loops_over_a_name_are_refused_beside_the_body_at_once(
    admin_client: Client, make_project: Any
) -> None:
    started = time.monotonic()
    said = body_error(admin_client, make_project(), body=loops(3))
    assert said == (
        "body: template error: line 1: {% for %} loops nested 3 deep; at most 2 "
        "(EMAILER_TEMPLATE_MAX_LOOP_DEPTH)"
    )
    assert time.monotonic() - started < 2
    assert not SendEmailTask.objects.exists()


def test_the_save_check_renders_with_the_longest_name_not_the_twelve_character_sample(
    admin_client: Client, make_project: Any
) -> None:
    two_deep = loops(2)  # 144 rounds for "Ada Lovelace", 40,000 for a 200-character name
    assert template_errors(subject="s", body=two_deep, html_body="") == {}  # the sample alone
    said = body_error(admin_client, make_project(), body=two_deep)
    assert said == (
        "body: template too costly to render (checked with the longest name, address and "
        "project name allowed): stopped after 10,000 times round its loops "
        "(EMAILER_RENDER_MAX_LOOPS)"
    )


def test_a_branch_for_one_status_is_checked_with_that_status(
    admin_client: Client, make_project: Any
) -> None:
    heavy = '{% if participant.status == "completed" %}' + loops(2) + "{% endif %}"
    assert "EMAILER_RENDER_MAX_LOOPS" in body_error(admin_client, make_project(), body=heavy)


@pytest.mark.parametrize(
    ("template", "refusal"),
    [
        ("{% load static %}", "the tag {% load %} is not available in mail templates"),
        ('{% include "admin/base.html" %}', "the tag {% include %} is not available"),
        ('{% extends "admin/base.html" %}', "the tag {% extends %} is not available"),
        ("{% debug %}", "the tag {% debug %} is not available"),
        ("{% lorem 999999 w %}", "the tag {% lorem %} is not available"),
        ('{% url "admin:index" %}', "the tag {% url %} is not available"),
        ("{% autoescape off %}x{% endautoescape %}", "the tag {% autoescape %} is not available"),
        ("{% widthratio 1 1 99999999 %}", "the tag {% widthratio %} is not available"),
        ("{{ participant.name|center:999999999 }}", "Invalid filter: 'center'"),
        ("{{ participant.name|ljust:999999999 }}", "Invalid filter: 'ljust'"),
        ('{{ participant.name|stringformat:"999999999s" }}', "Invalid filter: 'stringformat'"),
        ("{{ 1|floatformat:999999999 }}", "Invalid filter: 'floatformat'"),
        ("{{ participant.name|join:participant.email }}", "Invalid filter: 'join'"),
        ("{{ participant.name|safe }}", "Invalid filter: 'safe'"),
        ("{{ participant.name|urlize }}", "Invalid filter: 'urlize'"),
    ],
)
def test_a_template_may_use_only_the_tags_and_filters_a_mail_needs(
    template: str, refusal: str
) -> None:
    errors = template_errors(subject="s", body=template, html_body="")
    assert refusal in errors["body"]


def test_the_tags_and_filters_a_mail_needs_still_work(make_project: Any, make_task: Any) -> None:
    body = (
        "{# a note #}{% comment %}{% load anything %}{% endcomment %}"
        "Dear {{ participant.name|title|default:'friend' }},\n"
        "{% if participant.status == 'invited' %}you are invited{% else %}thanks{% endif %}\n"
        "{% with first=participant.name|first %}{{ first|upper }}{% endwith %}"
        "{% for letter in participant.name|slice:':3' %}{% cycle 'a' 'b' %}{{ letter }}"
        "{% endfor %}\n{{ participant.name|truncatewords:1 }} "
        "{{ participant.email|urlencode }} {% now 'Y' as year %}{{ year|length }}"
    )
    task = make_task(make_project(participants=1), body=body)
    assert task.pk


def test_tags_nested_too_deep_and_a_template_too_long_are_refused(settings: Any) -> None:
    deep = "{% if 1 %}" * 21 + "x" + "{% endif %}" * 21
    assert template_errors(subject="s", body=deep, html_body="")["body"] == (
        "template error: line 1: tags nested more than 20 deep"
    )
    nots = "{% if " + "not " * 5000 + "1 %}x{% endif %}"
    assert template_errors(subject="s", body=nots, html_body="")["body"] == (
        "template error: nested too deeply to be read"
    )
    settings.EMAILER_TEMPLATE_MAX_LENGTH = 1000
    assert template_errors(subject="s", body="x" * 1001, html_body="")["body"] == (
        "template error: 1,001 characters; at most 1,000 (EMAILER_TEMPLATE_MAX_LENGTH)"
    )


def test_a_value_doubled_without_any_loop_stops_at_the_character_budget() -> None:
    doubling = (
        "{% with v1=participant.name|add:participant.name %}"
        + "".join(f"{{% with v{i + 1}=v{i}|add:v{i} %}}" for i in range(1, 19))
        + "{{ v19|length }}"
        + "{% endwith %}" * 19
    )  # 200 characters times 2**19: 100 million, were it computed
    started = time.monotonic()
    errors = template_errors(subject="s", body=doubling, html_body="")
    assert "stopped at 1,000,000 characters produced (EMAILER_RENDER_MAX_CHARS)" in (
        errors["body"]
    )
    assert time.monotonic() - started < 2


def test_a_render_stops_at_its_time_budget(settings: Any) -> None:
    settings.EMAILER_RENDER_MAX_LOOPS = 1_000_000
    settings.EMAILER_RENDER_TIMEOUT = 0.01
    busy = loops(2, "{% if a == participant.email %}{% endif %}")  # 40,000 quiet rounds
    errors = template_errors(subject="s", body=busy, html_body="", samples=template_samples())
    assert errors["body"].endswith("stopped after 0.01 s (EMAILER_RENDER_TIMEOUT)")


def test_a_template_written_behind_the_admins_back_fails_its_run_at_once_with_the_reason(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    task = make_task(make_project(participants=20))
    SendEmailTask.objects.filter(pk=task.pk).update(body=loops(3))
    task.refresh_from_db()

    started = time.monotonic()
    with pytest.raises(PermanentError) as failed:
        run_send_email_task(task, context())
    assert time.monotonic() - started < 5
    assert str(failed.value) == (
        "body: template error: line 1: {% for %} loops nested 3 deep; at most 2 "
        "(EMAILER_TEMPLATE_MAX_LOOP_DEPTH)"
    )
    history = SendEmailHistory.objects.get(task=task)
    assert (history.status, history.note) == ("interrupted", str(failed.value))
    assert not Delivery.objects.exists(), "nobody was claimed: all are due once it is fixed"
    assert smtp_settings.recorder.count == 0


def test_a_branch_only_one_participants_values_take_fails_that_message_alone(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    project = make_project(participants=3)
    mallory = Participant.objects.create(
        project=project, email=("m" * 150) + "@example.com", name="Mallory"
    )
    body = (
        'Hello {% if participant.name == "Mallory" %}'
        "{% for a in participant.email %}{% for b in participant.email %}.{% endfor %}"
        "{% endfor %}{% endif %}{{ participant.name }}"
    )
    task = make_task(project, body=body)  # the longest sample's name is not "Mallory"

    result = run_send_email_task(task, context())
    assert (result["sent"], result["failed"]) == (3, 1)
    refused = Delivery.objects.get(participant=mallory)
    assert refused.state == "failed"
    assert refused.reply == (
        "render error: body: stopped after 10,000 times round its loops "
        "(EMAILER_RENDER_MAX_LOOPS)"
    )


def test_the_preview_renders_the_same_bounded_way_in_the_admin_and_on_the_command_line(
    admin_client: Client, make_project: Any, make_task: Any
) -> None:
    task = make_task(make_project(participants=1))
    SendEmailTask.objects.filter(pk=task.pk).update(body=loops(2), html_body=loops(3))

    started = time.monotonic()
    page = admin_client.get(reverse("admin:emailer_sendemailtask_change", args=[task.pk]))
    assert page.status_code == 200 and time.monotonic() - started < 5
    html = page.content.decode()
    assert '<span class="errornote">body: template too costly to render' in html
    assert "html_body: template error: line 1: {% for %} loops nested 3 deep" in html

    with pytest.raises(CommandError) as refused:
        call_command("emailer", "task", "preview", task.name, stdout=StringIO())
    assert str(refused.value).startswith("body: template too costly to render")
    assert "html_body (--html): template error: line 1: {% for %} loops nested 3 deep" in str(
        refused.value
    )


def test_a_template_cannot_change_the_values_it_is_given() -> None:
    assert template_errors(subject="{{ participant.clear }}{{ participant.name }}", body="b",
                           html_body="") == {}
    assert SAMPLE_CONTEXT["participant"]["name"] == "Ada Lovelace"
