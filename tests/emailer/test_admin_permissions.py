"""Permissions in the emailer's admin, and who may point a job at an email task.

Unsubscribing participants and importing them change state: they need the change permission
and are written to the admin log, and a view-only staff user changes nothing by any URL. A job
may run an email task only for a user who may change email tasks, and an email task's page
lists only the jobs its viewer may see.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from emailer import services
from emailer.models import Participant
from scheduling.api import Every, jobs_for_row

pytestmark = pytest.mark.django_db


def staff(django_user_model: Any, username: str, *codenames: str) -> Any:
    user = django_user_model.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def csv_file() -> SimpleUploadedFile:
    return SimpleUploadedFile("people.csv", b"email,name\nnew@example.com,New\n")


JOB_PERMISSIONS = ("view_job", "add_job", "change_job")
EMAIL_PERMISSIONS = ("view_project", "change_project", "view_participant", "change_participant")


def test_a_view_only_user_cannot_unsubscribe_or_import(
    django_user_model: Any, make_project: Any
) -> None:
    as_viewer = logged_in(staff(django_user_model, "vera", "view_project", "view_participant"))
    project = make_project(participants=2)
    someone = Participant.objects.filter(project=project).first()

    as_viewer.post(
        reverse("admin:emailer_participant_changelist"),
        {"action": "unsubscribe", "_selected_action": [someone.pk]},
    )
    url = reverse("admin:emailer_project_import", args=[project.pk])
    assert as_viewer.get(url).status_code == 403
    assert as_viewer.post(url, {"file": csv_file()}).status_code == 403

    assert not Participant.objects.filter(unsubscribed_at__isnull=False).exists()
    assert Participant.objects.filter(project=project).count() == 2
    assert not LogEntry.objects.exists()
    page = as_viewer.get(reverse("admin:emailer_project_change", args=[project.pk]))
    assert "Import participants (CSV)" not in page.content.decode()


def test_unsubscribing_and_importing_are_logged(django_user_model: Any, make_project: Any) -> None:
    editor = staff(django_user_model, "ed", *EMAIL_PERMISSIONS)
    as_editor = logged_in(editor)
    project = make_project(participants=1)
    someone = Participant.objects.get(project=project)

    as_editor.post(
        reverse("admin:emailer_participant_changelist"),
        {"action": "unsubscribe", "_selected_action": [someone.pk]},
    )
    as_editor.post(reverse("admin:emailer_project_import", args=[project.pk]), {"file": csv_file()})

    assert Participant.objects.get(pk=someone.pk).unsubscribed
    assert Participant.objects.filter(project=project).count() == 2
    logged = LogEntry.objects.filter(user=editor).values_list("object_id", "change_message")
    assert sorted(logged) == sorted(
        [
            (str(someone.pk), "Unsubscribed."),
            (str(project.pk), "Imported participants: 1 added, 0 updated, 0 unchanged, 0 refused."),
        ]
    )


def test_only_a_user_who_may_change_email_tasks_points_a_job_at_one(
    django_user_model: Any, make_project: Any, make_task: Any
) -> None:
    task = make_task(make_project())
    outsider = staff(django_user_model, "outsider", *JOB_PERMISSIONS)
    page = logged_in(outsider).get("/admin/scheduling/job/add/").content.decode()
    assert "emailer.SendEmailTask" not in page
    with pytest.raises(ValidationError) as refused:
        services.schedule_task(task=task, timing=Every("PT1H"), owner=outsider)
    assert "emailer.change_sendemailtask" in str(refused.value)

    sender = staff(django_user_model, "sender", *JOB_PERMISSIONS, "change_sendemailtask")
    assert (
        "emailer.SendEmailTask"
        in logged_in(sender).get("/admin/scheduling/job/add/").content.decode()
    )
    services.schedule_task(task=task, timing=Every("PT1H"), owner=sender)
    assert [job.owner for job in jobs_for_row(task)] == ["sender"]


def test_an_email_tasks_page_lists_only_the_jobs_its_viewer_may_see(
    django_user_model: Any, admin_client: Client, make_project: Any, make_task: Any
) -> None:
    task = make_task(make_project())
    team = (*JOB_PERMISSIONS, "view_sendemailtask", "change_sendemailtask")
    alice, bob = staff(django_user_model, "alice", *team), staff(django_user_model, "bob", *team)
    for owner in (alice, bob):
        services.schedule_task(
            task=task, timing=Every("PT1H"), name=f"{owner.username}-mail", owner=owner
        )
    url = reverse("admin:emailer_sendemailtask_change", args=[task.pk])

    seen_by_alice = logged_in(alice).get(url).content.decode()
    assert "alice-mail" in seen_by_alice and "bob-mail" not in seen_by_alice
    seen_by_admin = admin_client.get(url).content.decode()
    assert "alice-mail" in seen_by_admin and "bob-mail" in seen_by_admin
