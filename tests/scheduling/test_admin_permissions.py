"""Who may point a job at what, and who may act: Django's admin rule, at every door.

A user may do what their permissions say and nothing more: the targets a job's form offers are
the ones the user may target, a crafted POST with any other value is refused beside its field,
an API call that makes a job for an owner is held to the same rule, and every action that
changes state needs the change permission and is written to the admin log.

The cast: Alice and Bob are staff with every ``scheduling`` permission and the change
permission on ``TeamChore`` (rows with an owner), each owning rows of their own; Vera is staff
with view permissions only. ``ChoreBatch`` is an internal table, as subscriptions' due batches
are, and ``scheduling.prune_history`` a superuser-only maintenance task.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.test import Client
from django.utils import timezone

from scheduling import api
from scheduling.models import Execution, ExecutionStatus, Job, JobStatus
from scheduling.stages import controls
from tests.factories import create_job
from tests.scheduling.test_admin_jobs import form_data, form_of
from tests.tasktable_app.models import Chore, ChoreBatch, TeamChore

pytestmark = pytest.mark.django_db

NOOP = "scheduling.diagnostics.noop"
PRUNE = "scheduling.prune_history"
REMIND = "tasktable_app.remind_team"
JOBS = "/admin/scheduling/job/"
EXECUTIONS = "/admin/scheduling/execution/"


def staff(django_user_model: Any, username: str, *codenames: str, apps: tuple[str, ...] = ()):
    user = django_user_model.objects.create_user(username, password="pw", is_staff=True)
    granted = Permission.objects.filter(content_type__app_label__in=apps) | (
        Permission.objects.filter(codename__in=codenames)
    )
    user.user_permissions.set(granted)
    return user


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return staff(django_user_model, "alice", "change_teamchore", apps=("scheduling",))


@pytest.fixture
def bob(django_user_model: Any) -> Any:
    return staff(django_user_model, "bob", "change_teamchore", apps=("scheduling",))


@pytest.fixture
def vera(django_user_model: Any) -> Any:
    """Staff who may look at jobs, executions and schedules, and change nothing."""
    return staff(django_user_model, "vera", "view_job", "view_execution", "view_schedule")


@pytest.fixture
def as_alice(alice: Any) -> Client:
    return logged_in(alice)


@pytest.fixture
def new_job() -> Callable[..., Job]:
    counter = iter(range(1, 1000))

    def make(owner: Any, **options: Any) -> Job:
        options.setdefault("name", f"job-{next(counter)}")
        options.setdefault("task", NOOP)
        options.setdefault("every", "PT10M")
        return create_job(owner=owner, now=timezone.now(), **options)

    return make


def offered(client: Client) -> set[str]:
    form = form_of(client.get(f"{JOBS}add/"))
    return {value for _, options in form.fields["task"].choices[1:] for value, _ in options}


def table(label: str) -> str:
    return f"table:tasktable_app.{label}"


# --- the targets offered ---------------------------------------------------------------------


def test_the_targets_offered_are_only_those_the_user_may_target(
    as_alice: Client, alice: Any, admin_client: Client
) -> None:
    mine = offered(as_alice)
    assert NOOP in mine and table("TeamChore") in mine
    # superuser-only, a permission she lacks, a model she may not change, an internal table
    assert not {PRUNE, REMIND, table("Chore"), table("ChoreBatch")} & mine
    assert "scheduling.run_task_row" not in mine

    alice.user_permissions.add(Permission.objects.get(codename="send_reminders"))
    assert REMIND in offered(logged_in(alice))

    everything = offered(admin_client)
    assert {NOOP, PRUNE, REMIND, table("Chore"), table("TeamChore")} <= everything
    assert table("ChoreBatch") not in everything  # internal: not even for a superuser


# --- crafted POSTs ---------------------------------------------------------------------------


def test_a_crafted_post_cannot_make_a_job_on_a_superuser_only_task(as_alice: Client) -> None:
    response = as_alice.post(
        f"{JOBS}add/", form_data(task=PRUNE, kwargs='{"keep_last": 0, "older_than": "0d"}')
    )
    assert response.status_code == 200
    assert "Select a valid choice" in " ".join(form_of(response).errors["task"])
    assert not Job.objects.exists()


def test_a_crafted_post_cannot_make_a_job_on_a_table_the_user_may_not_change(
    as_alice: Client,
) -> None:
    row = Chore.objects.create(name="someone else's table")
    response = as_alice.post(f"{JOBS}add/", form_data(task=table("Chore"), task_row_id=row.pk))
    assert response.status_code == 200 and "task" in form_of(response).errors
    assert not Job.objects.exists()


def test_a_crafted_post_cannot_point_a_job_at_another_owners_row(
    as_alice: Client, alice: Any, bob: Any
) -> None:
    theirs = TeamChore.objects.create(name="bob's", owner=bob)
    mine = TeamChore.objects.create(name="alice's", owner=alice)

    refused = as_alice.post(
        f"{JOBS}add/", form_data(task=table("TeamChore"), task_row_id=theirs.pk)
    )
    assert refused.status_code == 200
    # the words a missing row gets: the answer does not tell that Bob's row exists
    assert form_of(refused).errors["task_row_id"] == [
        f"no tasktable_app.TeamChore row with id {theirs.pk}"
    ]
    assert not Job.objects.exists()

    made = as_alice.post(f"{JOBS}add/", form_data(task=table("TeamChore"), task_row_id=mine.pk))
    assert made.status_code == 302
    job = Job.objects.get()
    assert (job.owner, job.task_table, job.task_row_id) == (
        alice,
        "tasktable_app.TeamChore",
        mine.pk,
    )


def test_no_one_makes_a_job_on_an_internal_table_by_hand(
    as_alice: Client, admin_client: Client
) -> None:
    batch = ChoreBatch.objects.create(name="monday")
    for client in (as_alice, admin_client):
        response = client.post(
            f"{JOBS}add/", form_data(task=table("ChoreBatch"), task_row_id=batch.pk)
        )
        assert response.status_code == 200 and "task" in form_of(response).errors
    assert not Job.objects.exists()


def test_a_staff_user_cannot_retarget_or_rearm_a_job_past_their_permissions(
    as_alice: Client, alice: Any, bob: Any, new_job: Callable[..., Job]
) -> None:
    mine = new_job(alice, name="mine")
    response = as_alice.post(f"{JOBS}{mine.pk}/change/", form_data(name="mine", task=PRUNE))
    assert response.status_code == 200 and "task" in form_of(response).errors

    # A superuser gave her a pruning job: she may rename it, not re-arm it.
    pruning = new_job(alice, name="pruning", task=PRUNE, kwargs={"keep_last": 10})
    edit = form_data(name="pruning", task=PRUNE, kwargs='{"keep_last": 10}')
    renamed = as_alice.post(f"{JOBS}{pruning.pk}/change/", {**edit, "name": "tidy"})
    assert renamed.status_code == 302, form_of(renamed).errors
    rearmed = as_alice.post(f"{JOBS}{pruning.pk}/change/", {**edit, "kwargs": '{"keep_last": 0}'})
    assert rearmed.status_code == 200
    assert "superusers only" in " ".join(form_of(rearmed).errors["task"])
    # the posted "initial" value is the client's word, not the saved row's
    sneaky = {**edit, "kwargs": '{"keep_last": 0}', "initial-kwargs": '{"keep_last": 0}'}
    as_alice.post(f"{JOBS}{pruning.pk}/change/", sneaky)
    assert Job.objects.get(pk=pruning.pk).kwargs == {"keep_last": 10}

    theirs = TeamChore.objects.create(name="bob's", owner=bob)
    row_job = new_job(
        alice,
        name="row",
        task="",
        task_table="tasktable_app.TeamChore",
        task_row_id=TeamChore.objects.create(name="hers", owner=alice).pk,
    )
    moved = as_alice.post(
        f"{JOBS}{row_job.pk}/change/",
        form_data(name="row", task=table("TeamChore"), task_row_id=theirs.pk),
    )
    assert moved.status_code == 200 and "task_row_id" in form_of(moved).errors
    assert Job.objects.get(pk=row_job.pk).task_row_id != theirs.pk


def test_a_superuser_may_schedule_the_maintenance_tasks(
    admin_client: Client, admin_user: Any
) -> None:
    response = admin_client.post(
        f"{JOBS}add/", form_data(owner=admin_user.pk, task=PRUNE, kwargs='{"keep_last": 5}')
    )
    assert response.status_code == 302
    assert Job.objects.get().task == PRUNE


# --- the API for an owner --------------------------------------------------------------------


def test_a_job_made_by_code_for_an_owner_is_held_to_the_owners_permissions(
    alice: Any, bob: Any, admin_user: Any
) -> None:
    every = api.Every("PT1H")
    with pytest.raises(ValidationError) as refused:
        api.schedule_task(PRUNE, timing=every, owner=alice)
    assert "superusers only" in str(refused.value.message_dict["task"])
    with pytest.raises(ValidationError) as refused:
        api.schedule_row(TeamChore.objects.create(name="b", owner=bob), timing=every, owner=alice)
    assert "task_row_id" in refused.value.message_dict
    with pytest.raises(ValidationError):
        api.schedule_row(Chore.objects.create(name="c"), timing=every, owner=alice)
    with pytest.raises(ValidationError):
        api.schedule_row(ChoreBatch.objects.create(name="d"), timing=every, owner=admin_user)
    assert not Job.objects.exists()

    api.schedule_task(PRUNE, timing=every, owner=admin_user)
    api.schedule_row(TeamChore.objects.create(name="a", owner=alice), timing=every, owner=alice)
    api.schedule_row(ChoreBatch.objects.create(name="e"), timing=every)  # the app's own job
    assert Job.objects.count() == 3


def test_jobs_for_a_row_lists_only_the_jobs_the_viewer_may_see(
    alice: Any, bob: Any, vera: Any, admin_user: Any, django_user_model: Any
) -> None:
    row = Chore.objects.create(name="shared")
    for owner in (alice, bob):
        api.schedule_row(row, timing=api.Every("PT1H"), name=f"{owner}'s", owner=admin_user)
        Job.objects.filter(name=f"{owner}'s").update(owner=owner)

    def names(viewer: Any) -> list[str]:
        return [job.name for job in api.jobs_for_row(row, visible_to=viewer)]

    assert names(admin_user) == ["alice's", "bob's"]
    assert names(alice) == ["alice's"]
    assert names(vera) == []  # may view jobs, owns none of these
    nobody = django_user_model.objects.create_user("nobody", is_staff=True)
    Job.objects.filter(name="bob's").update(owner=nobody)
    assert names(nobody) == []  # owns one, but may not view jobs
    assert len(api.jobs_for_row(row)) == 2  # code without a viewer sees them all


def test_declarations_name_their_permission_and_owner_field_correctly() -> None:
    with pytest.raises(ValueError, match=r"app_label\.codename"):
        api.schedulable_task(name="tests.bad_permission", permission="send_reminders")
    with pytest.raises(FieldDoesNotExist):
        api.task_table(Chore, owner="owner")(lambda row, run: None)


# --- actions need the change permission ------------------------------------------------------


def test_a_view_only_user_changes_nothing_by_any_action_or_form(
    vera: Any, new_job: Callable[..., Job]
) -> None:
    as_vera = logged_in(vera)
    job = new_job(vera, name="hers")
    paused = new_job(vera, name="paused")
    controls.pause_job(job=paused, now=timezone.now(), reason="kept")
    queued = controls.run_job_now(job=job, now=timezone.now())
    failed = Execution.objects.create(
        job=job,
        task=NOOP,
        scheduled_for=timezone.now() - timedelta(hours=1),
        status=ExecutionStatus.FAILED,
    )
    before = dict(Execution.objects.values_list("pk", "status"))

    for action in (
        "run_now",
        "pause_jobs",
        "resume_jobs",
        "retry_failed_executions",
        "cancel_unfinished_executions",
        "delete_selected",
    ):
        as_vera.post(
            JOBS,
            {
                "action": action,
                "_selected_action": [job.pk, paused.pk],
                "apply": "yes",
                "reason": "mine",
                "post": "yes",
            },
        )
    for action, execution in (("cancel_executions", queued), ("retry_executions", failed)):
        as_vera.post(EXECUTIONS, {"action": action, "_selected_action": [execution.pk]})
    assert as_vera.post(f"{JOBS}{job.pk}/change/", form_data(name="renamed")).status_code == 403
    assert as_vera.post(f"{JOBS}add/", form_data(name="new")).status_code == 403
    assert as_vera.post(f"{JOBS}{job.pk}/delete/", {"post": "yes"}).status_code == 403

    assert dict(Execution.objects.values_list("pk", "status")) == before
    assert dict(Job.objects.values_list("name", "status")) == {
        "hers": JobStatus.ACTIVE,
        "paused": JobStatus.PAUSED,
    }
    assert not LogEntry.objects.exists()
    page = as_vera.get(EXECUTIONS).content.decode()
    assert "cancel_executions" not in page and "retry_executions" not in page


def test_cancelling_and_retrying_executions_is_logged(
    as_alice: Client, alice: Any, new_job: Callable[..., Job]
) -> None:
    job = new_job(alice)
    queued = controls.run_job_now(job=job, now=timezone.now())
    failed = Execution.objects.create(
        job=job,
        task=NOOP,
        scheduled_for=timezone.now() - timedelta(hours=1),
        status=ExecutionStatus.FAILED,
    )
    as_alice.post(EXECUTIONS, {"action": "cancel_executions", "_selected_action": [queued.pk]})
    as_alice.post(EXECUTIONS, {"action": "retry_executions", "_selected_action": [failed.pk]})
    statuses = dict(Execution.objects.values_list("pk", "status"))
    assert statuses == {queued.pk: ExecutionStatus.CANCELLED, failed.pk: ExecutionStatus.RETRY}
    logged = LogEntry.objects.filter(user=alice).values_list("object_id", "change_message")
    assert sorted(logged) == sorted([(str(queued.pk), "Cancelled."), (str(failed.pk), "Retried.")])


# --- deletes that reach a job's history, or a job through its row ---------------------------


def failed_run(job: Job) -> Execution:
    return Execution.objects.create(
        job=job,
        task=job.task,
        scheduled_for=timezone.now() - timedelta(hours=1),
        status=ExecutionStatus.FAILED,
        finished_at=timezone.now(),
    )


def test_deleting_a_job_takes_its_history_for_whoever_may_delete_the_job(
    as_alice: Client, alice: Any, admin_client: Client, new_job: Callable[..., Job], vera: Any
) -> None:
    hers, listed, anyones = new_job(alice), new_job(alice), new_job(alice)
    for job in (hers, listed, anyones):
        failed_run(job)

    assert logged_in(vera).post(f"{JOBS}{hers.pk}/delete/", {"post": "yes"}).status_code == 403
    assert as_alice.post(f"{JOBS}{hers.pk}/delete/", {"post": "yes"}).status_code == 302
    as_alice.post(
        JOBS, {"action": "delete_selected", "_selected_action": [listed.pk], "post": "yes"}
    )
    assert admin_client.post(f"{JOBS}{anyones.pk}/delete/", {"post": "yes"}).status_code == 302

    assert not Job.objects.exists() and not Execution.objects.exists()


def table_row_admin(model: Any) -> Any:
    """The admin a host project writes for its task table, with the engine's mixin."""
    from django.contrib import admin

    class RowAdmin(api.TaskTableAdmin, admin.ModelAdmin):
        pass

    return RowAdmin(model, admin.site)


