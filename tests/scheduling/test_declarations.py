"""Schedules declared in code: ``beat_schedule`` and ``SCHEDULING_JOBS`` reconciled with the ledger.

In-process specifications of the one service (``scheduling.stages.declarations``) and its doors
(``manage.py jobs sync``, ``manage.py check``, the admin, the command line's and the API's
edits); the real schedulers and workers are in ``test_declarations_processes.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import crontab, schedule, solar
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduling import api
from scheduling.checks import check_declarations
from scheduling.models import ChangeSource, DeclarationSet, DeclaredIn, Job, JobChange, JobStatus
from scheduling.rules.registry import CELERY_TASK_RUNNER
from scheduling.stages import declarations, jobs, reconciliation
from scheduling.timing.beat_schedules import Unmappable, timing_of
from tests.conftest import celery_settings
from tests.factories import create_job
from tests.scheduling.code_tasks import PLAIN_TASK

pytestmark = [pytest.mark.django_db, pytest.mark.specification]

NOOP = "scheduling.diagnostics.noop"
NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
BERLIN = ZoneInfo("Europe/Berlin")


@pytest.fixture
def app() -> Any:
    from config.celery import app

    return app


@pytest.fixture
def beat(app: Any) -> Iterator[Any]:
    """Set the Celery app's ``beat_schedule`` for one test (``beat(entries)``)."""

    def put(entries: dict[str, Any]) -> None:
        app.conf["beat_schedule"] = app.conf["CELERY_BEAT_SCHEDULE"] = entries

    with celery_settings(app, beat_schedule={}):
        yield put


def a_solar(event: str, lat: float, lon: float) -> solar:
    """A solar schedule as a project declares it (made without ``ephem``, which Celery needs
    only to compute its times)."""
    found = solar.__new__(solar)
    found.event, found.lat, found.lon = event, lat, lon
    return found


def sync(**options: Any) -> reconciliation.Report:
    return reconciliation.reconcile(now=options.pop("now", NOW), apply=True, **options)


# --- translation of each schedule kind -----------------------------------------------------


def test_a_number_of_seconds_and_a_timedelta_become_intervals() -> None:
    assert timing_of(30, app_zone=UTC) == {"every": "PT30S"}
    assert timing_of(timedelta(hours=2), app_zone=UTC) == {"every": "PT7200S"}
    assert timing_of(schedule(run_every=timedelta(minutes=5)), app_zone=UTC) == {"every": "PT300S"}


def test_a_crontab_is_read_in_the_apps_zone() -> None:
    assert timing_of(crontab(minute="*/15", hour=[9, 17]), app_zone=BERLIN) == {
        "cron": "*/15 9,17 * * *",
        "tz": "Europe/Berlin",
    }


def test_a_crontab_with_its_own_nowfun_is_read_in_that_zone() -> None:
    own = crontab(minute=0, hour=6, nowfun=lambda: datetime.now(ZoneInfo("Asia/Tokyo")))
    assert timing_of(own, app_zone=BERLIN) == {"cron": "0 6 * * *", "tz": "Asia/Tokyo"}


def test_a_custom_schedule_object_the_engine_can_express_is_read_by_its_interval() -> None:
    class every_ten_minutes(schedule):
        def __init__(self) -> None:
            super().__init__(run_every=timedelta(minutes=10))

    assert timing_of(every_ten_minutes(), app_zone=UTC) == {"every": "PT600S"}


def test_a_solar_schedule_and_a_fraction_of_a_second_are_refused_with_the_reason() -> None:
    with pytest.raises(Unmappable, match=r"solar schedules .* have no equivalent"):
        timing_of(a_solar("sunset", 52.5, 13.4), app_zone=UTC)
    with pytest.raises(Unmappable, match="not a whole number of seconds"):
        timing_of(0.5, app_zone=UTC)
    with pytest.raises(Unmappable, match="a object cannot be expressed"):
        timing_of(object(), app_zone=UTC)


