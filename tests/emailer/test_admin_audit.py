"""Jobs removed by a delete in the emailer's admin are on their audit trail by the signed-in
user through the admin door, as the engine's own pages record theirs, not as ``system``.

An email task's jobs go with the task (the task table's delete hook), and a project's tasks go
with the project; the emailer's admin makes no other change to jobs (jobs are made on the
engine's pages, by ``manage.py emailer task schedule`` or by code).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from emailer import services
from emailer.models import Project, SendEmailTask
from scheduling.api import Every
from scheduling.models import JobChange

pytestmark = pytest.mark.django_db

#: What carol needs to delete email tasks and projects with the jobs she owns that run them.
DELETER = (
    "view_job",
    "add_job",
    "change_job",
    "delete_job",
    "view_sendemailtask",
    "change_sendemailtask",
    "delete_sendemailtask",
    "view_project",
    "delete_project",
)


@pytest.fixture
def carol(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user("carol", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=DELETER))
    return user


@pytest.fixture
def as_carol(carol: Any) -> Client:
    client = Client()
    client.force_login(carol)
    return client


@pytest.fixture
def task(carol: Any, make_project: Any, make_task: Any) -> SendEmailTask:
    """An email task with a job of carol's that runs it."""
    made = make_task(make_project())
    services.schedule_task(task=made, timing=Every("PT1H"), name="carols-mailing", owner=carol)
    return made


def removal(job_name: str) -> tuple[str, str]:
    change = JobChange.objects.get(job_name=job_name, action="removed")
    return change.who, change.source


def delete_page(model: str, pk: int) -> tuple[str, dict[str, Any]]:
    return reverse(f"admin:emailer_{model}_delete", args=[pk]), {"post": "yes"}


def delete_selected(model: str, pk: int) -> tuple[str, dict[str, Any]]:
    return reverse(f"admin:emailer_{model}_changelist"), {
        "action": "delete_selected",
        "_selected_action": [pk],
        "post": "yes",
    }


@pytest.mark.parametrize("door", [delete_page, delete_selected])
def test_deleting_an_email_task_records_its_jobs_removal_by_the_user_in_the_admin(
    as_carol: Client, task: SendEmailTask, door: Any
) -> None:
    url, form = door("sendemailtask", task.pk)
    assert as_carol.post(url, form).status_code == 302
    assert not SendEmailTask.objects.filter(pk=task.pk).exists()
    assert removal("carols-mailing") == ("carol", "admin")


@pytest.mark.parametrize("door", [delete_page, delete_selected])
def test_deleting_a_project_records_its_tasks_jobs_removal_by_the_user_in_the_admin(
    as_carol: Client, task: SendEmailTask, door: Any
) -> None:
    url, form = door("project", task.project_id)
    assert as_carol.post(url, form).status_code == 302
    assert not Project.objects.filter(pk=task.project_id).exists()
    assert removal("carols-mailing") == ("carol", "admin")


def test_a_delete_by_code_after_one_in_the_admin_is_still_the_system_s(
    as_carol: Client, task: SendEmailTask, make_task: Any
) -> None:
    """Who deletes in the admin holds for that request's delete only."""
    other = make_task(task.project, name="reminder")
    services.schedule_task(task=other, timing=Every("PT1H"), name="code-mailing")
    url, form = delete_page("sendemailtask", task.pk)
    assert as_carol.post(url, form).status_code == 302

    other.delete()

    assert removal("carols-mailing") == ("carol", "admin")
    assert removal("code-mailing") == ("system", "api")