def confirmation(user: Any, model: Any, rows: list[Any]) -> tuple[list[Any], set[str]]:
    from django.test import RequestFactory

    request = RequestFactory().post("/")
    request.user = user
    to_delete, _, perms_needed, _ = table_row_admin(model).get_deleted_objects(rows, request)
    return to_delete, set(perms_needed)


CHORE_DELETERS = ("change_chore", "delete_chore")


def test_deleting_a_row_lists_its_jobs_and_needs_delete_on_every_one(
    alice: Any, bob: Any, admin_user: Any, django_user_model: Any
) -> None:
    for user in (alice, bob):
        user.user_permissions.add(*Permission.objects.filter(codename__in=CHORE_DELETERS))
    alice, bob = (django_user_model.objects.get(pk=user.pk) for user in (alice, bob))
    every = api.Every("PT1H")
    row = Chore.objects.create(name="shared row")
    api.schedule_row(row, timing=every, name="alices-run", owner=alice)
    others = Chore.objects.create(name="with bob's job")
    api.schedule_row(others, timing=every, name="alices-too", owner=alice)
    api.schedule_row(others, timing=every, name="bobs-run", owner=bob)

    listed, refused = confirmation(alice, Chore, [row])
    assert refused == set()
    assert "Job: alices-run (and its history)" in str(listed)

    listed, refused = confirmation(alice, Chore, [others])
    assert refused == {"job"}  # bob's job would go with the row
    assert "alices-too" in str(listed) and "bobs-run" not in str(listed)  # his stays unnamed

    alice.user_permissions.remove(Permission.objects.get(codename="delete_job"))
    alice = django_user_model.objects.get(pk=alice.pk)  # permissions are cached per instance
    assert confirmation(alice, Chore, [row])[1] == {"job"}

    listed, refused = confirmation(admin_user, Chore, [others])
    assert refused == set() and "bobs-run" in str(listed)
    batch = ChoreBatch.objects.create(name="the app's own")
    api.schedule_row(batch, timing=every)
    assert confirmation(admin_user, ChoreBatch, [batch])[1] == set()  # goes with its row