def test_a_beat_entry_becomes_a_job_named_after_its_key_with_its_options(beat: Any) -> None:
    beat(
        {
            "nightly": {
                "task": NOOP,
                "schedule": crontab(minute=30, hour=2),
                "args": (1, "a"),
                "kwargs": {"k": 2},
                "options": {"queue": "reports", "priority": 5, "expires": 60, "time_limit": 90},
            }
        }
    )
    report = sync()
    assert [c.action for c in report.changes] == ["created"]
    job = Job.objects.select_related("schedule", "owner").get(name="nightly")
    assert (job.declared_in, job.declared_key, job.task) == ("beat_schedule", "nightly", NOOP)
    assert (job.args, job.kwargs, job.queue, job.priority, job.expires, job.timeout) == (
        [1, "a"],
        {"k": 2},
        "reports",
        5,
        60,
        90,
    )
    assert (job.schedule.cron, job.schedule.timezone, job.misfire) == (
        "30 2 * * *",
        "UTC",
        "coalesce",
    )
    assert job.owner.get_username() == jobs.SYSTEM_OWNER


def test_a_plain_celery_task_runs_through_the_runner_and_its_arguments_are_bound(beat: Any) -> None:
    """The code is the project's own: any registered task, its arguments checked against it."""
    beat({"plain": {"task": PLAIN_TASK, "schedule": 10, "args": ["x"]}})
    sync()
    job = Job.objects.get(name="plain")
    assert (job.task, job.declared_task, job.args) == (CELERY_TASK_RUNNER, PLAIN_TASK, ["x"])
    beat({"plain": {"task": PLAIN_TASK, "schedule": 10, "args": ["x", "y"]}})
    report = sync()
    assert [c.action for c in report.changes] == ["refused"]
    assert "tick() takes 1 positional argument but 2 were given" in report.changes[0].reason


def test_an_unknown_task_and_a_solar_entry_are_refused_and_the_rest_applied(beat: Any) -> None:
    beat(
        {
            "ok": {"task": NOOP, "schedule": 60},
            "sun": {"task": NOOP, "schedule": a_solar("sunrise", 1, 2)},
            "ghost": {"task": "no.such.task", "schedule": 60},
        }
    )
    report = sync()
    lines = sorted(c.line for c in report.refused)
    assert lines[0].startswith("refused   beat_schedule['ghost']: task: 'no.such.task' is not")
    assert lines[1].startswith("refused   beat_schedule['sun']: schedule: solar schedules")
    assert list(Job.objects.values_list("name", flat=True)) == ["ok"]


# --- SCHEDULING_JOBS: validated as jobs add validates ---------------------------------------


def test_scheduling_jobs_take_every_option_of_jobs_add(settings: Any, beat: Any) -> None:
    settings.SCHEDULING_JOBS = {
        "report": {
            "task": NOOP,
            "cron": "0 9 * * 1-5",
            "tz": "Europe/Berlin",
            "kwargs": {"period": "day"},
            "overlap": "buffer_one",
            "misfire": "skip",
            "max_retries": 0,
            "timeout": 120,
            "max_running": 2,
            "pause_after_failures": 3,
            "jitter": timedelta(seconds=5),
            "queue": "reports",
        }
    }
    sync()
    job = Job.objects.select_related("schedule").get(name="report")
    assert job.declared_in == DeclaredIn.SCHEDULING_JOBS
    assert (job.schedule.cron, job.schedule.timezone) == ("0 9 * * 1-5", "Europe/Berlin")
    assert (job.overlap, job.misfire, job.max_retries, job.timeout) == (
        "buffer_one",
        "skip",
        0,
        120,
    )
    assert (job.max_running, job.pause_after_failures, job.jitter) == (2, 3, timedelta(seconds=5))


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"task": NOOP, "every": "PT1M", "max_retries": -1}, "--max-retries: '-1' is not a whole"),
        ({"task": NOOP, "every": "PT1M", "misfire": "often"}, "--misfire: invalid choice: 'often'"),
        ({"task": NOOP}, "--every: one of --every, --cron, --at, --rrule is required"),
        ({"task": NOOP, "every": "PT1M", "tz": "Europe/Paris"}, "timezone (--tz):"),
        ({"task": NOOP, "every": "PT1M", "colour": "red"}, "'colour' is not an option of jobs add"),
        ({"task": NOOP, "every": "PT1M", "args": [1, 2, 3], "queue": "amq.x"}, "queue: 'amq.x'"),
    ],
)
def test_a_scheduling_jobs_entry_is_refused_naming_the_entry_and_the_option(
    settings: Any, beat: Any, options: dict[str, Any], reason: str
) -> None:
    settings.SCHEDULING_JOBS = {"bad": options}
    report = sync()
    assert [c.action for c in report.changes] == ["refused"]
    assert report.changes[0].line.startswith("refused   SCHEDULING_JOBS['bad']: ")
    assert reason in report.changes[0].line
    assert not Job.objects.exists()


