"""The emailer sends through the host project's mail configuration, on every supported Django.

Django 6.1 configures mail as ``MAILERS`` (named mailers; the ``EMAIL_*`` settings are refused
beside it); Django 5.2 and 6.0 as the ``EMAIL_*`` settings. A run, in this process, sends to a
real SMTP server on loopback through whichever the running Django takes; on 6.1 a task may
name its mailer, and a name this project cannot send through is refused beside the field, by
the model, the admin and the command alike, with the reason for this Django.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from io import StringIO
from typing import Any

import django
import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.urls import reverse

from emailer.models import SendEmailHistory, SendEmailTask
from emailer.sending import run_send_email_task
from scheduling.api import PermanentError, RunContext
from tests.conftest import FIXED_NOW, ROOT, free_port
from tests.emailer.conftest import address
from tests.emailer.smtp import SMTPServer

pytestmark = [pytest.mark.django_db]

SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
NAMED_MAILERS = django.VERSION >= (6, 1)
needs_mailers = pytest.mark.skipif(
    not NAMED_MAILERS, reason="named mailers (the MAILERS setting) arrived in Django 6.1"
)
before_mailers = pytest.mark.skipif(
    NAMED_MAILERS, reason="Django 6.1 and later choose among named mailers (MAILERS)"
)
executions = itertools.count(5000)


def context() -> RunContext:
    return RunContext(
        execution_id=next(executions),
        job_id=None,
        scheduled_for=FIXED_NOW,
        attempt=1,
        _keep_alive=lambda _id: None,
    )


def smtp_mailer(port: int) -> dict[str, Any]:
    """A ``MAILERS`` entry for the SMTP server on loopback at ``port``."""
    return {"BACKEND": SMTP_BACKEND, "OPTIONS": {"host": "127.0.0.1", "port": port, "timeout": 5}}


def host_mail_settings(port: int) -> dict[str, Any]:
    """A host project's mail configuration for the SMTP server at ``port``, written as its
    Django takes it: ``MAILERS`` on 6.1, the ``EMAIL_*`` settings before."""
    if NAMED_MAILERS:
        return {"MAILERS": {"default": smtp_mailer(port)}}
    return {
        "EMAIL_BACKEND": SMTP_BACKEND,
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": port,
        "EMAIL_TIMEOUT": 5,
    }


@pytest.fixture
def second_smtp() -> Iterator[SMTPServer]:
    server = SMTPServer(free_port()).start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def site_url(settings: Any) -> None:
    settings.EMAILER_SITE_URL = "https://mail.example.org"


def mail_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    """The deprecation warnings about mail among ``caught``."""
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, DeprecationWarning | PendingDeprecationWarning)
        and "mail" in str(w.message).lower()
    ]


def task(project: Any, mailer: str) -> SendEmailTask:
    return SendEmailTask(project=project, name="t", subject="s", body="b", mailer=mailer)


def emailer(*args: str) -> str:
    out = StringIO()
    call_command("emailer", *args, stdout=out)
    return out.getvalue()


def command_error(*args: str) -> str:
    with pytest.raises(CommandError) as caught:
        emailer(*args)
    return str(caught.value)


# --- sending ------------------------------------------------------------------------------


def test_a_run_sends_through_the_host_projects_mail_configuration_on_this_django(
    smtp: SMTPServer, make_project: Any, make_task: Any
) -> None:
    task = make_task(make_project(participants=3))
    with override_settings(**host_mail_settings(smtp.port)), warnings.catch_warnings(
        record=True
    ) as caught:
        warnings.simplefilter("always")
        result = run_send_email_task(task, context())

    assert result["status"] == "completed" and result["sent"] == 3
    assert smtp.recorder.recipients() == {address(i): 1 for i in range(3)}
    # The emailer asks for its connection the way this Django wants to be asked.
    assert mail_warnings(caught) == []


def test_the_repositorys_own_project_sends_through_the_smtp_server_its_environment_names(
    smtp: SMTPServer,
) -> None:
    """``config/settings.py`` turns ``EMAIL_HOST``/``EMAIL_PORT`` from the environment into
    ``MAILERS`` on Django 6.1 and into the ``EMAIL_*`` settings before; either way Django's
    own ``sendtestemail`` reaches the server, with no complaint about the mail settings."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp.port),
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "sendtestemail", "ops@example.org"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert smtp.recorder.recipients() == {"ops@example.org": 1}
    assert "EMAIL_" not in result.stderr and "MAILERS" not in result.stderr