def test_a_schedule_counts_only_the_jobs_its_viewer_may_see(
    as_alice: Client, alice: Any, bob: Any, admin_client: Client, new_job: Callable[..., Job]
) -> None:
    mine, his = new_job(alice, every="PT7M"), new_job(bob, every="PT7M")
    own_schedule = his.schedule
    Job.objects.filter(pk=his.pk).update(schedule=mine.schedule)  # one schedule, two owners
    own_schedule.delete()

    def count(client: Client) -> str:
        page = client.get("/admin/scheduling/schedule/").content.decode()
        return page.split('class="field-job_count">')[1].split("<")[0]

    assert count(as_alice) == "1"
    assert count(admin_client) == "2"


def test_the_dashboard_needs_the_view_permission_on_jobs_and_executions(
    django_user_model: Any, vera: Any, alice: Any, new_job: Callable[..., Job]
) -> None:
    failed_run(new_job(alice, name="alices-secret"))
    nobody = staff(django_user_model, "dan")
    jobs_only = staff(django_user_model, "jo", "view_job")
    for refused in (nobody, jobs_only):
        assert logged_in(refused).get("/dashboard/").status_code == 403
    assert 'id="duecourse-dashboard"' not in logged_in(jobs_only).get(JOBS).content.decode()
    assert logged_in(vera).get("/dashboard/").status_code == 200
    assert 'id="duecourse-dashboard"' in logged_in(vera).get(JOBS).content.decode()
    assert "alices-secret" in logged_in(alice).get("/dashboard/").content.decode()


def test_a_jobs_page_shows_its_executions_only_to_who_may_see_executions(
    django_user_model: Any, new_job: Callable[..., Job]
) -> None:
    owner = staff(django_user_model, "jo", "view_job")
    job = new_job(owner)
    Execution.objects.filter(pk=failed_run(job).pk).update(last_error="boom: the secret")
    url = f"{JOBS}{job.pk}/change/"
    assert "boom: the secret" not in logged_in(owner).get(url).content.decode()
    owner.user_permissions.add(Permission.objects.get(codename="view_execution"))
    assert "boom: the secret" in logged_in(owner).get(url).content.decode()
