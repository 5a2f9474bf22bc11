"""The audit trail: every change of a job, from the admin, the command line and the API, is
recorded with who, when, where from and each field's from and to; ``jobs history`` prints it;
it outlives the job and goes only by its own retention."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.checks import Error
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from scheduling import api, checks, conf
from scheduling.models import Execution, Job, JobChange, Schedule
from scheduling.stages import attempts, audit, controls, retention
from tests.factories import create_job

pytestmark = pytest.mark.django_db

NOOP = "scheduling.diagnostics.noop"
JOBS = "/admin/scheduling/job/"
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


def form_data(**overrides: Any) -> dict[str, Any]:
    """What the admin's add form posts for a job running NOOP every ten minutes."""
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
        "pause_after_failures": "",
    }
    data.update(overrides)
    return data


def trail(job: Job) -> list[JobChange]:
    return list(JobChange.objects.filter(job=job).order_by("at", "id"))


def account() -> str:
    """The operating-system account of this process, by its real uid."""
    return pwd.getpwuid(os.getuid()).pw_name


def run(*argv: str) -> str:
    out = StringIO()
    call_command(*argv, stdout=out)
    return out.getvalue()


# --- the admin --------------------------------------------------------------------------------


def test_the_admin_records_creation_edits_pause_and_resume_by_the_signed_in_user(
    admin_client: Client, admin_user: Any
) -> None:
    made = admin_client.post(f"{JOBS}add/", form_data(owner=admin_user.pk))
    assert made.status_code == 302
    job = Job.objects.get(name="report")

    data = form_data(
        owner=admin_user.pk,
        interval="PT5M",
        max_retries="5",
        args="[1, 2]",
        pause_after_failures="3",
    )
    edited = admin_client.post(f"{JOBS}{job.pk}/change/", data)
    assert edited.status_code == 302
    admin_client.post(
        JOBS,
        {"action": "pause_jobs", "_selected_action": [job.pk], "apply": "yes", "reason": "upgrade"},
    )
    admin_client.post(JOBS, {"action": "resume_jobs", "_selected_action": [job.pk]})

    rows = trail(job)
    assert [(r.action, r.who, r.source) for r in rows] == [
        ("created", admin_user.username, "admin"),
        ("changed", admin_user.username, "admin"),
        ("paused", admin_user.username, "admin"),
        ("resumed", admin_user.username, "admin"),
    ]
    created, changed, paused, resumed = rows
    assert created.changes["interval"] == {"from": None, "to": "PT10M"}
    assert created.changes["task"] == {"from": None, "to": NOOP}
    assert created.changes["owner"] == {"from": None, "to": admin_user.username}
    assert changed.changes == {
        "interval": {"from": "PT10M", "to": "PT5M"},
        "max_retries": {"from": 3, "to": 5},
        "args": {"from": [], "to": [1, 2]},
        "pause_after_failures": {"from": None, "to": 3},
    }
    assert paused.changes == {
        "status": {"from": "active", "to": "paused"},
        "pause_reason": {"from": "", "to": "upgrade"},
        "pause_kind": {"from": "", "to": "manual"},
    }
    assert resumed.changes == {
        "status": {"from": "paused", "to": "active"},
        "pause_reason": {"from": "upgrade", "to": ""},
        "pause_kind": {"from": "manual", "to": ""},
    }


def test_a_save_that_changes_nothing_records_nothing(
    admin_client: Client, admin_user: Any
) -> None:
    admin_client.post(f"{JOBS}add/", form_data(owner=admin_user.pk))
    job = Job.objects.get(name="report")
    admin_client.post(f"{JOBS}{job.pk}/change/", form_data(owner=admin_user.pk))
    assert [r.action for r in trail(job)] == ["created"]