@needs_mailers
def test_a_task_that_names_a_mailer_sends_through_that_mailer_only(
    smtp: SMTPServer, second_smtp: SMTPServer, make_project: Any, make_task: Any
) -> None:
    project = make_project(participants=2)
    mailers = {"default": smtp_mailer(smtp.port), "bulk": smtp_mailer(second_smtp.port)}
    with override_settings(MAILERS=mailers):
        bulk = make_task(project, name="newsletter", mailer="bulk")
        plain = make_task(project, name="invite")
        run_send_email_task(bulk, context())
        assert second_smtp.recorder.recipients() == {address(0): 1, address(1): 1}
        assert smtp.recorder.count == 0

        run_send_email_task(plain, context())
        assert smtp.recorder.recipients() == {address(0): 1, address(1): 1}
        assert second_smtp.recorder.count == 2


@needs_mailers
@pytest.mark.filterwarnings("ignore:The EMAIL_.* setting is deprecated")  # Django's, to projects
def test_a_django_6_1_project_still_on_the_email_settings_sends_through_them(
    settings: Any, smtp: SMTPServer, make_project: Any, make_task: Any
) -> None:
    del settings.MAILERS
    settings.EMAIL_BACKEND = SMTP_BACKEND
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = smtp.port
    task = make_task(make_project(participants=2))
    result = run_send_email_task(task, context())
    assert result["sent"] == 2 and smtp.recorder.count == 2

    with pytest.raises(ValidationError) as refused:
        make_task(task.project, name="named", mailer="bulk")
    assert refused.value.message_dict == {
        "mailer": [
            "'bulk': this project configures mail with the EMAIL_* settings, one mailer; "
            "define MAILERS to send through named mailers, or leave this empty"
        ]
    }


@needs_mailers
def test_a_run_whose_mailer_was_removed_since_ends_with_the_reason_before_claiming_anyone(
    smtp: SMTPServer, second_smtp: SMTPServer, make_project: Any, make_task: Any
) -> None:
    project = make_project(participants=2)
    with override_settings(
        MAILERS={"default": smtp_mailer(smtp.port), "bulk": smtp_mailer(second_smtp.port)}
    ):
        task = make_task(project, mailer="bulk")
    with override_settings(MAILERS={"default": smtp_mailer(smtp.port)}):
        run = context()
        with pytest.raises(PermanentError, match="mailer: 'bulk' is not a mailer in MAILERS"):
            run_send_email_task(task, run)

    history = SendEmailHistory.objects.get(execution_id=run.execution_id)
    assert history.status == "interrupted"
    assert history.note == (
        "mailer: 'bulk' is not a mailer in MAILERS; the configured mailers are: 'default'"
    )
    assert not task.deliveries.exists()
    assert smtp.recorder.count == second_smtp.recorder.count == 0


# --- validation: model, admin, command ----------------------------------------------------


@needs_mailers
@override_settings(MAILERS={"default": smtp_mailer(25), "bulk": smtp_mailer(2525)})
def test_a_task_may_name_only_a_mailer_the_project_configures(make_project: Any) -> None:
    project = make_project()
    for accepted in ("", "default", "bulk", " bulk "):
        task(project, accepted).full_clean()

    with pytest.raises(ValidationError) as refused:
        task(project, "Bulk").full_clean()
    assert refused.value.message_dict == {
        "mailer": [
            "'Bulk' is not a mailer in MAILERS; the configured mailers are: 'default', 'bulk'"
        ]
    }


@needs_mailers
@override_settings(MAILERS={"bulk": smtp_mailer(2525)})
def test_without_a_default_mailer_a_task_must_name_one(make_project: Any) -> None:
    project = make_project()
    with pytest.raises(ValidationError) as refused:
        task(project, "").full_clean()
    assert refused.value.message_dict == {
        "mailer": [
            "empty means the 'default' mailer, and MAILERS has no 'default' entry; name one "
            "of the configured mailers: 'bulk'"
        ]
    }
    task(project, "bulk").full_clean()


