"""``manage.py emailer``'s changes to jobs are on their audit trail as ``manage.py jobs``'
are: by the process's operating-system account (its real uid, not ``LOGNAME``), and by the
Django user ``--by`` names; a name that is no active user is refused in one line."""

from __future__ import annotations

import os
import pwd
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from emailer.models import SendEmailTask
from scheduling.api import history, jobs_for_row
from scheduling.models import JobChange

pytestmark = [pytest.mark.django_db]


def emailer(*args: str) -> str:
    out = StringIO()
    call_command("emailer", *args, stdout=out)
    return out.getvalue()


def account() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


@pytest.fixture
def task(django_user_model: Any) -> SendEmailTask:
    django_user_model.objects.create_user("alice")
    emailer("project", "add", "survey", "--state", "active")
    emailer("task", "add", "invite", "--project", "survey", "--subject", "Hi", "--body", "B")
    return SendEmailTask.objects.get(name="invite")


def test_task_schedule_records_the_operator_not_the_api(
    task: SendEmailTask, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOGNAME", "mallory")
    monkeypatch.setenv("USER", "mallory")
    emailer("task", "schedule", "invite", "--every", "PT1H")
    emailer("task", "schedule", "invite", "--cron", "0 9 * * 1", "--by", "alice")
    plain, named = jobs_for_row(task)
    [made] = history(plain)
    assert (made["action"], made["who"], made["source"]) == ("created", account(), "command")
    [made] = history(named)
    assert (made["who"], made["source"]) == (f"alice (os: {account()})", "command")


def test_project_remove_records_each_job_s_removal_by_the_operator(task: SendEmailTask) -> None:
    emailer("task", "schedule", "invite", "--every", "PT1H", "--job-name", "weekly-invite")
    emailer("project", "remove", "survey", "--by", "alice")
    removed = JobChange.objects.get(job_name="weekly-invite", action="removed")
    assert (removed.who, removed.source) == (f"alice (os: {account()})", "command")


@pytest.mark.parametrize(
    "argv",
    [
        ("task", "schedule", "invite", "--every", "PT1H"),
        ("project", "remove", "survey"),
    ],
)
def test_by_no_active_user_is_refused_in_one_line(
    task: SendEmailTask, argv: tuple[str, ...]
) -> None:
    with pytest.raises(CommandError) as caught:
        emailer(*argv, "--by", "nobody")
    assert str(caught.value) == "--by: no active user named 'nobody'"
    assert SendEmailTask.objects.filter(pk=task.pk).exists() and not jobs_for_row(task)