def posted_back(admin_client: Client, job: Job) -> dict[str, Any]:
    """What the job's change form shows, as the browser posts it back unchanged."""
    form = admin_client.get(f"{JOBS}{job.pk}/change/").context["adminform"].form
    data: dict[str, Any] = {}
    for name, field in form.fields.items():
        value = form[name].value()
        if hasattr(field.widget, "widgets"):  # a split date and time
            parts = value if isinstance(value, list) else field.widget.decompress(value)
            for i, part in enumerate(parts):
                data[f"{name}_{i}"] = "" if part is None else str(part)
        else:
            data[name] = "" if value is None else value
    return data


@pytest.mark.parametrize(
    "shape",
    [
        {},
        {"interval": "", "rrule": "FREQ=WEEKLY;BYDAY=MO"},
        {"interval": "", "cron": "0 9 * * 1-5", "timezone": "America/New_York", "jitter": "30"},
        {"kwargs": '{"b": 1, "a": [1, 2.50]}', "args": '[1.0, "x"]'},
        {"retry_backoff": "2.5", "retry_backoff_max": "60", "expires": "60", "priority": "3"},
    ],
)
def test_saving_the_form_as_shown_records_nothing(
    admin_client: Client, admin_user: Any, shape: dict[str, str]
) -> None:
    made = admin_client.post(f"{JOBS}add/", form_data(owner=admin_user.pk, **shape))
    assert made.status_code == 302
    job = Job.objects.get(name="report")
    saved = admin_client.post(f"{JOBS}{job.pk}/change/", posted_back(admin_client, job))
    assert saved.status_code == 302
    assert [r.action for r in trail(job)] == ["created"]


@pytest.mark.parametrize(
    "argv",
    [[], ["--every", "PT10M"], ["--max-retries", "3", "--queue", "celery"], ["--kwargs", "{}"]],
)
def test_jobs_edit_that_changes_nothing_records_nothing(admin_user: Any, argv: list[str]) -> None:
    run("jobs", "add", "report", "--task", NOOP, "--every", "PT10M")
    job = Job.objects.get(name="report")
    with contextlib.suppress(CommandError):  # nothing to change may be refused
        run("jobs", "edit", "report", *argv)
    assert [r.action for r in trail(job)] == ["created"]


def test_the_jobs_page_shows_its_trail_escaped(
    admin_client: Client, admin_user: Any, now: datetime
) -> None:
    job = create_job(owner=admin_user, name="report", task=NOOP, every="PT1H", now=now)
    api.edit(job.pk, note="<script>alert(1)</script>")
    page = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    section = page[page.index('class="duecourse-changes"') :]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section
    assert "<script>alert(1)" not in page
    assert "changed" in section and "created" in section


def test_only_users_who_may_view_the_job_see_its_trail(
    admin_user: Any, django_user_model: Any, now: datetime
) -> None:
    job = create_job(owner=admin_user, name="report", task=NOOP, every="PT1H", now=now)
    viewer = django_user_model.objects.create_user("viewer", is_staff=True, is_superuser=False)
    client = Client()
    client.force_login(viewer)
    assert client.get(f"{JOBS}{job.pk}/change/").status_code in (302, 403, 404)
    viewer.user_permissions.set(
        Permission.objects.filter(codename="view_job", content_type__app_label="scheduling")
    )
    mine = create_job(owner=viewer, name="mine", task=NOOP, every="PT1H", now=now)
    page = client.get(f"{JOBS}{mine.pk}/change/").content.decode()
    assert 'class="duecourse-changes"' in page
    assert client.get(f"{JOBS}{job.pk}/change/").status_code in (302, 403, 404)


