"""Schedules have owners like jobs; ``/health/``'s details are for who may see the ledger.

A schedule belongs to the user whose job made it (the system owner for code). A staff user
who is not a superuser sees, shares, renames, retimes and deletes only their own schedules,
whatever URL or form field they craft; a job whose timing is edited while its schedule is
someone else's gets a copy of its own. ``/health/`` gives each check's figures to staff with
the view permission on jobs and executions, and the plain verdict to everyone else.

The cast: Alice and Bob are staff with every ``scheduling`` permission, each an owner; Vera is
staff who may only view jobs and executions; Edna is staff with the emailer's permissions and
no scheduling permission at all.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.utils import timezone

from scheduling import api
from scheduling.models import Job, Schedule, SchedulerState
from scheduling.stages import edits, removals
from scheduling.stages.jobs import SYSTEM_OWNER
from tests.factories import create_job
from tests.scheduling.test_admin_jobs import form_data, form_of

pytestmark = pytest.mark.django_db

NOOP = "scheduling.diagnostics.noop"
JOBS = "/admin/scheduling/job/"
SCHEDULES = "/admin/scheduling/schedule/"


def staff(django_user_model: Any, username: str, *codenames: str, app: str = "") -> Any:
    user = django_user_model.objects.create_user(username, password="pw", is_staff=True)
    granted = Permission.objects.filter(codename__in=codenames)
    if app:
        granted = granted | Permission.objects.filter(content_type__app_label=app)
    user.user_permissions.set(granted)
    return user


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return staff(django_user_model, "alice", app="scheduling")


@pytest.fixture
def bob(django_user_model: Any) -> Any:
    return staff(django_user_model, "bob", app="scheduling")


@pytest.fixture
def as_bob(bob: Any) -> Client:
    return logged_in(bob)


def job_of(owner: Any, name: str, **options: Any) -> Job:
    options.setdefault("every", "PT1H")
    return create_job(owner=owner, name=name, task=NOOP, now=timezone.now(), **options)


# --- who owns a schedule -----------------------------------------------------------------------


def test_a_schedule_belongs_to_the_owner_of_the_job_that_made_it(alice: Any) -> None:
    made_in_the_admin = logged_in(alice).post(f"{JOBS}add/", form_data(name="report"))
    assert made_in_the_admin.status_code == 302
    assert Job.objects.get(name="report").schedule.owner == alice
    assert job_of(alice, "nightly").schedule.owner == alice  # the command line's service

    from_code = api.schedule_task(NOOP, timing=api.Every("PT1H"), name="cleanup")
    assert Schedule.objects.get(jobs__pk=from_code.id).owner.username == SYSTEM_OWNER


def test_a_staff_user_adds_schedules_of_their_own(as_bob: Client, bob: Any) -> None:
    page = as_bob.get(f"{SCHEDULES}add/")
    assert "owner" not in page.context["adminform"].form.fields
    response = as_bob.post(
        f"{SCHEDULES}add/",
        {
            "name": "weekday mornings",
            "interval": "",
            "cron": "0 9 * * 1-5",
            "timezone": "UTC",
            "run_at_0": "",
            "run_at_1": "",
            "starts_at_0": "",
            "starts_at_1": "",
            "ends_at_0": "",
            "ends_at_1": "",
            "owner": "1",  # crafted: ignored, the field is not on their form
        },
    )
    assert response.status_code == 302
    assert Schedule.objects.get(name="weekday mornings").owner == bob


# --- another owner's schedule is out of reach --------------------------------------------------


@pytest.fixture
def alices_unused_schedule(alice: Any) -> Schedule:
    """A schedule Alice made and no job uses any more (its job moved to another)."""
    return Schedule.objects.create(owner=alice, name="alice's slot", interval="PT15M")


def test_another_owners_schedule_is_not_listed_nor_found_by_any_url(
    as_bob: Client, alices_unused_schedule: Schedule
) -> None:
    pk = alices_unused_schedule.pk
    assert "alice&#x27;s slot" not in as_bob.get(SCHEDULES).content.decode()
    for url in (
        f"{SCHEDULES}{pk}/change/",
        f"{SCHEDULES}{pk}/delete/",
        f"{SCHEDULES}{pk}/history/",
    ):
        response = as_bob.get(url, follow=True)
        assert response.status_code == 200
        assert "doesn\u2019t exist" in response.content.decode(), url


def test_a_staff_user_cannot_rename_retime_or_delete_another_owners_schedule(
    as_bob: Client, alices_unused_schedule: Schedule
) -> None:
    pk = alices_unused_schedule.pk
    as_bob.post(
        f"{SCHEDULES}{pk}/change/",
        {
            "name": "bob's now",
            "interval": "PT1S",
            "cron": "",
            "timezone": "UTC",
            "run_at_0": "",
            "run_at_1": "",
            "starts_at_0": "",
            "starts_at_1": "",
            "ends_at_0": "",
            "ends_at_1": "",
        },
    )
    as_bob.post(f"{SCHEDULES}{pk}/delete/", {"post": "yes"})
    as_bob.post(SCHEDULES, {"action": "delete_selected", "_selected_action": [pk], "post": "yes"})
    kept = Schedule.objects.get(pk=pk)
    assert (kept.name, kept.interval) == ("alice's slot", "PT15M")


def test_a_staff_user_cannot_put_a_job_on_another_owners_schedule(
    as_bob: Client, alices_unused_schedule: Schedule
) -> None:
    offered = form_of(as_bob.get(f"{JOBS}add/")).fields["existing_schedule"].queryset
    assert alices_unused_schedule not in offered
    response = as_bob.post(
        f"{JOBS}add/",
        form_data(interval="", existing_schedule=str(alices_unused_schedule.pk)),
    )
    assert "existing_schedule" in form_of(response).errors
    assert not Job.objects.exists()


def test_a_schedule_whose_jobs_are_not_all_the_owners_is_changed_by_superusers_only(
    alice: Any, bob: Any
) -> None:
    """Alice owns a schedule that a superuser also gave Bob's job: Alice may not retime it."""
    alices = job_of(alice, "alice-report")
    bobs = job_of(bob, "bob-report")
    Job.objects.filter(pk=bobs.pk).update(schedule=alices.schedule)
    response = logged_in(alice).get(f"{SCHEDULES}{alices.schedule_id}/change/")
    assert response.status_code == 200
    assert not response.context["has_change_permission"]