@before_mailers
def test_before_django_6_1_a_task_refuses_a_mailer_name_and_says_why(make_project: Any) -> None:
    project = make_project()
    for accepted in ("", "default"):
        task(project, accepted).full_clean()
    with pytest.raises(ValidationError) as refused:
        task(project, "bulk").full_clean()
    assert refused.value.message_dict == {
        "mailer": [
            f"'bulk': choosing a mailer by name needs Django 6.1's MAILERS setting; on Django "
            f"{django.get_version()} mail goes out through the EMAIL_* settings, one mailer, "
            "so leave this empty (or 'default')"
        ]
    }


def test_the_admin_refuses_a_mailer_the_project_cannot_send_through_beside_the_field(
    admin_client: Any, make_project: Any
) -> None:
    from tests.emailer.test_admin import task_form

    project = make_project()
    page = admin_client.get(reverse("admin:emailer_sendemailtask_add")).content.decode()
    assert 'name="mailer"' in page
    if NAMED_MAILERS:
        assert "A mailer from MAILERS (default); empty means default." in page
    else:
        assert "Mail goes out through the EMAIL_* settings (one mailer): leave this empty." in page

    response = admin_client.post(
        reverse("admin:emailer_sendemailtask_add"), task_form(project, mailer="nowhere")
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["mailer"]
    assert errors["mailer"][0].startswith("'nowhere'")
    assert not SendEmailTask.objects.exists()

    admin_client.post(
        reverse("admin:emailer_sendemailtask_add"), task_form(project, mailer="default")
    )
    assert SendEmailTask.objects.get().mailer == "default"


@needs_mailers
def test_the_admin_changes_the_mailer_of_a_task_to_a_configured_one(
    admin_client: Any, make_project: Any, make_task: Any
) -> None:
    from tests.emailer.test_admin import task_form

    task = make_task(make_project())
    url = reverse("admin:emailer_sendemailtask_change", args=[task.pk])
    with override_settings(MAILERS={"default": smtp_mailer(25), "bulk": smtp_mailer(2525)}):
        assert "A mailer from MAILERS (default, bulk)" in admin_client.get(url).content.decode()
        response = admin_client.post(
            url, task_form(task.project, name=task.name, subject="s", body="b", mailer="bulk")
        )
    assert response.status_code == 302
    task.refresh_from_db()
    assert task.mailer == "bulk"


def test_the_command_refuses_a_mailer_the_project_cannot_send_through_naming_the_field(
    make_project: Any, make_task: Any
) -> None:
    task = make_task(make_project())
    added = command_error(
        "task", "add", "other", "--project", task.project.name, "--subject", "s", "--body", "b",
        "--mailer", "nowhere",
    )  # fmt: skip
    changed = command_error("task", "mailer", task.name, "nowhere")
    for message in (added, changed):
        assert message.startswith("mailer: 'nowhere'") and "\n" not in message
    assert list(SendEmailTask.objects.values_list("name", "mailer")) == [(task.name, "")]


@needs_mailers
@override_settings(MAILERS={"default": smtp_mailer(25), "bulk": smtp_mailer(2525)})
def test_the_command_sets_and_clears_the_mailer_of_a_task(
    make_project: Any, make_task: Any
) -> None:
    project = make_project()
    emailer(
        "task", "add", "news", "--project", project.name, "--subject", "s", "--body", "b",
        "--mailer", "bulk",
    )  # fmt: skip
    assert SendEmailTask.objects.get(name="news").mailer == "bulk"

    task = make_task(project)
    assert emailer("task", "mailer", task.name, "bulk").strip() == (
        f"task {task.name} sends through bulk"
    )
    task.refresh_from_db()
    assert task.mailer == "bulk"
    assert emailer("task", "mailer", task.name, "").strip() == (
        f"task {task.name} sends through the default mailer"
    )
    task.refresh_from_db()
    assert task.mailer == ""