def test_a_removed_jobs_trail_stays_with_its_name(admin_client: Client, admin_user: Any) -> None:
    admin_client.post(f"{JOBS}add/", form_data(owner=admin_user.pk))
    job = Job.objects.get(name="report")
    deleted = admin_client.post(f"{JOBS}{job.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302 and not Job.objects.filter(pk=job.pk).exists()
    rows = list(JobChange.objects.filter(job_name="report").order_by("at", "id"))
    assert [(r.action, r.job_id, r.who) for r in rows] == [
        ("created", None, admin_user.username),
        ("removed", None, admin_user.username),
    ]
    history = json.loads(run("jobs", "history", "report", "--json"))
    assert [h["action"] for h in history] == ["removed", "created"]


# --- the command line ---------------------------------------------------------------------------


def test_commands_record_the_operating_systems_user(admin_user: Any) -> None:
    me = account()
    run(
        "jobs", "add", "nightly", "--task", NOOP, "--every", "PT1H", "--pause-after-failures", "2"
    )
    run("jobs", "edit", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Paris", "--queue", "x")
    run("jobs", "edit", "nightly", "--pause-after-failures", "0")
    run("jobs", "pause", "nightly")
    run("jobs", "resume", "nightly")
    job = Job.objects.get(name="nightly")
    rows = trail(job)
    assert [(r.action, r.who, r.source) for r in rows] == [
        ("created", me, "command"),
        ("changed", me, "command"),
        ("changed", me, "command"),
        ("paused", me, "command"),
        ("resumed", me, "command"),
    ]
    assert rows[0].changes["pause_after_failures"] == {"from": None, "to": 2}
    assert rows[1].changes == {
        "interval": {"from": "PT1H", "to": ""},
        "cron": {"from": "", "to": "0 3 * * *"},
        "timezone": {"from": "UTC", "to": "Europe/Paris"},
        "queue": {"from": "celery", "to": "x"},
    }
    assert rows[2].changes == {"pause_after_failures": {"from": 2, "to": None}}


def test_pause_after_failures_below_zero_is_refused_naming_the_option() -> None:
    with pytest.raises(CommandError, match="--pause-after-failures"):
        run("jobs", "add", "x", "--task", NOOP, "--every", "PT1H", "--pause-after-failures", "-1")


def test_jobs_show_says_the_setting_and_the_count(admin_user: Any, now: datetime) -> None:
    create_job(
        owner=admin_user, name="report", task=NOOP, every="PT1H", now=now, pause_after_failures=3
    )
    Job.objects.filter(name="report").update(consecutive_failures=2)
    assert "pause after failures: 3 in a row (2 so far)" in run("jobs", "show", "report")
    shown = json.loads(run("jobs", "show", "report", "--json"))
    assert (shown["pause_after_failures"], shown["consecutive_failures"]) == (3, 2)


def test_jobs_history_prints_the_trail_newest_first(admin_user: Any) -> None:
    run("jobs", "add", "nightly", "--task", NOOP, "--every", "PT1H")
    run("jobs", "edit", "nightly", "--max-retries", "7")
    job = Job.objects.get(name="nightly")
    at = datetime(2031, 2, 3, 4, 5, 6, 789, tzinfo=UTC)
    JobChange.objects.filter(job=job, action="changed").update(at=at)
    text = run("jobs", "history", "nightly").splitlines()
    me = account()
    assert text[0] == f"2031-02-03 04:05:06 UTC changed by {me} (command)"
    assert text[1] == "  max_retries: 3 -> 7"
    assert text[2].endswith(f"UTC created by {me} (command)")
    assert '  task: - -> "scheduling.diagnostics.noop"' in text

    listed = json.loads(run("jobs", "history", "nightly", "--json"))
    assert [row["action"] for row in listed] == ["changed", "created"]
    assert listed[0] == {
        "id": listed[0]["id"],
        "job_id": job.pk,
        "job": "nightly",
        "at": "2031-02-03T04:05:06.000789+00:00",
        "who": me,
        "source": "command",
        "action": "changed",
        "changes": {"max_retries": {"from": 3, "to": 7}},
    }


def test_jobs_history_of_an_unknown_job_names_the_field() -> None:
    with pytest.raises(CommandError, match="name"):
        run("jobs", "history", "nothing-by-that-name")


# --- the API --------------------------------------------------------------------------------------


def test_the_api_records_the_user_it_is_given_or_system(admin_user: Any) -> None:
    made = api.schedule_task(NOOP, timing=api.Every("PT1H"), name="from-code", by=admin_user)
    api.edit(made, max_retries=1, timing=api.Every("PT2H"))
    api.pause(made, reason="quiet", by=admin_user)
    api.resume(made)
    rows = trail(Job.objects.get(pk=made.id))
    assert [(r.action, r.who, r.source) for r in rows] == [
        ("created", admin_user.username, "api"),
        ("changed", "system", "api"),
        ("paused", admin_user.username, "api"),
        ("resumed", "system", "api"),
    ]
    assert rows[1].changes == {
        "interval": {"from": "PT1H", "to": "PT2H"},
        "max_retries": {"from": 3, "to": 1},
    }
    assert [h["action"] for h in api.history(made)] == ["resumed", "paused", "changed", "created"]


def test_a_large_value_is_kept_cut_to_its_bound(admin_user: Any) -> None:
    big = ["x" * 100] * 50
    made = api.schedule_task(NOOP, timing=api.Every("PT1H"), args=big, name="big")
    [created] = trail(Job.objects.get(pk=made.id))
    kept = created.changes["args"]["to"]
    assert isinstance(kept, str) and len(kept) < audit.MAX_VALUE_CHARS + 50
    assert kept.endswith(f"… ({len(json.dumps(big, sort_keys=True))} characters in all)")


def test_a_refused_change_records_nothing(admin_user: Any, now: datetime) -> None:
    job = create_job(owner=admin_user, name="report", task=NOOP, every="PT1H", now=now)
    with pytest.raises(ValidationError):
        api.edit(job.pk, timeout=0)
    assert [r.action for r in trail(job)] == ["created"]


# --- what is done to a job's timing and executions ----------------------------------------------

SCHEDULES = "/admin/scheduling/schedule/"
EXECUTIONS = "/admin/scheduling/execution/"


def schedule_form(schedule: Schedule, **overrides: Any) -> dict[str, Any]:
    """What the Schedules page posts for ``schedule`` as it is, with ``overrides``."""
    data: dict[str, Any] = {
        "owner": schedule.owner_id,
        "name": schedule.name,
        "interval": schedule.interval,
        "cron": schedule.cron,
        "rrule": schedule.rrule,
        "timezone": schedule.timezone,
        "run_at_0": "",
        "run_at_1": "",
        "starts_at_0": "",
        "starts_at_1": "",
        "ends_at_0": "",
        "ends_at_1": "",
    }
    data.update(overrides)
    return data


def failed_execution(job: Job, *, hours_ago: int = 1) -> Execution:
    due = timezone.now() - timedelta(hours=hours_ago)
    return Execution.objects.create(
        job=job, task=job.task, scheduled_for=due, status="failed", finished_at=due
    )


def test_an_edit_on_the_schedules_page_is_on_the_record_of_every_job_it_moves(
    admin_client: Client, admin_user: Any
) -> None:
    """A schedule two jobs share moves both: each job's trail names the user, the timing
    from and to, and where its next occurrence went."""
    shared = Schedule.objects.create(owner=admin_user, name="nightly", cron="0 3 * * *")
    made = timezone.now()
    first = create_job(owner=admin_user, name="first", task=NOOP, schedule=shared, now=made)
    second = create_job(owner=admin_user, name="second", task=NOOP, schedule=shared, now=made)
    saved = admin_client.post(
        f"{SCHEDULES}{shared.pk}/change/", schedule_form(shared, cron="0 5 * * *")
    )
    assert saved.status_code == 302
    for job in (first, second):
        before = job.next_due_at
        job.refresh_from_db()
        assert job.next_due_at is not None and job.next_due_at.hour == 5
        [replanned] = [r for r in trail(job) if r.action == "replanned"]
        assert (replanned.who, replanned.source) == (admin_user.username, "admin")
        assert replanned.changes == {
            "cron": {"from": "0 3 * * *", "to": "0 5 * * *"},
            "next_due_at": {"from": before.isoformat(), "to": job.next_due_at.isoformat()},
        }
    assert "replanned by admin (admin)" in run("jobs", "history", "first")


def test_a_schedules_page_save_that_changes_no_timing_records_nothing(
    admin_client: Client, admin_user: Any
) -> None:
    shared = Schedule.objects.create(owner=admin_user, name="nightly", cron="0 3 * * *")
    job = create_job(owner=admin_user, name="first", task=NOOP, schedule=shared, now=timezone.now())
    admin_client.post(f"{SCHEDULES}{shared.pk}/change/", schedule_form(shared, name="renamed"))
    assert [r.action for r in trail(job)] == ["created"]


def test_run_now_cancel_retry_and_backfill_in_the_admin_are_on_the_record(
    admin_client: Client, admin_user: Any
) -> None:
    job = create_job(owner=admin_user, name="report", task=NOOP, every="PT1H", now=timezone.now())
    admin_client.post(JOBS, {"action": "run_now", "_selected_action": [job.pk]})
    [ran] = Execution.objects.filter(job=job)  # published: queued (pending without a broker)
    admin_client.post(
        JOBS, {"action": "cancel_unfinished_executions", "_selected_action": [job.pk]}
    )
    failed, other = failed_execution(job, hours_ago=2), failed_execution(job, hours_ago=3)
    admin_client.post(EXECUTIONS, {"action": "retry_executions", "_selected_action": [failed.pk]})
    admin_client.post(EXECUTIONS, {"action": "cancel_executions", "_selected_action": [failed.pk]})
    admin_client.post(
        JOBS, {"action": "retry_failed_executions", "_selected_action": [job.pk]}
    )
    start = job.created_at - timedelta(hours=3, minutes=1)
    span = {"start": start.isoformat(), "end": (job.created_at - timedelta(minutes=1)).isoformat()}
    admin_client.post(
        JOBS, {"action": "backfill_jobs", "_selected_action": [job.pk], "apply": "Backfill", **span}
    )

    rows = trail(job)[1:]
    assert {(r.who, r.source) for r in rows} == {(admin_user.username, "admin")}
    reason = f"cancelled in the admin by {admin_user.username}"
    assert [(r.action, r.changes) for r in rows[:5]] == [
        ("run_now", {f"execution {ran.pk}": {"from": None, "to": "pending"}}),
        (
            "cancelled",
            {
                f"execution {ran.pk}": {"from": ran.status, "to": "cancelled"},
                "reason": {"from": None, "to": reason},
            },
        ),
        ("retried", {f"execution {failed.pk}": {"from": "failed", "to": "retry"}}),
        (
            "cancelled",
            {
                f"execution {failed.pk}": {"from": "retry", "to": "cancelled"},
                "reason": {"from": None, "to": reason},
            },
        ),
        ("retried", {f"execution {other.pk}": {"from": "failed", "to": "retry"}}),
    ]
    backfilled = rows[5]
    assert backfilled.action == "backfilled" and len(rows) == 6
    assert backfilled.changes["occurrences"] == {"from": None, "to": 3}
    assert backfilled.changes["start"] == {"from": None, "to": start.isoformat()}
    page = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    section = page[page.index('class="duecourse-changes"') :]
    for action in ("run_now", "cancelled", "retried", "backfilled"):
        assert f'class="change-{action}"' in section


def test_a_dry_run_and_a_backfill_that_makes_nothing_record_nothing(
    admin_user: Any, now: datetime
) -> None:
    job = create_job(owner=admin_user, name="report", task=NOOP, every="PT1H", now=now)
    span = {"start": now - 3 * HOUR - MINUTE, "end": now - MINUTE}
    api.backfill(job.pk, now=now, dry_run=True, **span)
    assert [r.action for r in trail(job)] == ["created"]
    api.backfill(job.pk, now=now, by="carol", **span)
    api.backfill(job.pk, now=now, by="carol", **span)  # every occurrence is held now
    assert [(r.action, r.who) for r in trail(job)] == [
        ("created", "system"),
        ("backfilled", "carol"),
    ]


def test_a_person_s_pause_and_the_failure_counter_s_say_who_paused_and_why(
    admin_user: Any,
) -> None:
    now = timezone.now()  # the API's verbs read the clock
    job = create_job(
        owner=admin_user, name="charge", task=NOOP, every="PT1H", now=now,
        max_retries=0, pause_after_failures=1,
    )
    api.pause(job.pk, reason="card processor upgrade", by=admin_user)
    api.resume(job.pk, by=admin_user)
    later = timezone.now()
    running = controls.run_job_now(job=job, now=later)
    assert attempts.start_execution(execution_id=running.pk, worker="w", pid=1, now=later)
    attempts.fail_attempt(execution_id=running.pk, error="boom", outcome="failed", now=later)
    job.refresh_from_db()
    manual, _, _, by_counter = trail(job)[1:]  # paused, resumed, run now, paused
    assert (manual.who, manual.source) == (admin_user.username, "api")
    assert manual.changes["pause_kind"] == {"from": "", "to": "manual"}
    assert manual.changes["pause_reason"]["to"] == "card processor upgrade"
    assert (by_counter.action, by_counter.who, by_counter.source) == ("paused", "system", "system")
    assert by_counter.changes["pause_kind"] == {"from": "", "to": "failures"}
    assert by_counter.changes["pause_reason"]["to"] == job.pause_reason
    assert job.pause_reason.startswith("paused after 1 failed occurrences in a row")
    api.resume(job.pk)
    [*_, resumed] = trail(job)
    assert resumed.changes["pause_kind"] == {"from": "failures", "to": ""}


# --- the command line's identity ----------------------------------------------------------------


def test_the_command_line_records_the_account_of_its_real_uid_not_logname(
    admin_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "alice-from-the-environment")
    run("jobs", "add", "nightly", "--task", NOOP, "--every", "PT1H")
    run("jobs", "edit", "nightly", "--max-retries", "1")
    job = Job.objects.get(name="nightly")
    assert {(r.who, r.source) for r in trail(job)} == {(account(), "command")}


def test_by_names_the_django_user_beside_the_account_on_every_change(
    admin_user: Any, django_user_model: Any
) -> None:
    django_user_model.objects.create_user("alice")
    by = ("--by", "alice")
    run("jobs", "add", "nightly", "--task", NOOP, "--every", "PT1H", *by)
    run("jobs", "edit", "nightly", "--cron", "0 3 * * *", *by)
    run("jobs", "pause", "nightly", *by)
    run("jobs", "resume", "nightly", *by)
    run("jobs", "run", "nightly", *by)
    job = Job.objects.get(name="nightly")
    start = (job.created_at - timedelta(days=2)).isoformat()
    end = (job.created_at - timedelta(hours=1)).isoformat()
    run("jobs", "backfill", "nightly", "--from", start, "--to", end, *by)
    run("jobs", "remove", "nightly", *by)
    rows = list(JobChange.objects.filter(job_name="nightly").order_by("at", "id"))
    assert [r.action for r in rows] == [
        "created", "changed", "paused", "resumed", "run_now", "backfilled", "removed",
    ]
    assert {(r.who, r.source) for r in rows} == {(f"alice (os: {account()})", "command")}
    history = json.loads(run("jobs", "history", "nightly", "--json"))
    assert history[0]["who"] == f"alice (os: {account()})"


@pytest.mark.parametrize(
    "argv",
    [
        ("jobs", "add", "nightly", "--task", NOOP, "--every", "PT1H"),
        ("jobs", "pause", "existing"),
        ("jobs", "run", "existing"),
        ("jobs", "backfill", "existing", "--from", "2020-01-01T00Z", "--to", "2020-01-02T00Z"),
        ("import_beat",),
    ],
)
def test_by_a_user_who_is_not_an_active_user_is_refused_in_one_line(
    admin_user: Any, django_user_model: Any, argv: tuple[str, ...], now: datetime
) -> None:
    create_job(owner=admin_user, name="existing", task=NOOP, every="PT1H", now=now)
    django_user_model.objects.create_user("gone", is_active=False)
    before = JobChange.objects.count(), Execution.objects.count()
    for name in ("nobody", "gone"):
        with pytest.raises(CommandError) as caught:
            run(*argv, "--by", name)
        assert str(caught.value) == f"--by: no active user named {name!r}"
    assert (JobChange.objects.count(), Execution.objects.count()) == before


# --- changes from code -------------------------------------------------------------------------


def test_every_verb_of_the_api_takes_who_acts_as_a_user_or_a_username(
    admin_user: Any, now: datetime
) -> None:
    job = api.schedule_task(NOOP, timing=api.Every("PT1H"), name="from-code", by="billing-sync")
    execution_id = api.run_now(job, by=admin_user)
    api.cancel(job, reason="superseded", by="billing-sync")
    api.edit(job, max_retries=1, by="billing-sync")
    api.pause(job, by="billing-sync")
    api.resume(job, by=admin_user)
    api.unschedule(job, by="billing-sync")
    rows = list(JobChange.objects.filter(job_name="from-code").order_by("at", "id"))
    assert [(r.action, r.who, r.source) for r in rows] == [
        ("created", "billing-sync", "api"),
        ("run_now", admin_user.username, "api"),
        ("cancelled", "billing-sync", "api"),
        ("changed", "billing-sync", "api"),
        ("paused", "billing-sync", "api"),
        ("resumed", admin_user.username, "api"),
        ("removed", "billing-sync", "api"),
    ]
    assert rows[2].changes[f"execution {execution_id}"]["to"] == "cancelled"


def test_the_api_without_by_records_system_as_before(admin_user: Any) -> None:
    job = api.schedule_task(NOOP, timing=api.Every("PT1H"), name="from-code")
    api.run_now(job)
    api.cancel(job)
    rows = trail(Job.objects.get(pk=job.id))
    assert {(r.who, r.source) for r in rows} == {("system", "api")}
    assert [r.action for r in rows] == ["created", "run_now", "cancelled"]


@pytest.mark.parametrize("by", ["", "  ", "two\nlines", "x" * 151, 42])
def test_a_by_the_trail_cannot_hold_is_refused_naming_by(admin_user: Any, by: Any) -> None:
    job = api.schedule_task(NOOP, timing=api.Every("PT1H"), name="from-code")
    with pytest.raises(ValidationError) as caught:
        api.pause(job, by=by)
    assert set(caught.value.message_dict) == {"by"}
    assert api.job(job).status == "active"


# --- retention --------------------------------------------------------------------------------


def aged(job: Job, days: int) -> JobChange:
    return JobChange.objects.create(
        job=job,
        job_name=job.name,
        at=timezone.now() - days * DAY,
        who="someone",
        source="admin",
        action="changed",
        changes={"note": {"from": "", "to": f"{days} days ago"}},
    )


def test_prune_history_prunes_the_trail_by_its_own_setting_only(
    admin_user: Any, settings: Any
) -> None:
    settings.SCHEDULING_AUDIT_RETENTION = 30
    job = create_job(owner=admin_user, name="report", task=NOOP, every="PT1H", now=timezone.now())
    old, recent = aged(job, 40), aged(job, 20)
    execution = Execution.objects.create(
        job=job, task=NOOP, scheduled_for=timezone.now() - 40 * DAY, status="completed"
    )
    out = json.loads(run("prune_history", "--older-than", "3650d", "--keep-last", "0", "--json"))
    assert out["audit_changes"] == 1 and out["audit_retention_days"] == 30
    assert not JobChange.objects.filter(pk=old.pk).exists()
    assert JobChange.objects.filter(pk=recent.pk).exists()
    assert Execution.objects.filter(pk=execution.pk).exists()  # executions keep their own age

    # --older-than reaches executions, never the trail.
    run("prune_history", "--older-than", "1d", "--keep-last", "0")
    assert not Execution.objects.filter(pk=execution.pk).exists()
    assert JobChange.objects.filter(pk=recent.pk).exists()


def test_a_dry_run_counts_old_changes_and_deletes_none(admin_user: Any, settings: Any) -> None:
    settings.SCHEDULING_AUDIT_RETENTION = 30
    job = create_job(owner=admin_user, name="report", task=NOOP, every="PT1H", now=timezone.now())
    old = aged(job, 40)
    out = json.loads(run("prune_history", "--older-than", "1d", "--dry-run", "--json"))
    assert out["audit_changes"] == 1
    assert JobChange.objects.filter(pk=old.pk).exists()


def test_a_trail_without_retention_is_kept_forever(admin_user: Any, settings: Any) -> None:
    settings.SCHEDULING_AUDIT_RETENTION = None
    job = create_job(owner=admin_user, name="report", task=NOOP, every="PT1H", now=timezone.now())
    ancient = aged(job, 5000)
    text = run("prune_history", "--older-than", "1d")
    assert "audit trail kept forever" in text
    assert JobChange.objects.filter(pk=ancient.pk).exists()


def test_the_default_retention_is_a_year(admin_user: Any) -> None:
    job = create_job(owner=admin_user, name="report", task=NOOP, every="PT1H", now=timezone.now())
    old, kept = aged(job, 400), aged(job, 300)
    report = retention.prune_history(older_than=DAY, keep_last=0, now=timezone.now())
    assert report.audit_changes == 1
    assert not JobChange.objects.filter(pk=old.pk).exists()
    assert JobChange.objects.filter(pk=kept.pk).exists()


@pytest.mark.parametrize("value", [0, "soon", -3, 10**9])
def test_a_bad_retention_is_refused_by_the_check(settings: Any, value: Any) -> None:
    settings.SCHEDULING_AUDIT_RETENTION = value
    [message] = checks.check_settings()
    assert isinstance(message, Error) and message.id == "scheduling.E008"
    assert message.msg.startswith(f"SCHEDULING_AUDIT_RETENTION = {value!r} ")
    with pytest.raises(ImproperlyConfigured):
        conf.get("AUDIT_RETENTION")


def test_a_retention_may_be_given_as_a_timedelta(settings: Any) -> None:
    settings.SCHEDULING_AUDIT_RETENTION = timedelta(days=90)
    assert checks.check_settings() == []
    assert conf.get("AUDIT_RETENTION") == timedelta(days=90)


# --- in a real browser ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_operator_reads_the_trail_on_the_jobs_page(page: Any, admin_user: Any) -> None:
    job = create_job(owner=admin_user, name="report", task=NOOP, every="PT1H", now=timezone.now())
    api.edit(job.pk, note="<b>not bold</b>", max_retries=5, by=admin_user)
    page.goto(f"{page.base}{JOBS}{job.pk}/change/")
    page.get_by_text("Changes", exact=True).click()
    table = page.locator("table.duecourse-changes")
    table.wait_for()
    rows = table.locator("tbody tr")
    assert rows.count() == 2
    first = rows.nth(0).inner_text()
    assert "changed" in first and admin_user.username in first and "api" in first
    assert 'max_retries: 3 → 5' in first
    assert 'note: "" → "<b>not bold</b>"' in first  # shown as text, never as markup
    assert table.locator("b").count() == 0
    assert "created" in rows.nth(1).inner_text()
    assert page.csp_violations == []


def test_a_pause_with_no_reason_records_the_status_alone(admin_user: Any) -> None:
    now = timezone.now()
    job = create_job(owner=admin_user, name="quiet", task=NOOP, every="PT1H", now=now)
    assert controls.pause_job(job=job, now=now, reason="", by=audit.Actor.user(admin_user))
    paused = JobChange.objects.get(job=job, action="paused")
    assert "pause_reason" not in paused.changes
    assert paused.changes["status"] == {"from": "active", "to": "paused"}
