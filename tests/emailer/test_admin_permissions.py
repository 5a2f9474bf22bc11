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
EMAIL_PERMISSIONS = (
    "view_project",
    "change_project",
    "view_participant",
    "add_participant",
    "change_participant",
)


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


def test_an_import_needs_the_add_and_change_permissions_on_participants(
    django_user_model: Any, make_project: Any
) -> None:
    project = make_project(participants=1)
    url = reverse("admin:emailer_project_import", args=[project.pk])
    page = reverse("admin:emailer_project_change", args=[project.pk])
    for missing in ("add_participant", "change_participant"):
        granted = [codename for codename in EMAIL_PERMISSIONS if codename != missing]
        as_partly = logged_in(staff(django_user_model, f"no-{missing}", *granted))
        assert as_partly.get(url).status_code == 403
        assert as_partly.post(url, {"file": csv_file()}).status_code == 403
        assert "Import participants (CSV)" not in as_partly.get(page).content.decode()
    assert Participant.objects.filter(project=project).count() == 1


def test_a_preview_shows_people_only_to_who_may_see_them_and_no_live_unsubscribe_link(
    django_user_model: Any, admin_client: Client, make_project: Any, make_task: Any
) -> None:
    task = make_task(make_project(participants=1))
    url = reverse("admin:emailer_sendemailtask_change", args=[task.pk])
    viewer = logged_in(staff(django_user_model, "vic", "view_sendemailtask"))

    shown_to_viewer = viewer.get(url).content.decode()
    assert "Person 0" not in shown_to_viewer and "Your survey, Ada Lovelace" in shown_to_viewer
    shown_to_admin = admin_client.get(url).content.decode()
    assert "Your survey, Person 0" in shown_to_admin
    for page in (shown_to_viewer, shown_to_admin):
        assert "/emailer/unsubscribe/TOKEN/" in page  # the sample link, which unsubscribes no one
        assert "testserver/emailer/unsubscribe/" not in page.replace("TOKEN", "")


def test_deleting_an_email_task_or_its_project_needs_delete_on_every_job_that_runs_it(
    django_user_model: Any, make_project: Any, make_task: Any
) -> None:
    project = make_project()
    task = make_task(project)
    deleter = (*JOB_PERMISSIONS, "delete_job", "view_sendemailtask", "change_sendemailtask")
    carol = staff(
        django_user_model,
        "carol",
        *deleter,
        "delete_sendemailtask",
        "view_project",
        "delete_project",
    )
    bob = staff(django_user_model, "bob", *JOB_PERMISSIONS, "change_sendemailtask")
    services.schedule_task(task=task, timing=Every("PT1H"), name="bobs-mailing", owner=bob)
    as_carol = logged_in(carol)

    task_url = reverse("admin:emailer_sendemailtask_delete", args=[task.pk])
    assert as_carol.post(task_url, {"post": "yes"}).status_code == 403
    as_carol.post(
        reverse("admin:emailer_sendemailtask_changelist"),
        {"action": "delete_selected", "_selected_action": [task.pk], "post": "yes"},
    )
    project_url = reverse("admin:emailer_project_delete", args=[project.pk])
    assert as_carol.post(project_url, {"post": "yes"}).status_code == 403
    assert [job.name for job in jobs_for_row(task)] == ["bobs-mailing"]

    mine = make_task(project, name="carols")
    services.schedule_task(task=mine, timing=Every("PT1H"), name="carols-mailing", owner=carol)
    mine_url = reverse("admin:emailer_sendemailtask_delete", args=[mine.pk])
    confirming = as_carol.get(mine_url).content.decode()
    assert "<li>Job: carols-mailing (and its history)</li>" in confirming  # an item, not a repr
    assert as_carol.post(mine_url, {"post": "yes"}).status_code == 302
    assert not jobs_for_row(mine)
    assert [job.name for job in jobs_for_row(task)] == ["bobs-mailing"]


def test_the_task_list_shows_each_request_its_own_users_jobs(
    django_user_model: Any, admin_user: Any, make_project: Any, make_task: Any
) -> None:
    """The admin object is shared by every request: one user's page, rendered while another
    user's request runs, still shows only the first user's jobs."""
    from django.contrib import admin
    from django.test import RequestFactory

    from emailer.models import SendEmailTask

    task = make_task(make_project())
    bob = staff(django_user_model, "bob", *JOB_PERMISSIONS, "change_sendemailtask")
    services.schedule_task(task=task, timing=Every("PT1H"), name="bobs-mailing", owner=bob)
    sam = staff(django_user_model, "sam", "view_sendemailtask", "view_job")
    task_admin = admin.site._registry[SendEmailTask]

    def listing(user: Any) -> Any:
        request = RequestFactory().get(reverse("admin:emailer_sendemailtask_changelist"))
        request.user = user
        return task_admin.changelist_view(request)

    sams = listing(sam)
    admins = listing(admin_user).render().content.decode()
    assert "every hour" in admins.lower()
    assert "every hour" not in sams.render().content.decode().lower()