# --- reconciliation -------------------------------------------------------------------------


def test_a_second_sync_changes_nothing(settings: Any, beat: Any) -> None:
    settings.SCHEDULING_JOBS = {"a": {"task": NOOP, "every": "PT1M"}}
    beat({"b": {"task": NOOP, "schedule": crontab(minute=5)}})
    sync()
    trail = JobChange.objects.count()
    again = sync(now=NOW + timedelta(hours=1))
    assert [c.action for c in again.changes] == ["unchanged", "unchanged"]
    assert JobChange.objects.count() == trail


def test_a_changed_entry_changes_its_job_recorded_as_a_change_by_the_code(
    settings: Any, beat: Any
) -> None:
    settings.SCHEDULING_JOBS = {"a": {"task": NOOP, "every": "PT1M", "queue": "one"}}
    sync()
    job = Job.objects.get(name="a")
    settings.SCHEDULING_JOBS = {"a": {"task": NOOP, "every": "PT5M", "queue": "two"}}
    report = sync()
    assert [c.action for c in report.changes] == ["changed"]
    job.refresh_from_db()
    assert (job.schedule.interval, job.queue) == ("PT5M", "two")
    change = JobChange.objects.filter(job=job, action="changed").get()
    assert (change.who, change.source) == ("code", ChangeSource.CODE)
    assert change.changes["interval"] == {"from": "PT1M", "to": "PT5M"}
    assert change.changes["queue"] == {"from": "one", "to": "two"}


def test_a_removed_entry_pauses_its_job_with_the_reason_and_keeps_it(
    settings: Any, beat: Any
) -> None:
    settings.SCHEDULING_JOBS = {"a": {"task": NOOP, "every": "PT1M"}}
    sync()
    settings.SCHEDULING_JOBS = {}
    report = sync()
    assert [c.action for c in report.changes] == ["disabled"]
    job = Job.objects.get(name="a")
    assert job.status == JobStatus.PAUSED
    assert job.pause_reason.startswith("removed from SCHEDULING_JOBS")
    assert not job.declared  # a person's job again: editable, never paused twice
    assert [c.action for c in sync().changes] == []
    # Declared again: changed back to the code's and resumed.
    settings.SCHEDULING_JOBS = {"a": {"task": NOOP, "every": "PT1M"}}
    assert [c.action for c in sync().changes] == ["adopted"]
    job.refresh_from_db()
    assert (job.status, job.declared) == (JobStatus.ACTIVE, True)


def test_a_job_made_by_hand_with_a_declared_name_is_refused_unless_adopted(
    settings: Any, beat: Any, owner: Any
) -> None:
    made = create_job(owner=owner, name="a", task=NOOP, every="PT1H", now=NOW)
    settings.SCHEDULING_JOBS = {"a": {"task": NOOP, "every": "PT1M"}}
    with pytest.raises(ValidationError, match=r"jobs sync --adopt"):
        sync()
    assert not Job.objects.get(pk=made.pk).declared_in
    with pytest.raises(CommandError, match=r"made a job named 'a' that is not declared"):
        call_command("jobs", "sync", stdout=StringIO())
    report = sync(adopt=True)
    assert [c.action for c in report.changes] == ["adopted"]
    made.refresh_from_db()
    assert (made.declared_in, made.schedule.interval) == ("SCHEDULING_JOBS", "PT1M")
    adopted = JobChange.objects.filter(job=made, source=ChangeSource.CODE).values_list(
        "changes", flat=True
    )
    assert any("declared_in" in c for c in adopted) and any("interval" in c for c in adopted)


