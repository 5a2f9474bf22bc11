"""Nobody types an id. A job's or a schedule's owner is the user saving it, unless a superuser
names another one through a search box (or, where the host's admin cannot search its users, a
select of the active staff); a job's task-table row is picked by its name. No admin page of the
three apps asks for a raw id.

The cast: the superuser ``admin``; Alice, staff with every ``scheduling`` permission and no
permission on users; Bob, staff; Ivy, inactive staff; Carl, active but not staff.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.admin.widgets import AutocompleteSelect, ForeignKeyRawIdWidget
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.forms import ModelChoiceField
from django.test import Client, RequestFactory
from django.utils import timezone

from scheduling import api
from scheduling.models import Job, Schedule
from tests.factories import create_job
from tests.scheduling.test_admin_jobs import form_data, form_of
from tests.tasktable_app.models import TeamChore

pytestmark = pytest.mark.django_db

NOOP = "scheduling.diagnostics.noop"
JOBS = "/admin/scheduling/job/"
SCHEDULES = "/admin/scheduling/schedule/"
AUTOCOMPLETE = "/admin/autocomplete/"
OWNER_SEARCH = {"app_label": "scheduling", "model_name": "job", "field_name": "owner"}
APPS = ("scheduling", "emailer", "subscriptions")


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user("alice", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label__in=("scheduling", "tasktable_app"))
    )
    return user


@pytest.fixture
def bob(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("bob", password="pw", is_staff=True)


@pytest.fixture
def as_alice(alice: Any) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def schedule_data(**overrides: Any) -> dict[str, Any]:
    data = {
        "name": "weekday mornings",
        "interval": "",
        "cron": "0 9 * * 1-5",
        "timezone": "UTC",
        **{f"{name}_{part}": "" for name in ("run_at", "starts_at", "ends_at") for part in (0, 1)},
    }
    data.update(overrides)
    return data


def owner_widget(form: Any) -> Any:
    widget = form.fields["owner"].widget
    return getattr(widget, "widget", widget)  # inside the admin's add/change links


# --- the owner is the user saving ------------------------------------------------------------


def test_a_superusers_new_job_posted_without_an_owner_is_theirs(
    admin_client: Client, admin_user: Any
) -> None:
    page = admin_client.get(f"{JOBS}add/")
    assert form_of(page).initial["owner"] == admin_user.pk  # shown filled in
    response = admin_client.post(f"{JOBS}add/", form_data())  # no "owner" at all
    assert response.status_code == 302, form_of(response).errors
    assert Job.objects.get(name="report").owner == admin_user
    response = admin_client.post(f"{JOBS}add/", form_data(name="second", owner=""))  # cleared
    assert response.status_code == 302, form_of(response).errors
    assert Job.objects.get(name="second").owner == admin_user


def test_a_superuser_may_name_another_owner(
    admin_client: Client, admin_user: Any, bob: Any
) -> None:
    response = admin_client.post(f"{JOBS}add/", form_data(owner=bob.pk))
    assert response.status_code == 302, form_of(response).errors
    job = Job.objects.get(name="report")
    assert (job.owner, job.schedule.owner) == (bob, bob)
    changed = admin_client.post(f"{JOBS}{job.pk}/change/", form_data(owner=admin_user.pk))
    assert changed.status_code == 302, form_of(changed).errors
    assert Job.objects.get(pk=job.pk).owner == admin_user


def test_a_superusers_new_schedule_posted_without_an_owner_is_theirs(
    admin_client: Client, admin_user: Any
) -> None:
    assert form_of(admin_client.get(f"{SCHEDULES}add/")).initial["owner"] == admin_user.pk
    response = admin_client.post(f"{SCHEDULES}add/", schedule_data())
    assert response.status_code == 302, form_of(response).errors
    assert Schedule.objects.get(name="weekday mornings").owner == admin_user


def test_a_staff_user_naming_another_owner_saves_the_job_as_their_own(
    as_alice: Client, alice: Any, bob: Any
) -> None:
    assert "owner" not in form_of(as_alice.get(f"{JOBS}add/")).fields
    response = as_alice.post(f"{JOBS}add/", form_data(owner=bob.pk))
    assert response.status_code == 302, form_of(response).errors
    assert Job.objects.get(name="report").owner == alice
    # Nor does a change page move their job to somebody else.
    job = Job.objects.get(name="report")
    as_alice.post(f"{JOBS}{job.pk}/change/", form_data(owner=bob.pk, note="still mine"))
    job.refresh_from_db()
    assert (job.owner, job.note) == (alice, "still mine")


# --- a search box for superusers -------------------------------------------------------------


def test_a_superuser_finds_the_owner_by_searching_users(
    admin_client: Client, bob: Any, django_user_model: Any
) -> None:
    django_user_model.objects.create_user("barbara", is_staff=True)
    page = admin_client.get(f"{JOBS}add/")
    assert isinstance(owner_widget(form_of(page)), AutocompleteSelect)
    assert not isinstance(owner_widget(form_of(page)), ForeignKeyRawIdWidget)
    found = admin_client.get(AUTOCOMPLETE, {**OWNER_SEARCH, "term": "b"}).json()
    assert {row["text"] for row in found["results"]} == {"bob", "barbara"}
    schedules = admin_client.get(
        AUTOCOMPLETE, {**OWNER_SEARCH, "model_name": "schedule", "term": "bob"}
    ).json()
    assert [row["id"] for row in schedules["results"]] == [str(bob.pk)]


def test_a_staff_user_cannot_list_users_through_the_owner_search(
    as_alice: Client, bob: Any
) -> None:
    for model_name in ("job", "schedule"):
        refused = as_alice.get(AUTOCOMPLETE, {**OWNER_SEARCH, "model_name": model_name})
        assert refused.status_code == 403
        assert b"bob" not in refused.content


# --- where the host's admin cannot search users ------------------------------------------------


class UnsearchableUserAdmin(admin.ModelAdmin):
    """A host's own user admin without ``search_fields`` (Django's check admin.E040 for
    ``autocomplete_fields`` pointing at it)."""


@pytest.fixture(params=["not registered", "no search_fields"])
def unsearchable_users(request: Any) -> Iterator[str]:
    user_model = get_user_model()
    original = type(admin.site.get_model_admin(user_model))
    admin.site.unregister(user_model)
    if request.param == "no search_fields":
        admin.site.register(user_model, UnsearchableUserAdmin)
    try:
        yield request.param
    finally:
        if admin.site.is_registered(user_model):
            admin.site.unregister(user_model)
        admin.site.register(user_model, original)


def test_without_a_user_search_the_owner_is_a_select_of_active_staff(
    unsearchable_users: str,
    admin_client: Client,
    admin_user: Any,
    bob: Any,
    django_user_model: Any,
) -> None:
    django_user_model.objects.create_user("ivy", is_staff=True, is_active=False)
    django_user_model.objects.create_user("carl", is_staff=False)
    for model in (Job, Schedule):  # Django's checks pass: no E039/E040 at startup
        assert admin.site.get_model_admin(model).check() == []
    page = admin_client.get(f"{JOBS}add/")
    field = form_of(page).fields["owner"]
    assert not isinstance(owner_widget(form_of(page)), AutocompleteSelect | ForeignKeyRawIdWidget)
    assert {user.username for user in field.queryset} == {"admin", "bob"}
    assert 'name="owner"' in page.content.decode() and "<select" in page.content.decode()
    response = admin_client.post(f"{JOBS}add/", form_data(owner=bob.pk))
    assert response.status_code == 302, form_of(response).errors
    assert Job.objects.get(name="report").owner == bob
    response = admin_client.post(f"{JOBS}add/", form_data(name="mine"))
    assert Job.objects.get(name="mine").owner == admin_user

    # A job made by code belongs to the inactive system owner, who stays choosable on its page,
    # so the job can be saved as it is; a new job cannot be given to them.
    from_code = Job.objects.get(pk=api.schedule_task(NOOP, timing=api.Every("PT1H"), name="c").id)
    page = admin_client.get(f"{JOBS}{from_code.pk}/change/")
    assert from_code.owner in form_of(page).fields["owner"].queryset
    refused = admin_client.post(f"{JOBS}add/", form_data(name="x", owner=from_code.owner_id))
    assert "owner" in form_of(refused).errors
    assert admin_client.get(f"{JOBS}abc/change/").status_code == 302  # not found, not a 500


# --- no raw ids anywhere -------------------------------------------------------------------


def test_no_admin_page_of_the_apps_asks_for_a_raw_id(admin_user: Any) -> None:
    request = RequestFactory().get("/admin/")
    request.user = admin_user
    job = create_job(owner=admin_user, name="any", task=NOOP, every="PT1H", now=timezone.now())
    checked = []
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label not in APPS:
            continue
        assert not model_admin.raw_id_fields, model._meta.label
        for inline in model_admin.get_inline_instances(request):
            assert not inline.raw_id_fields, f"{model._meta.label} {type(inline).__name__}"
        obj = job if model is Job else None
        form = model_admin.get_form(request, obj)()
        for name, field in form.fields.items():
            if isinstance(field, ModelChoiceField):
                widget = getattr(field.widget, "widget", field.widget)
                assert not isinstance(widget, ForeignKeyRawIdWidget), (model._meta.label, name)
                checked.append(f"{model._meta.label}.{name}")
    assert {"scheduling.Job.owner", "scheduling.Schedule.owner"} <= set(checked)
    assert "emailer.SendEmailTask.project" in checked


def test_a_task_table_row_is_picked_by_its_name(
    as_alice: Client, alice: Any, bob: Any, admin_client: Client
) -> None:
    mine = TeamChore.objects.create(name="water the plants", owner=alice)
    theirs = TeamChore.objects.create(name="bob's reminder", owner=bob)
    page = as_alice.get(f"{JOBS}add/")
    rows = dict(form_of(page).fields["task"].choices)["Rows of tasktable_app.TeamChore"]
    assert (f"table:tasktable_app.TeamChore:{mine.pk}", "team chore: water the plants") in rows
    assert f"table:tasktable_app.TeamChore:{theirs.pk}" not in dict(rows)  # not hers to target

    made = as_alice.post(
        f"{JOBS}add/", form_data(task=f"table:tasktable_app.TeamChore:{mine.pk}", task_row_id="")
    )
    assert made.status_code == 302, form_of(made).errors
    job = Job.objects.get()
    assert (job.task_table, job.task_row_id) == ("tasktable_app.TeamChore", mine.pk)
    assert form_of(as_alice.get(f"{JOBS}{job.pk}/change/")).initial["task"] == (
        f"table:tasktable_app.TeamChore:{mine.pk}"
    )
    crafted = as_alice.post(
        f"{JOBS}add/",
        form_data(name="x", task=f"table:tasktable_app.TeamChore:{theirs.pk}", task_row_id=""),
    )
    assert "Select a valid choice" in " ".join(form_of(crafted).errors["task"])
    assert Job.objects.count() == 1
    # A superuser is offered every row, Bob's too.
    every = dict(
        dict(form_of(admin_client.get(f"{JOBS}add/")).fields["task"].choices)[
            "Rows of tasktable_app.TeamChore"
        ]
    )
    assert f"table:tasktable_app.TeamChore:{theirs.pk}" in every