def test_retiming_a_job_on_a_schedule_it_does_not_own_gives_it_a_copy_of_its_own(
    alice: Any, bob: Any, as_bob: Client
) -> None:
    job = job_of(bob, "bob-report")
    theirs = Schedule.objects.create(owner=alice, interval="PT1H")
    Job.objects.filter(pk=job.pk).update(schedule=theirs)  # as a superuser may have done
    edits.edit_job(job=job, now=timezone.now(), timing={"interval": "PT2H"})
    job.refresh_from_db()
    assert job.schedule != theirs and job.schedule.owner == bob
    removals.remove_job(job=job)  # and leaving it, or being deleted, never deletes Alice's
    assert (job.schedule.interval, Schedule.objects.get(pk=theirs.pk).interval) == ("PT2H", "PT1H")


# --- the migration gives every existing schedule an owner --------------------------------------


@pytest.mark.django_db(transaction=True)
def test_existing_schedules_are_given_the_owner_of_their_jobs_or_the_system_owner(
    django_user_model: Any,
) -> None:
    executor = MigrationExecutor(connection)
    before = [("scheduling", "0010_running_limits")]
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    OldSchedule, OldJob = (
        old.get_model("scheduling", "Schedule"),
        old.get_model("scheduling", "Job"),
    )
    alice = django_user_model.objects.create(username="alice")
    bob = django_user_model.objects.create(username="bob")
    now = timezone.now()

    def schedule_with(*owners: Any) -> int:
        schedule = OldSchedule.objects.create(interval="PT1H")
        for index, owner in enumerate(owners):
            OldJob.objects.create(
                owner_id=owner.pk,
                name=f"{schedule.pk}-{index}",
                task=NOOP,
                schedule=schedule,
                created_at=now,
                updated_at=now,
            )
        return schedule.pk

    alices, shared, unused = schedule_with(alice, alice), schedule_with(alice, bob), schedule_with()

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    owners = dict(Schedule.objects.values_list("pk", "owner__username"))
    assert owners == {alices: "alice", shared: SYSTEM_OWNER, unused: SYSTEM_OWNER}
    system = django_user_model.objects.get(username=SYSTEM_OWNER)
    assert not system.is_active and not system.has_usable_password()


# --- /health/ details need the scheduling view permission --------------------------------------


@pytest.mark.parametrize(
    ("who", "details"),
    [
        ("anonymous", False),
        ("edna, staff of the emailer only", False),
        ("staff with no permission at all", False),
        ("vera, who may view jobs and executions", True),
        ("the superuser", True),
    ],
)
def test_health_details_are_for_staff_who_may_view_the_ledger(
    django_user_model: Any, admin_user: Any, who: str, details: bool
) -> None:
    SchedulerState.objects.create(name="s1", last_tick_at=timezone.now(), started_at=timezone.now())
    users = {
        "edna, staff of the emailer only": lambda: staff(django_user_model, "edna", app="emailer"),
        "staff with no permission at all": lambda: staff(django_user_model, "sam"),
        "vera, who may view jobs and executions": lambda: staff(
            django_user_model, "vera", "view_job", "view_execution"
        ),
        "the superuser": lambda: admin_user,
    }
    client = logged_in(users[who]()) if who in users else Client()
    scheduler = client.get("/health/").json()["checks"]["scheduler"]
    assert ("last_tick_at" in scheduler) is details
    assert ("ms" in scheduler) is details
