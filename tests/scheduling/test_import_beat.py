"""``import_beat``: django-celery-beat's PeriodicTask rows, made through its own models, become
equivalent jobs; a second run changes nothing, a changed row updates its job, and every row that
cannot be mapped is reported with its reason."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

# The `duecourse[beat]` extra: installed on every stack django-celery-beat admits (2.9.0: Django
# below 6.1). Where it is not, tests/test_install.py proves import_beat's one-line refusal.
pytest.importorskip("django_celery_beat", reason="django-celery-beat does not admit this Django")

from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    PeriodicTasks,
    SolarSchedule,
)

from scheduling.models import Job, JobStatus

db = pytest.mark.django_db
NOOP = "scheduling.diagnostics.noop"


@pytest.fixture
def importer(django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser("admin", password="pw")


def run(*argv: str) -> dict[str, Any]:
    out = StringIO()
    call_command("import_beat", *argv, "--json", stdout=out)
    data = json.loads(out.getvalue())
    data["by_name"] = {row["name"]: row for row in data["rows"]}
    return data


def every(n: int, period: str) -> IntervalSchedule:
    return IntervalSchedule.objects.create(every=n, period=period)


def job(name: str) -> Job:
    return Job.objects.select_related("schedule").get(name=name)


@db
def test_an_interval_row_becomes_an_interval_job(importer: Any) -> None:
    PeriodicTask.objects.create(
        name="poll",
        task=NOOP,
        interval=every(15, IntervalSchedule.MINUTES),
        args=json.dumps([1, 2]),
        kwargs=json.dumps({"fast": True}),
        queue="reports",
        priority=5,
        expire_seconds=120,
        description="polls the feed",
    )
    result = run()
    assert result["by_name"]["poll"]["action"] == "created"
    imported = job("poll")
    assert imported.schedule.interval == "PT15M"
    assert (imported.task, imported.args, imported.kwargs) == (NOOP, [1, 2], {"fast": True})
    assert (imported.queue, imported.priority, imported.expires) == ("reports", 5, 120)
    assert imported.owner == importer
    assert imported.misfire == "coalesce"
    assert "polls the feed" in imported.note
    assert imported.status == JobStatus.ACTIVE


@db
def test_an_interval_keeps_beats_cadence_from_the_last_run(importer: Any) -> None:
    last_run = timezone.now() - timedelta(minutes=50)
    PeriodicTask.objects.create(
        name="hourly",
        task=NOOP,
        interval=every(1, IntervalSchedule.HOURS),
        last_run_at=last_run,
        total_run_count=42,
    )
    run()
    imported = job("hourly")
    assert imported.next_occurrence_at == last_run + timedelta(hours=1)  # not at import
    assert imported.execute_count == 42


@db
def test_a_crontab_keeps_its_fields_and_time_zone(importer: Any) -> None:
    crontab = CrontabSchedule.objects.create(
        minute="30", hour="2", day_of_week="1-5", timezone="Europe/Berlin"
    )
    PeriodicTask.objects.create(name="nightly", task=NOOP, crontab=crontab)
    run()
    schedule = job("nightly").schedule
    assert (schedule.cron, schedule.timezone) == ("30 2 * * 1-5", "Europe/Berlin")


@db
def test_start_time_and_expires_bound_the_schedule(importer: Any) -> None:
    start = datetime(2031, 1, 1, tzinfo=UTC)
    end = datetime(2031, 6, 1, tzinfo=UTC)
    PeriodicTask.objects.create(
        name="window",
        task=NOOP,
        interval=every(1, IntervalSchedule.DAYS),
        start_time=start,
        expires=end,
    )
    run()
    imported = job("window")
    assert (imported.schedule.starts_at, imported.schedule.ends_at) == (start, end)
    assert imported.schedule.interval == "P1D"
    assert imported.next_occurrence_at == start


@db
def test_a_clocked_one_off_becomes_a_single_instant(importer: Any) -> None:
    at = timezone.now() + timedelta(days=2)
    PeriodicTask.objects.create(
        name="launch",
        task=NOOP,
        clocked=ClockedSchedule.objects.create(clocked_time=at),
        one_off=True,
    )
    run()
    imported = job("launch")
    assert imported.schedule.run_at == at and imported.next_due_at == at


@db
def test_a_clocked_one_off_that_already_ran_is_not_run_again(importer: Any) -> None:
    at = timezone.now() - timedelta(days=2)
    PeriodicTask.objects.create(
        name="done",
        task=NOOP,
        clocked=ClockedSchedule.objects.create(clocked_time=at),
        one_off=True,
        enabled=False,
        total_run_count=1,
    )
    run()
    imported = job("done")
    assert imported.status == JobStatus.COMPLETED and imported.next_due_at is None


@db
def test_a_one_off_interval_runs_once_at_its_next_time(importer: Any) -> None:
    PeriodicTask.objects.create(
        name="once-soon", task=NOOP, interval=every(10, IntervalSchedule.MINUTES), one_off=True
    )
    before = timezone.now()
    run()
    schedule = job("once-soon").schedule
    assert schedule.kind == "once"
    assert (
        before + timedelta(minutes=10) <= schedule.run_at <= timezone.now() + timedelta(minutes=10)
    )
    assert run()["by_name"]["once-soon"]["action"] == "unchanged"


@db
def test_a_disabled_row_becomes_a_paused_job(importer: Any) -> None:
    PeriodicTask.objects.create(
        name="off", task=NOOP, interval=every(1, IntervalSchedule.HOURS), enabled=False
    )
    run()
    imported = job("off")
    assert imported.status == JobStatus.PAUSED
    assert imported.pause_reason == "disabled in django-celery-beat"


@db
def test_rows_that_cannot_be_mapped_are_reported_with_the_reason(importer: Any) -> None:
    solar = SolarSchedule.objects.create(event="sunrise", latitude=52.52, longitude=13.40)
    PeriodicTask.objects.create(name="dawn", task=NOOP, solar=solar)
    PeriodicTask.objects.create(
        name="jittery", task=NOOP, interval=every(1500, IntervalSchedule.MICROSECONDS)
    )
    PeriodicTask.objects.create(
        name="plain-task", task="celery.backend_cleanup", interval=every(1, "days")
    )
    PeriodicTask.objects.create(name="bad-args", task=NOOP, interval=every(1, "days"), args="[1,")
    rows = run()["by_name"]
    assert rows["dawn"]["action"] == "skipped"
    assert rows["dawn"]["detail"].startswith("solar schedules (sunrise at 52.52")
    assert "not a whole number of seconds" in rows["jittery"]["detail"]
    assert "schedulable" in rows["plain-task"]["detail"]
    assert rows["bad-args"]["detail"].startswith("args is not JSON")
    assert not Job.objects.exists()


@db
def test_a_second_run_changes_nothing(importer: Any) -> None:
    crontab = CrontabSchedule.objects.create(minute="0", hour="*/2", timezone="UTC")
    PeriodicTask.objects.create(name="a", task=NOOP, crontab=crontab)
    PeriodicTask.objects.create(name="b", task=NOOP, interval=every(5, "minutes"), enabled=False)
    run()
    before = list(Job.objects.order_by("pk").values())
    second = run()
    assert {row["action"] for row in second["rows"]} == {"unchanged"}
    after = list(Job.objects.order_by("pk").values())
    for row in after + before:
        row.pop("updated_at")
    assert after == before


@db
def test_a_changed_row_updates_its_job_in_place(importer: Any) -> None:
    task = PeriodicTask.objects.create(
        name="report", task=NOOP, interval=every(1, IntervalSchedule.HOURS)
    )
    run()
    original = job("report")
    task.interval = every(30, IntervalSchedule.MINUTES)
    task.kwargs = json.dumps({"x": 1})
    task.enabled = False
    task.save()
    result = run()["by_name"]["report"]
    assert result["action"] == "updated"
    assert set(result["changed"]) == {"interval", "kwargs", "enabled"}
    updated = job("report")
    assert updated.pk == original.pk
    assert updated.schedule.interval == "PT30M" and updated.kwargs == {"x": 1}
    assert updated.status == JobStatus.PAUSED
    task.enabled = True
    task.save()
    assert run()["by_name"]["report"]["changed"] == ["enabled"]
    assert job("report").status == JobStatus.ACTIVE


@db
def test_dry_run_writes_nothing(importer: Any) -> None:
    PeriodicTask.objects.create(name="x", task=NOOP, interval=every(1, "hours"))
    result = run("--dry-run", "--disable-source")
    assert result["by_name"]["x"]["action"] == "created"
    assert not Job.objects.exists()
    assert PeriodicTask.objects.get(name="x").enabled


@db
def test_a_dry_run_takes_no_id_logs_nothing_as_created_and_records_no_change(
    importer: Any, caplog: Any
) -> None:
    PeriodicTask.objects.create(name="kept", task=NOOP, interval=every(1, "hours"))
    run()
    kept = job("kept")
    PeriodicTask.objects.filter(name="kept").update(enabled=False, kwargs='{"x": 1}')
    PeriodicTask.objects.create(name="new", task=NOOP, interval=every(2, "hours"))
    changes = kept.changes.count()
    caplog.clear()
    with caplog.at_level("INFO", logger="scheduling"):
        rows = run("--dry-run")["by_name"]
    assert rows["new"]["action"] == "created"
    assert rows["new"]["detail"] == "every 2 hours"
    assert rows["kept"]["action"] == "updated"
    assert set(rows["kept"]["changed"]) == {"kwargs", "enabled"}
    assert "job.created" not in caplog.text and "job.paused" not in caplog.text
    assert list(Job.objects.values_list("name", flat=True)) == ["kept"]
    unchanged = job("kept")
    assert (unchanged.status, unchanged.kwargs) == (JobStatus.ACTIVE, {})
    assert unchanged.changes.count() == changes
    # The next job made takes the id right after the one made before the dry run.
    PeriodicTask.objects.filter(name="kept").delete()
    assert run()["by_name"]["new"]["action"] == "created"
    assert job("new").pk == kept.pk + 1
    assert job("new").schedule_id == kept.schedule_id + 1


@db
def test_a_dry_run_with_no_superuser_makes_no_owning_user(django_user_model: Any) -> None:
    PeriodicTask.objects.create(name="new", task=NOOP, interval=every(2, "hours"))
    assert run("--dry-run")["by_name"]["new"]["action"] == "created"
    assert not django_user_model.objects.exists()
    assert not Job.objects.exists()
    run()
    assert job("new").owner.username == "scheduler"


@db
def test_disable_source_turns_off_imported_rows_only(importer: Any) -> None:
    PeriodicTask.objects.create(name="moved", task=NOOP, interval=every(1, "hours"))
    solar = SolarSchedule.objects.create(event="sunset", latitude=1, longitude=2)
    PeriodicTask.objects.create(name="stays", task=NOOP, solar=solar)
    changed_before = PeriodicTasks.last_change()
    rows = run("--disable-source")["by_name"]
    assert rows["moved"]["source_disabled"] is True
    assert not PeriodicTask.objects.get(name="moved").enabled
    assert PeriodicTask.objects.get(name="stays").enabled
    assert PeriodicTasks.last_change() != changed_before  # a running beat reloads
    # The job stays active, and running the import again leaves it so.
    assert job("moved").status == JobStatus.ACTIVE
    assert run()["by_name"]["moved"]["action"] == "unchanged"
    assert job("moved").status == JobStatus.ACTIVE


@db
def test_a_job_of_the_same_name_not_imported_is_left_alone(importer: Any, make_job: Any) -> None:
    make_job(name="clash", owner=importer)
    PeriodicTask.objects.create(name="clash", task=NOOP, interval=every(1, "hours"))
    row = run()["by_name"]["clash"]
    assert row["action"] == "skipped"
    assert "already has a job named 'clash' that was not imported" in row["detail"]


@db
def test_the_text_report_has_a_line_per_row_and_a_summary(importer: Any) -> None:
    PeriodicTask.objects.create(name="ok", task=NOOP, interval=every(2, "hours"))
    solar = SolarSchedule.objects.create(event="sunrise", latitude=1, longitude=2)
    PeriodicTask.objects.create(name="sun", task=NOOP, solar=solar)
    out = StringIO()
    call_command("import_beat", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("created   ok: every 2 hours")
    assert lines[1].startswith("skipped   sun: solar schedules")
    assert lines[-1] == "2 PeriodicTask row(s): 1 created, 0 updated, 0 unchanged, 1 skipped"


@db
def test_a_database_without_django_celery_beats_tables_is_refused_in_one_line(
    importer: Any,
) -> None:
    """Its migrations were never run here: say so, instead of a database traceback."""
    with connection.cursor() as cursor:  # rolled back with the test's transaction
        cursor.execute(f"DROP TABLE {PeriodicTask._meta.db_table} CASCADE")
    with pytest.raises(CommandError) as caught:
        call_command("import_beat", stdout=StringIO(), stderr=StringIO())
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("source: django-celery-beat's tables are missing")
    assert "run `manage.py migrate django_celery_beat`" in message
    assert not Job.objects.exists()
