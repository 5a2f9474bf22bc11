"""The jobs admin, server-side, through Django's test client.

A job is defined on one page (target from a dropdown, timing typed in place or shared); the
list answers "is it healthy?" in a fixed number of queries; actions call the services, report
counts and write the admin log; a staff user who is not a superuser reaches only their own
jobs and history, whatever URL or form field they craft.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.models import Execution, ExecutionStatus, Job, JobStatus, Schedule
from scheduling.stages import attempts, controls, selectors
from tests.factories import create_job

pytestmark = pytest.mark.django_db

NOOP = "scheduling.diagnostics.noop"
JOBS = "/admin/scheduling/job/"
EXECUTIONS = "/admin/scheduling/execution/"


def form_data(**overrides: Any) -> dict[str, Any]:
    """What the add form posts for a valid job running NOOP every ten minutes."""
    data: dict[str, Any] = {
        "name": "report",
        "note": "",
        "task": NOOP,
        "args": "[]",
        "kwargs": "{}",
        "task_row_id": "",
        "existing_schedule": "",
        "interval": "PT10M",
        "cron": "",
        "timezone": "UTC",
        "run_at_0": "",
        "run_at_1": "",
        "starts_at_0": "",
        "starts_at_1": "",
        "ends_at_0": "",
        "ends_at_1": "",
        "misfire": "catch_up",
        "overlap": "forbid",
        "jitter": "0",
        "timeout": "300",
        "max_retries": "3",
        "retry_backoff": "",
        "retry_backoff_max": "",
        "expires": "",
        "queue": "celery",
        "priority": "",
    }
    data.update(overrides)
    return data


def form_of(response: Any) -> Any:
    return response.context["adminform"].form


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    """A staff user (not a superuser) with every permission on the scheduling models."""
    user = django_user_model.objects.create_user("alice", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="scheduling"))
    return user


@pytest.fixture
def bob(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("bob", password="pw", is_staff=True)


@pytest.fixture
def as_alice(alice: Any) -> Client:
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def new_job() -> Callable[..., Job]:
    counter = iter(range(1, 1000))

    def make(owner: Any, **options: Any) -> Job:
        options.setdefault("name", f"job-{next(counter)}")
        options.setdefault("task", NOOP)
        if not {"every", "cron", "at", "schedule"} & options.keys():
            options["every"] = "PT10M"
        return create_job(owner=owner, now=timezone.now(), **options)

    return make


def finished(job: Job, status: str, *, ago: timedelta, retries: int = 0, lag: float = 2) -> Any:
    due = timezone.now() - ago
    return Execution.objects.create(
        job=job,
        task=job.task,
        scheduled_for=due,
        status=status,
        retry_count=retries,
        started_at=due + timedelta(seconds=lag),
        finished_at=due + timedelta(seconds=lag + 1),
    )


# --- the form --------------------------------------------------------------------------------


def test_the_target_is_a_dropdown_of_schedulable_tasks_and_task_tables(admin_client: Client):
    response = admin_client.get(f"{JOBS}add/")
    choices = dict(
        (value, label)
        for group, options in form_of(response).fields["task"].choices[1:]
        for value, label in options
    )
    assert NOOP in choices
    assert "table:tasktable_app.Chore" in choices
    assert "scheduling.run_task_row" not in choices  # reached through a task table instead


def test_a_job_is_made_with_a_cron_schedule_in_its_zone_on_its_own_page(
    admin_client: Client, admin_user: Any
) -> None:
    response = admin_client.post(
        f"{JOBS}add/",
        form_data(owner=admin_user.pk, interval="", cron="0 9 * * 1-5", timezone="Europe/Paris"),
    )
    assert response.status_code == 302, form_of(response).errors
    job = Job.objects.select_related("schedule").get(name="report")
    assert (job.schedule.cron, job.schedule.timezone) == ("0 9 * * 1-5", "Europe/Paris")
    assert job.next_due_at is not None
    assert job.next_due_at.astimezone(job.schedule.timing().zone).hour == 9
    page = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert "at 09:00, Monday through Friday (Europe/Paris)" in page


def test_bad_timing_is_refused_beside_its_field(admin_client: Client, admin_user: Any) -> None:
    response = admin_client.post(f"{JOBS}add/", form_data(owner=admin_user.pk, interval="PT0S"))
    assert "shorter than one second" in " ".join(form_of(response).errors["interval"])

    response = admin_client.post(
        f"{JOBS}add/", form_data(owner=admin_user.pk, interval="", cron="61 * * * *")
    )
    assert list(form_of(response).errors) == ["cron"]
    assert "61" in " ".join(form_of(response).errors["cron"])

    response = admin_client.post(f"{JOBS}add/", form_data(owner=admin_user.pk, task="", args="{}"))
    assert set(form_of(response).errors) == {"task", "args"}
    assert not Job.objects.exists() and not Schedule.objects.exists()


def test_a_typed_cron_expression_is_read_back_in_words(admin_client: Client, admin_user: Any):
    response = admin_client.post(
        f"{JOBS}add/", form_data(owner=admin_user.pk, cron="*/15 9-17 * * 1-5", name="")
    )
    form = form_of(response)
    assert "name" in form.errors and "interval" in form.errors  # two kinds given, no name
    page = response.content.decode()
    assert "Reads: every 15 minutes, between 09:00 and 17:59, Monday through Friday." in page


def test_a_task_table_target_needs_an_existing_row(admin_client: Client, admin_user: Any):
    response = admin_client.post(
        f"{JOBS}add/",
        form_data(owner=admin_user.pk, task="table:tasktable_app.Chore", task_row_id="999"),
    )
    assert "no tasktable_app.Chore row with id 999" in str(form_of(response).errors)
    assert not Job.objects.exists()


def test_jobs_can_share_an_existing_schedule(
    admin_client: Client, admin_user: Any, new_job: Callable[..., Job]
) -> None:
    first = new_job(admin_user, every="PT1H")
    response = admin_client.post(
        f"{JOBS}add/",
        form_data(owner=admin_user.pk, interval="", existing_schedule=first.schedule_id),
    )
    assert response.status_code == 302, form_of(response).errors
    assert Job.objects.get(name="report").schedule_id == first.schedule_id

    both = admin_client.post(
        f"{JOBS}add/",
        form_data(owner=admin_user.pk, name="x", existing_schedule=first.schedule_id),
    )
    assert "not both" in " ".join(form_of(both).errors["existing_schedule"])


def test_retiming_a_job_on_a_shared_schedule_gives_it_its_own_copy(
    admin_client: Client, admin_user: Any, new_job: Callable[..., Job]
) -> None:
    first = new_job(admin_user, every="PT1H")
    second = new_job(admin_user, schedule=first.schedule)
    execution = finished(second, ExecutionStatus.COMPLETED, ago=timedelta(minutes=5))
    data = form_data(owner=admin_user.pk, name=second.name, interval="PT5M")
    response = admin_client.post(f"{JOBS}{second.pk}/change/", data)
    assert response.status_code == 302, form_of(response).errors
    second.refresh_from_db()
    first.refresh_from_db()
    assert second.schedule.interval == "PT5M" and first.schedule.interval == "PT1H"
    assert Execution.objects.filter(pk=execution.pk, job=second).exists()  # history kept


def test_a_cron_job_retimed_to_an_interval_drops_its_zone(
    admin_client: Client, admin_user: Any, new_job: Callable[..., Job]
) -> None:
    """The zone left as it was goes with the cron expression; another one chosen with the
    interval is refused beside the zone, as ``--tz`` with ``--every`` is."""
    job = new_job(admin_user, cron="0 9 * * *", tz="Europe/Paris")
    data = form_data(owner=admin_user.pk, name=job.name, interval="PT5M", timezone="Asia/Tokyo")
    refused = admin_client.post(f"{JOBS}{job.pk}/change/", data)
    assert list(form_of(refused).errors) == ["timezone"]
    response = admin_client.post(f"{JOBS}{job.pk}/change/", {**data, "timezone": "Europe/Paris"})
    assert response.status_code == 302, form_of(response).errors
    schedule = Job.objects.get(pk=job.pk).schedule
    assert (schedule.interval, schedule.cron, schedule.timezone) == ("PT5M", "", "UTC")


# --- the list --------------------------------------------------------------------------------


def test_the_list_shows_each_jobs_health_without_a_query_per_row(
    admin_client: Client, admin_user: Any, new_job: Callable[..., Job]
) -> None:
    def queries_for_list() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(JOBS).status_code == 200
        return len(captured.captured_queries)

    sick = new_job(admin_user, name="sick")
    finished(sick, ExecutionStatus.FAILED, ago=timedelta(hours=2), retries=3)
    finished(sick, ExecutionStatus.FAILED, ago=timedelta(hours=30))
    few = queries_for_list()
    for _ in range(8):
        finished(new_job(admin_user), ExecutionStatus.COMPLETED, ago=timedelta(minutes=3))
    assert queries_for_list() == few

    row = selectors.with_health(Job.objects.filter(pk=sick.pk), now=timezone.now()).get()
    assert (row.last_status, row.last_retry_count, row.failures_24h) == ("failed", 3, 1)
    page = admin_client.get(JOBS).content.decode()
    assert "every 10 minutes" in page
    assert "failing" in page and "lag +2 s" in page


def test_filters_find_failing_late_and_paused_jobs(
    admin_client: Client, admin_user: Any, new_job: Callable[..., Job]
) -> None:
    healthy = new_job(admin_user, name="healthy")
    finished(healthy, ExecutionStatus.COMPLETED, ago=timedelta(minutes=1))
    failing = new_job(admin_user, name="failing")
    finished(failing, ExecutionStatus.FAILED, ago=timedelta(minutes=1))
    late = new_job(admin_user, name="late")
    Job.objects.filter(pk=late.pk).update(next_due_at=timezone.now() - timedelta(minutes=5))
    paused = new_job(admin_user, name="paused")
    controls.pause_job(job=paused, now=timezone.now(), reason="maintenance")

    def listed(health: str) -> set[str]:
        response = admin_client.get(JOBS, {"health": health})
        return {job.name for job in response.context["cl"].result_list}

    assert listed("failing") == {"failing"}
    assert listed("late") == {"late"}
    assert listed("paused") == {"paused"}
    with_counts = admin_client.get(JOBS, {"_facets": "True"}).content.decode()
    assert "Failing (last run failed or retrying) (1)" in with_counts


def test_a_jobs_page_shows_its_recent_executions_with_attempts(
    admin_client: Client, admin_user: Any, new_job: Callable[..., Job]
) -> None:
    job = new_job(admin_user)
    execution = controls.run_job_now(job=job, now=timezone.now())
    attempts.start_execution(execution_id=execution.pk, worker="w1", pid=1, now=timezone.now())
    attempts.fail_attempt(
        execution_id=execution.pk,
        now=timezone.now(),
        error="boom",
        outcome="failed",
        permanent=True,
    )
    page = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert "duecourse-executions" in page
    assert "#1 failed on w1" in page and "boom" in page


# --- actions ---------------------------------------------------------------------------------


def act(client: Client, action: str, *ids: int, **extra: str) -> Any:
    return client.post(JOBS, {"action": action, "_selected_action": list(ids), **extra})


def test_pause_asks_for_a_reason_and_is_logged(
    admin_client: Client, admin_user: Any, new_job: Callable[..., Job]
) -> None:
    job = new_job(admin_user)
    asked = act(admin_client, "pause_jobs", job.pk)
    assert asked.status_code == 200 and b'name="reason"' in asked.content
    assert Job.objects.get(pk=job.pk).status == JobStatus.ACTIVE

    missing = act(admin_client, "pause_jobs", job.pk, apply="yes", reason="")
    assert missing.status_code == 200 and Job.objects.get(pk=job.pk).status == JobStatus.ACTIVE

    done = act(admin_client, "pause_jobs", job.pk, apply="yes", reason="database upgrade")
    assert done.status_code == 302
    job.refresh_from_db()
    assert (job.status, job.pause_reason) == (JobStatus.PAUSED, "database upgrade")
    assert LogEntry.objects.get(object_id=str(job.pk)).change_message == (
        "Paused: database upgrade"
    )

    act(admin_client, "resume_jobs", job.pk)
    job.refresh_from_db()
    assert (job.status, job.pause_reason) == (JobStatus.ACTIVE, "")
    messages = [str(m) for m in admin_client.get(JOBS).context["messages"]]
    assert messages == ["1 job paused.", "1 job resumed."]


def test_a_jobs_page_offers_the_actions_that_apply_to_it_now(
    admin_client: Client, admin_user: Any, alice: Any, new_job: Callable[..., Job]
) -> None:
    job = new_job(admin_user)
    page = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert "job-action-run_now" in page and "job-action-pause_jobs" in page
    assert "job-action-resume_jobs" not in page
    controls.pause_job(job=job, now=timezone.now(), reason="r")
    page = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert "job-action-resume_jobs" in page and "job-action-pause_jobs" not in page

    alice.user_permissions.set(Permission.objects.filter(codename="view_job"))
    viewer = Client()
    viewer.force_login(alice)
    mine = new_job(alice)
    page = viewer.get(f"{JOBS}{mine.pk}/change/").content.decode()
    assert "job-action-" not in page
    act(viewer, "run_now", mine.pk)
    assert not Execution.objects.filter(job=mine).exists()


def test_run_now_retry_and_cancel_act_on_executions(
    admin_client: Client, admin_user: Any, new_job: Callable[..., Job], publish_under_prefix: str
) -> None:
    job = new_job(admin_user)
    act(admin_client, "run_now", job.pk)
    execution = Execution.objects.get(job=job)
    assert execution.status == ExecutionStatus.QUEUED  # published at once

    act(admin_client, "cancel_unfinished_executions", job.pk)
    assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.CANCELLED

    failed = finished(job, ExecutionStatus.FAILED, ago=timedelta(hours=1))
    act(admin_client, "retry_failed_executions", job.pk)
    failed.refresh_from_db()
    assert failed.status == ExecutionStatus.RETRY and failed.retry_at is not None
    logged = LogEntry.objects.filter(object_id=str(job.pk)).values_list("change_message", flat=True)
    assert len(logged) == 3


# --- ownership -------------------------------------------------------------------------------


def test_a_staff_user_sees_only_their_own_jobs_and_history(
    as_alice: Client, alice: Any, bob: Any, new_job: Callable[..., Job]
) -> None:
    mine = new_job(alice, name="mine")
    theirs = new_job(bob, name="theirs")
    controls.run_job_now(job=mine, now=timezone.now())
    other = controls.run_job_now(job=theirs, now=timezone.now())

    listed = as_alice.get(JOBS).context["cl"].result_list
    assert [job.name for job in listed] == ["mine"]
    history = as_alice.get(EXECUTIONS).context["cl"].result_list
    assert {e.job_id for e in history} == {mine.pk}
    for url in (
        f"{JOBS}{theirs.pk}/change/",
        f"{JOBS}{theirs.pk}/delete/",
        f"{JOBS}{theirs.pk}/history/",
        f"{EXECUTIONS}{other.pk}/change/",
    ):
        response = as_alice.get(url)
        assert response.status_code == 302 and response.url == "/admin/", url
    popup = as_alice.get(JOBS, {"_to_field": "id", "_popup": "1"})
    assert [job.name for job in popup.context["cl"].result_list] == ["mine"]
    found = as_alice.get(
        "/admin/autocomplete/",
        {"app_label": "scheduling", "model_name": "execution", "field_name": "job", "term": ""},
    ).json()
    assert [row["text"] for row in found["results"]] == ["mine"]


def test_a_staff_user_cannot_change_delete_or_act_on_another_owners_job(
    as_alice: Client, alice: Any, bob: Any, new_job: Callable[..., Job]
) -> None:
    theirs = new_job(bob, name="theirs")
    as_alice.post(f"{JOBS}{theirs.pk}/change/", form_data(name="stolen"))
    as_alice.post(f"{JOBS}{theirs.pk}/delete/", {"post": "yes"})
    for action in ("pause_jobs", "run_now", "cancel_unfinished_executions"):
        act(as_alice, action, theirs.pk, apply="yes", reason="mine now")
    act(as_alice, "delete_selected", theirs.pk, post="yes")
    theirs.refresh_from_db()
    assert (theirs.name, theirs.status, theirs.owner_id) == ("theirs", JobStatus.ACTIVE, bob.pk)
    assert not Execution.objects.filter(job=theirs).exists()
    assert not LogEntry.objects.exists()


def test_a_staff_users_new_job_is_theirs_whatever_the_form_says(
    as_alice: Client, alice: Any, bob: Any, new_job: Callable[..., Job]
) -> None:
    theirs = new_job(bob, name="theirs", every="PT1H")
    refused = as_alice.post(
        f"{JOBS}add/", form_data(interval="", existing_schedule=theirs.schedule_id)
    )
    assert "existing_schedule" in form_of(refused).errors
    made = as_alice.post(f"{JOBS}add/", form_data(owner=bob.pk, name="theirs"))
    assert made.status_code == 302
    job = Job.objects.get(name="theirs", owner=alice)
    assert Job.objects.filter(name="theirs").count() == 2
    again = as_alice.post(f"{JOBS}add/", form_data(name="theirs"))
    assert "already have a job named 'theirs'" in " ".join(form_of(again).errors["name"])
    assert job.owner_id == alice.pk


def test_a_staff_user_cannot_retime_a_schedule_shared_with_another_owner(
    as_alice: Client, alice: Any, bob: Any, new_job: Callable[..., Job]
) -> None:
    theirs = new_job(bob, name="theirs", every="PT1H")
    new_job(alice, name="mine", schedule=theirs.schedule)
    response = as_alice.post(
        f"/admin/scheduling/schedule/{theirs.schedule_id}/change/",
        {"name": "", "interval": "PT1S", "cron": "", "timezone": "UTC"},
    )
    assert response.status_code == 302  # Bob's schedule: not found for Alice, as his jobs are
    assert Schedule.objects.get(pk=theirs.schedule_id).interval == "PT1H"


def test_a_staff_user_cannot_cancel_or_retry_another_owners_executions(
    as_alice: Client, bob: Any, new_job: Callable[..., Job]
) -> None:
    theirs = new_job(bob, name="theirs")
    queued = controls.run_job_now(job=theirs, now=timezone.now())
    failed = finished(theirs, ExecutionStatus.FAILED, ago=timedelta(hours=1))
    for action, execution in (("cancel_executions", queued), ("retry_executions", failed)):
        as_alice.post(EXECUTIONS, {"action": action, "_selected_action": [execution.pk]})
    statuses = dict(Execution.objects.values_list("pk", "status"))
    assert statuses == {queued.pk: ExecutionStatus.PENDING, failed.pk: ExecutionStatus.FAILED}