def test_dry_run_and_check_write_nothing_and_check_fails_on_drift(settings: Any, beat: Any) -> None:
    settings.SCHEDULING_JOBS = {"a": {"task": NOOP, "every": "PT1M"}}
    out = StringIO()
    call_command("jobs", "sync", "--dry-run", stdout=out)
    assert "would be created   SCHEDULING_JOBS['a']" in out.getvalue()
    with pytest.raises(CommandError, match=r"differs from the code in 1 declaration\(s\)"):
        call_command("jobs", "sync", "--check", stdout=StringIO())
    assert not Job.objects.exists() and not DeclarationSet.objects.exists()
    out = StringIO()
    call_command("jobs", "sync", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["applied"] and [c["action"] for c in data["changes"]] == ["created"]
    assert Job.objects.get(name="a").changes.get(action="created").source == ChangeSource.CODE
    call_command("jobs", "sync", "--check", stdout=StringIO())  # in step: exits 0


def test_an_older_declaration_set_never_overwrites_a_newer_one_at_start(
    settings: Any, beat: Any
) -> None:
    """Rolling deploys: the old release's scheduler restarting after the new one changes
    nothing; ``jobs sync`` by hand (a rollback) applies and becomes the newest."""
    old = {"a": {"task": NOOP, "every": "PT1M"}}
    new = {"a": {"task": NOOP, "every": "PT2M"}}
    settings.SCHEDULING_JOBS = old
    sync(on_start=True)
    settings.SCHEDULING_JOBS = new
    sync(on_start=True)
    settings.SCHEDULING_JOBS = old
    report = sync(on_start=True)
    assert report.skipped.startswith("declaration set #1 is older than #2")
    assert Job.objects.get(name="a").schedule.interval == "PT2M"
    sync()  # by hand
    assert Job.objects.get(name="a").schedule.interval == "PT1M"
    settings.SCHEDULING_JOBS = new
    assert sync(on_start=True).skipped  # the rollback is now the newest


def ending(every: str, *, end: datetime) -> dict[str, Any]:
    return {"task": NOOP, "every": every, "end": end}


def test_a_declaration_sets_fingerprint_is_the_code_alone_not_the_time_it_is_read(
    settings: Any, beat: Any
) -> None:
    """An entry whose ``end`` has passed is refused from then on, yet the set is the same set:
    otherwise an old release would be seen as a new set, numbered above the newer one."""
    settings.SCHEDULING_JOBS = {"a": ending("PT1M", end=NOW + timedelta(days=1))}
    beat({"b": {"task": NOOP, "schedule": crontab(minute=5), "args": (1,)}})
    later = NOW + timedelta(days=2)
    assert not declarations.desired_jobs(now=NOW)[1]
    assert [r.key for r in declarations.desired_jobs(now=later)[1]] == ["a"]
    before = declarations.set_fingerprint()
    assert sync(now=NOW, on_start=True).release == 1
    assert sync(now=later, on_start=True).release == 1
    assert declarations.set_fingerprint() == before
    assert DeclarationSet.objects.count() == 1


def test_an_older_set_with_an_entry_now_refused_is_still_older_and_changes_nothing(
    settings: Any, beat: Any
) -> None:
    end = NOW + timedelta(days=1)
    old = {"a": {"task": NOOP, "every": "PT1M"}, "b": ending("PT1M", end=end)}
    new = {"a": {"task": NOOP, "every": "PT2M"}, "b": ending("PT1M", end=end)}
    settings.SCHEDULING_JOBS = old
    sync(on_start=True)
    settings.SCHEDULING_JOBS = new
    sync(on_start=True)
    settings.SCHEDULING_JOBS = old
    report = sync(now=end + timedelta(days=1), on_start=True)
    assert report.skipped.startswith("declaration set #1 is older than #2")
    assert Job.objects.get(name="a").schedule.interval == "PT2M"
    assert DeclarationSet.objects.count() == 2


def test_jobs_sync_check_and_dry_run_create_no_user(
    settings: Any, beat: Any, django_user_model: Any
) -> None:
    """The system owner of a job declared without one is made only when a sync applies."""
    settings.SCHEDULING_JOBS = {"a": {"task": NOOP, "every": "PT1M"}}
    out = StringIO()
    call_command("jobs", "sync", "--dry-run", stdout=out)
    assert "would be created   SCHEDULING_JOBS['a']" in out.getvalue()
    with pytest.raises(CommandError, match=r"differs from the code in 1 declaration\(s\)"):
        call_command("jobs", "sync", "--check", stdout=StringIO())
    assert not django_user_model.objects.exists()
    call_command("jobs", "sync", stdout=StringIO())
    assert Job.objects.get(name="a").owner.get_username() == jobs.SYSTEM_OWNER
    call_command("jobs", "sync", "--check", stdout=StringIO())  # in step: exits 0


# --- the doors ------------------------------------------------------------------------------


def test_the_command_line_and_the_api_refuse_an_edit_of_a_declared_field(
    settings: Any, beat: Any
) -> None:
    settings.SCHEDULING_JOBS = {"a": {"task": NOOP, "every": "PT1M"}}
    sync()
    with pytest.raises(
        CommandError, match=r"^queue: is declared in code; change SCHEDULING_JOBS\['a'\]"
    ):
        call_command("jobs", "edit", "a", "--queue", "other", stdout=StringIO())
    with pytest.raises(ValidationError, match=r"change SCHEDULING_JOBS\['a'\] and deploy"):
        api.edit(Job.objects.get(name="a").pk, max_retries=9)
    # Pause, resume and run now work as for any job.
    call_command("jobs", "pause", "a", stdout=StringIO())
    call_command("jobs", "resume", "a", stdout=StringIO())
    assert Job.objects.get(name="a").status == JobStatus.ACTIVE


def test_manage_py_check_names_each_entry_that_cannot_be_expressed(
    settings: Any, beat: Any
) -> None:
    beat(
        {
            "sun": {"task": NOOP, "schedule": a_solar("sunset", 1, 2)},
            "ok": {"task": NOOP, "schedule": 5},
        }
    )
    settings.SCHEDULING_JOBS = {"ghost": {"task": "no.such.task", "every": "PT1M"}}
    found = check_declarations()
    assert [m.id for m in found] == ["scheduling.E014", "scheduling.E014"]
    assert found[0].msg.startswith("beat_schedule['sun']: schedule: solar schedules")
    assert found[1].msg.startswith("SCHEDULING_JOBS['ghost']: task: 'no.such.task' is not")


def test_the_admin_shows_where_a_job_is_declared_and_keeps_its_fields_read_only(
    settings: Any, beat: Any, admin_client: Any
) -> None:
    settings.SCHEDULING_JOBS = {"a": {"task": NOOP, "every": "PT1M", "queue": "one"}}
    sync()
    job = Job.objects.get(name="a")
    url = f"/admin/scheduling/job/{job.pk}/change/"
    page = admin_client.get(url).content.decode()
    assert "SCHEDULING_JOBS[&#x27;a&#x27;]" in page
    assert 'name="queue"' not in page and 'name="interval"' not in page
    admin_client.post(url, {"queue": "two", "interval": "PT9M", "name": "b"})
    job.refresh_from_db()
    assert (job.queue, job.schedule.interval, job.name) == ("one", "PT1M", "a")


# --- every door refuses what the scheduler refuses ------------------------------------------

#: Entries the scheduler refuses at start for what the code alone shows.
REFUSED_BEAT = {
    "too-many-args": {"task": PLAIN_TASK, "schedule": 10, "args": ["x", "y"]},
    "kwargs-typo": {"task": PLAIN_TASK, "schedule": 10, "kwargs": {"lable": "x"}},
    "builtin": {"task": "celery.backend_cleanup", "schedule": 60},
}
REFUSED_JOBS = {
    "soon": {"task": NOOP, "every": "soon"},
    "minute-61": {"task": NOOP, "cron": "61 * * * *"},
    "sometimes": {"task": NOOP, "rrule": "FREQ=SOMETIMES"},
    "kwargs-list": {"task": NOOP, "every": "PT1M", "kwargs": [1]},
    "huge-timeout": {"task": NOOP, "every": "PT1M", "timeout": 2**31},
    "bare-number": {"task": NOOP, "every": 60},
    "unbound": {"task": PLAIN_TASK, "every": "PT1M", "args": []},
}


def test_manage_py_check_reports_every_entry_the_scheduler_refuses(
    settings: Any, beat: Any
) -> None:
    """``scheduling.E014`` runs the reconciliation's own validation, not only the option
    parser's: each entry refused at start is reported, naming it, and nothing else is."""
    beat({**REFUSED_BEAT, "ok": {"task": PLAIN_TASK, "schedule": 10, "args": ["x"]}})
    settings.SCHEDULING_JOBS = {**REFUSED_JOBS, "fine": {"task": NOOP, "every": "PT1M"}}
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:6379/0"  # its visibility timeout bounds
    refused = {c.key: c.line for c in reconciliation.reconcile(now=NOW, apply=False).refused}
    assert set(refused) == set(REFUSED_BEAT) | set(REFUSED_JOBS)
    found = check_declarations()
    assert {m.obj for m in found} == {
        f"{origin}[{key!r}]"
        for origin, keys in (("beat_schedule", REFUSED_BEAT), ("SCHEDULING_JOBS", REFUSED_JOBS))
        for key in keys
    }
    assert all(m.id == "scheduling.E014" for m in found)
    # The same reason, in the same words, as the scheduler's refusal.
    assert {m.msg.split(": this job declared")[0] for m in found} == {
        line.removeprefix("refused   ") for line in refused.values()
    }


def test_manage_py_check_reads_no_database(
    settings: Any, beat: Any, django_assert_num_queries: Any
) -> None:
    settings.SCHEDULING_JOBS = {
        **REFUSED_JOBS,
        "owned": {"task": NOOP, "every": "PT1M", "owner": "x"},
    }
    with django_assert_num_queries(0):
        found = check_declarations()
    assert len(found) == len(REFUSED_JOBS)  # an owner is the ledger's to tell (jobs sync)


def test_a_builtin_celery_task_is_refused_without_the_decorator_advice(beat: Any) -> None:
    beat({"cleanup": {"task": "celery.backend_cleanup", "schedule": 60}})
    [line] = [c.line for c in sync().refused]
    assert "one of Celery's built-in tasks" in line
    assert "schedulable_task" not in line


def test_a_policy_a_beat_entry_cannot_give_points_to_scheduling_jobs(beat: Any) -> None:
    beat(
        {
            "a": {"task": NOOP, "schedule": 60, "options": {"overlap": "allow"}},
            "b": {"task": NOOP, "schedule": 60, "pause_after_failures": 3},
        }
    )
    lines = sorted(c.line for c in sync().refused)
    assert lines[0].endswith("declare the entry in SCHEDULING_JOBS, which takes overlap")
    assert lines[1].endswith(
        "declare the entry in SCHEDULING_JOBS, which takes pause_after_failures"
    )


def test_jobs_sync_runs_past_its_own_system_check_and_exits_non_zero_on_a_refusal(
    settings: Any, beat: Any
) -> None:
    """The system checks run before the command (``skip_checks=False``, as ``manage.py``
    runs it): E014 reports the bad entry, yet ``sync`` applies the rest and names it."""
    settings.SCHEDULING_JOBS = {
        "bad": {"task": NOOP, "cron": "61 * * * *"},
        "good": {"task": NOOP, "every": "PT1M"},
    }
    with pytest.raises(CommandError, match=r"differs from the code in 2 declaration\(s\)"):
        call_command("jobs", "sync", "--check", skip_checks=False, stdout=StringIO())
    with pytest.raises(CommandError, match=r"1 declaration\(s\) refused: refused   SCHED"):
        call_command("jobs", "sync", "--dry-run", skip_checks=False, stdout=StringIO())
    out = StringIO()
    with pytest.raises(CommandError, match=r"SCHEDULING_JOBS\['bad'\]: cron"):
        call_command("jobs", "sync", skip_checks=False, stdout=out)
    assert "created   SCHEDULING_JOBS['good']" in out.getvalue()
    with pytest.raises(CommandError, match=r"1 declaration\(s\) refused: refused   SCHED"):
        call_command("jobs", "sync", "--json", skip_checks=False, stdout=StringIO())
    assert list(Job.objects.values_list("name", flat=True)) == ["good"]


def test_dry_run_shows_a_conflict_and_a_refusal_as_they_are(
    settings: Any, beat: Any, owner: Any
) -> None:
    create_job(owner=owner, name="a", task=NOOP, every="PT1H", now=NOW)
    settings.SCHEDULING_JOBS = {
        "a": {"task": NOOP, "every": "PT1M"},
        "b": {"task": NOOP, "every": "soon"},
    }
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("jobs", "sync", "--dry-run", stdout=out)
    assert "\nconflict  SCHEDULING_JOBS['a']" in "\n" + out.getvalue()
    assert "\nrefused   SCHEDULING_JOBS['b']" in "\n" + out.getvalue()
    assert "would be conflict" not in out.getvalue()


def test_a_scheduler_at_start_records_its_changes_as_the_code_and_its_account(
    settings: Any, beat: Any
) -> None:
    settings.SCHEDULING_JOBS = {"a": {"task": NOOP, "every": "PT1M"}}
    reconciliation.sync_on_start(now=NOW)
    change = JobChange.objects.get(action="created")
    assert change.source == ChangeSource.CODE
    assert change.who.startswith("code (os: ") and change.who.endswith(")")


def test_a_declared_job_cannot_be_removed_by_hand_at_any_door(
    settings: Any, beat: Any, admin_client: Any
) -> None:
    """Removed, it would be made again at the next sync with its history gone: the entry is
    removed from the code instead, and its job paused with its history kept."""
    settings.SCHEDULING_JOBS = {"a": {"task": NOOP, "every": "PT1M"}}
    sync()
    job = Job.objects.get(name="a")
    refusal = (
        r"name: is declared in code; remove the entry from SCHEDULING_JOBS\['a'\] and run "
        r"jobs sync: its job is then paused, its history kept"
    )
    with pytest.raises(CommandError, match=f"^{refusal}$"):
        call_command("jobs", "remove", "a", stdout=StringIO())
    with pytest.raises(ValidationError, match=r"remove the entry from SCHEDULING_JOBS\['a'\]"):
        api.unschedule(job.pk)
    assert admin_client.get(f"/admin/scheduling/job/{job.pk}/delete/").status_code == 403
    bulk = {"action": "delete_selected", "_selected_action": [job.pk]}
    page = admin_client.post("/admin/scheduling/job/", bulk)
    assert "remove the entry from SCHEDULING_JOBS[&#x27;a&#x27;]" in page.content.decode()
    assert admin_client.post("/admin/scheduling/job/", {**bulk, "post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()
    assert not JobChange.objects.filter(action="removed").exists()


def test_a_plain_celery_task_is_shown_by_its_own_name_wherever_a_person_reads_it(
    beat: Any, admin_client: Any
) -> None:
    beat({"plain": {"task": PLAIN_TASK, "schedule": 10, "args": ["x"]}})
    sync()
    shown = f"{PLAIN_TASK} (plain Celery task, run through {CELERY_TASK_RUNNER})"
    listed = StringIO()
    call_command("jobs", "list", stdout=listed)
    assert shown in listed.getvalue()
    out = StringIO()
    call_command("jobs", "show", "plain", stdout=out)
    lines = out.getvalue().splitlines()
    assert f"task: {shown}" in lines
    assert "declared_in: beat_schedule['plain']" in lines
    job = Job.objects.get(name="plain")
    page = admin_client.get(f"/admin/scheduling/job/{job.pk}/change/").content.decode()
    assert shown in page
    changelist = admin_client.get("/admin/scheduling/job/?made_by=all").content.decode()
    assert shown in changelist.replace("<wbr>", "")
