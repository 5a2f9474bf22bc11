"""Every out-of-range number, size, date or lookup on the emailer's admin pages and command line
gets a form error or one line naming the field, never a 500 or a traceback.

The rules live in the models and services, so the admin and ``manage.py emailer`` refuse the
same values with the same words.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from emailer.models import Participant, Project, SendEmailTask
from tests.emailer.test_admin import task_form

pytestmark = [pytest.mark.django_db]

HUGE = "99999999999999999999"

TASK_FIELDS = [
    ("batch_size", "0", "greater than or equal to 1"),
    ("batch_size", "-1", "greater than or equal to 0"),
    ("batch_size", "2147483648", "less than or equal to 2147483647"),
    ("batch_size", HUGE, "less than or equal to 2147483647"),
    ("batch_size", "abc", "Enter a whole number."),
    ("rate", "-1", "greater than or equal to 0"),
    ("rate", "nan", "Enter a number."),
    ("rate", "inf", "Enter a number."),
    ("rate", "1e309", "Enter a number."),
    ("rate", "1e-300", "1e-300 messages per second; give 0 (no limit) or from 0.01"),
    ("rate", "1e300", "1e+300 messages per second; give 0 (no limit) or from 0.01"),
    ("name", "n" * 201, "at most 200 characters"),
    ("subject", "s" * 999, "at most 998 characters"),
    ("body", "b" * 100_001, "100,001 characters; at most 100,000 (EMAILER_TEMPLATE_MAX_LENGTH)"),
    ("html_body", "h" * 100_001, "100,001 characters; at most 100,000"),
    ("note", "n" * 501, "at most 500 characters"),
    ("from_email", "a" * 250 + "@x.org", "at most 254 characters"),
    ("statuses", "bogus", "Select a valid choice."),
    ("requires_state", "bogus", "Select a valid choice."),
    ("on_uncertain", "bogus", "Select a valid choice."),
]


@pytest.mark.parametrize(("field", "value", "reason"), TASK_FIELDS)
def test_the_task_form_refuses_each_out_of_range_value_beside_its_field(
    admin_client: Client, make_project: Any, field: str, value: str, reason: str
) -> None:
    response = admin_client.post(
        reverse("admin:emailer_sendemailtask_add"), task_form(make_project(), **{field: value})
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field], errors.as_json()  # and no other field: say which did
    assert reason in errors[field][0]
    assert not SendEmailTask.objects.exists()


@pytest.mark.parametrize("project", [HUGE, "abc", "-1"])
def test_the_task_form_refuses_a_project_that_is_not_one(
    admin_client: Client, make_project: Any, project: str
) -> None:
    form = {**task_form(make_project()), "project": project}
    response = admin_client.post(reverse("admin:emailer_sendemailtask_add"), form)
    assert list(response.context["adminform"].form.errors) == ["project"]


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"email": "x" * 250 + "@example.com"}, "email"),
        ({"email": "not an address"}, "email"),
        ({"name": "n" * 201}, "name"),
        ({"status": "retired"}, "status"),
        ({"project": HUGE}, "project"),
    ],
)
def test_the_participant_form_refuses_each_bad_value_beside_its_field(
    admin_client: Client, make_project: Any, values: dict[str, str], field: str
) -> None:
    form = {"project": make_project().pk, "email": "a@example.com", "name": "A",
            "status": "invited", **values}
    response = admin_client.post(reverse("admin:emailer_participant_add"), form)
    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == [field]
    assert not Participant.objects.exists()


def test_the_project_form_refuses_a_long_name_and_an_unknown_state(admin_client: Client) -> None:
    url = reverse("admin:emailer_project_add")
    for form, field in (({"name": "p" * 201, "state": "draft"}, "name"),
                        ({"name": "p", "state": "paused"}, "state")):
        response = admin_client.post(url, form)
        assert list(response.context["adminform"].form.errors) == [field]
    assert not Project.objects.exists()


@pytest.mark.parametrize(
    "query",
    [
        "sendemailhistory/?scheduled_batch_start_time__year=abc",
        "sendemailhistory/?scheduled_batch_start_time__year=99999",
        "sendemailhistory/?scheduled_batch_start_time__year=0",
        "sendemailhistory/?scheduled_batch_start_time__year=2030&scheduled_batch_start_time__month=13",
        "sendemailhistory/?scheduled_batch_start_time__year=2030&scheduled_batch_start_time__month=2"
        "&scheduled_batch_start_time__day=31",
        "sendemailhistory/?status__exact=nonsense",
        f"sendemailhistory/?task__id__exact={HUGE}",
        "sendemailhistory/?task__id__exact=abc",
        "sendemailhistory/?o=99",
        f"sendemailhistory/?p={HUGE}",
        "delivery/?q=%00",
        "delivery/?q=" + "a" * 10_000,
        "delivery/?state__exact=x&task__id__exact=abc",
        "participant/?q=a%00b",
        "participant/?unsubscribed_at__isempty=maybe",
        "project/?q=%00",
        "sendemailtask/?project__id__exact=abc",
        "sendemailtask/abc/change/",
        f"sendemailtask/{HUGE}/change/",
        f"delivery/{HUGE}/change/",
        "sendemailhistory/abc/change/",
        f"project/{HUGE}/import/",
        "project/%00/import/",
    ],
)
def test_a_lookup_out_of_range_in_an_admin_url_is_answered_without_a_500(
    admin_client: Client, query: str
) -> None:
    response = admin_client.get(f"/admin/emailer/{query}")
    assert response.status_code in (200, 302, 404), response.status_code


def emailer(*args: str) -> str:
    with pytest.raises(CommandError) as refused:
        call_command("emailer", *args, stdout=StringIO())
    message = str(refused.value)
    assert "\n" not in message
    return message


ADD = ("task", "add", "second", "--project", "survey", "--subject", "S", "--body", "B")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((*ADD, "--batch-size", HUGE), f"--batch-size: '{HUGE}' is not a whole number from 1 to "
         "2,147,483,647"),
        ((*ADD, "--batch-size", "0"), "--batch-size: '0' is not a whole number from 1 to "
         "2,147,483,647"),
        ((*ADD, "--rate", "nan"), "--rate: 'nan' is not a number from 0 to 100,000"),
        ((*ADD, "--rate", "1e-300"), "rate: 1e-300 messages per second; give 0 (no limit) or "
         "from 0.01 (one message every 100 s) to 100,000"),
        ((*ADD, "--rate", "abc"), "--rate: 'abc' is not a number from 0 to 100,000"),
        ((*ADD, "--body", "B" * 100_001), "body: template error: 100,001 characters; at most "
         "100,000 (EMAILER_TEMPLATE_MAX_LENGTH)"),
        (("task", "schedule", "invite", "--every", "PT1H", "--expires", HUGE),
         f"--expires: '{HUGE}' is not a whole number from 1 to 2,147,483,647"),
        (("task", "schedule", "invite", "--every", "PT1H", "--expires", "0"),
         "--expires: '0' is not a whole number from 1 to 2,147,483,647"),
        (("task", "schedule", "invite", "--at", "99999-01-01T00:00Z"),
         "at: '99999-01-01T00:00Z' is not an ISO-8601 date-time"),
        (("task", "schedule", "invite", "--at", "2030-01-01T00:00"),
         "at: '2030-01-01T00:00' has no offset"),
        (("history", "--limit", HUGE), f"--limit: '{HUGE}' is not a whole number from 1 to "
         "100,000"),
        (("history", "--limit", "0"), "--limit: '0' is not a whole number from 1 to 100,000"),
        (("deliveries", "--task", "invite", "--limit", HUGE), f"--limit: '{HUGE}' is not a"),
        (("history", "--task", "x" * 10_000), f"task: no task named '{'x' * 80}'…"),
        (("participants", "unsubscribe", "survey", "y" * 10_000),
         f"email: no participant '{'y' * 80}'… in project 'survey'"),
    ],
)
def test_the_command_refuses_each_out_of_range_value_in_one_line(
    make_project: Any, make_task: Any, args: tuple[str, ...], said: str
) -> None:
    make_task(make_project("survey"))
    assert emailer(*args).startswith(said)
