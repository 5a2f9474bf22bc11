"""``manage.py check`` tells a host project what it got wrong, with an id and a hint."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from celery import Celery
from celery._state import _set_current_app
from django.core.checks import CheckMessage
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.utils import timezone

from scheduling import checks, conf
from scheduling.api import schedulable_task
from scheduling.celeryapp import celery_app
from scheduling.ledger.engines import engine
from scheduling.ledger.engines.mysql import MARIADB_ARGS_DEPTH, MySQLEngine
from scheduling.models import Job, SchedulerState
from tests.conftest import celery_settings, database_engine

pytestmark = pytest.mark.specification


def ids(messages: list[CheckMessage]) -> list[str]:
    return [m.id or "" for m in messages]


@pytest.fixture
def fallback_app() -> Iterator[Celery]:
    """Celery's bare default app as the current one: a host that never imported its own."""
    project = celery_app()
    bare = Celery("default", fixups=[], set_as_current=False)
    _set_current_app(bare)
    yield bare
    _set_current_app(project)


def test_a_project_app_that_is_current_passes() -> None:
    assert checks.check_celery_app() == []


def test_no_project_celery_app_is_an_error_with_a_hint(fallback_app: Celery) -> None:
    [message] = checks.check_celery_app()
    assert message.id == "scheduling.E001"
    assert message.is_serious()
    assert "config_from_object" in (message.hint or "")


def test_a_schedulable_task_without_acks_late_is_named() -> None:
    def no_acks_late() -> None:
        """Declared the way a host might, with acks_late switched off."""

    task = schedulable_task(name="tests.checks.no_acks_late", acks_late=False)(no_acks_late)
    try:
        messages = checks.check_acks_late()
    finally:
        celery_app().tasks.pop(task.name, None)
    assert ids(messages) == ["scheduling.W002"]
    assert messages[0].obj == "tests.checks.no_acks_late"


def test_every_declared_schedulable_task_acks_late_by_default() -> None:
    assert checks.check_acks_late() == []


@pytest.fixture
def redis_visibility() -> Iterator[Callable[[int], None]]:
    with contextlib.ExitStack() as changes:

        def set_limit(seconds: int) -> None:
            changes.enter_context(
                celery_settings(
                    celery_app(),
                    broker_url="redis://127.0.0.1:6379/0",
                    broker_transport_options={"visibility_timeout": seconds},
                )
            )

        yield set_limit


def test_a_visibility_timeout_under_the_default_time_limit_is_warned(
    redis_visibility: Callable[[int], None], settings: Any
) -> None:
    settings.SCHEDULING_DEFAULT_TIMEOUT = 300
    redis_visibility(200)
    [message] = checks.check_visibility_timeout()
    assert message.id == "scheduling.W003"
    assert "200 s" in message.msg and "visibility_timeout" in (message.hint or "")


@pytest.mark.django_db
def test_a_job_whose_time_limit_outlasts_the_visibility_timeout_is_warned(
    redis_visibility: Callable[[int], None], make_job: Callable[..., Job]
) -> None:
    redis_visibility(1000)
    job = make_job()
    assert checks.check_visibility_timeout() == []
    Job.objects.filter(pk=job.pk).update(timeout=5000)  # written behind the validation's back
    assert ids(checks.check_visibility_timeout()) == ["scheduling.W003"]


@pytest.mark.django_db
def test_jobs_whose_task_table_or_task_is_gone_are_named(make_job: Callable[..., Job]) -> None:
    table_job, task_job = make_job(), make_job()
    assert checks.check_job_targets() == []
    Job.objects.filter(pk=table_job.pk).update(task_table="retired.Invoice", task_row_id=7)
    Job.objects.filter(pk=task_job.pk).update(task="retired.send_invoices")
    messages = checks.check_job_targets()
    assert ids(messages) == ["scheduling.W005", "scheduling.W006"]
    assert messages[0].obj == "retired.Invoice"
    assert messages[1].obj == "retired.send_invoices"


@pytest.mark.django_db
def test_several_schedulers_are_warned_on_sqlite_only() -> None:
    now = timezone.now()
    for name in ("host-a:1", "host-b:2"):
        SchedulerState.objects.create(name=name, last_tick_at=now, started_at=now)
    SchedulerState.objects.create(
        name="long-gone:3", last_tick_at=now - timedelta(hours=1), started_at=now
    )
    SchedulerState.objects.create(  # stopped before the two started: not one of them
        name="restarted:4",
        last_tick_at=now - timedelta(minutes=3),
        started_at=now - timedelta(minutes=4),
    )
    messages = checks.check_sqlite_schedulers()
    from django.db import connection

    if connection.vendor == "sqlite":
        assert ids(messages) == ["scheduling.W004"]
        assert "2 schedulers" in messages[0].msg and "(host-a:1, host-b:2)" in messages[0].msg
    else:
        assert messages == []


@pytest.mark.django_db
def test_a_scheduler_restarted_is_not_two_schedulers() -> None:
    now = timezone.now()
    for minutes, name in ((4, "before-restart:1"), (1, "after-restart:2")):
        started = now - timedelta(minutes=minutes)
        SchedulerState.objects.create(
            name=name, started_at=started, last_tick_at=started + timedelta(seconds=30)
        )
    assert checks.check_sqlite_schedulers() == []


def test_use_tz_off_is_an_error_with_a_hint(settings: Any) -> None:
    assert checks.check_use_tz() == []
    settings.USE_TZ = False
    messages = checks.check_use_tz()
    assert ids(messages) == ["scheduling.E007"] and "USE_TZ = True" in (messages[0].hint or "")


@pytest.mark.skipif(
    database_engine() == "mysql",
    reason="Django's own field checks on MySQL ask the server its version: not without a database",
)
def test_manage_py_check_runs_them_and_stays_quiet_without_a_database() -> None:
    out = StringIO()
    call_command("check", stdout=out)  # the test database is not open to this test
    assert "no issues" in out.getvalue()


# --- settings out of range (scheduling.E008) ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "accepts"),
    [
        ("STALE_AFTER", 0, "a number from 1 to 86,400"),
        ("HEARTBEAT_INTERVAL", "0", "a number from 0.1 to 3,600"),
        ("FLOOD_LANES", 0, "a whole number from 1 to 32"),
        ("RETRY_BACKOFF_BASE", -5, "a number from 0 to 604,800"),
        ("CATCH_UP_LIMIT", -1, "a whole number from 1 to 10,000"),
        ("BATCH_SIZE", "ten", "a whole number from 1 to 100,000"),
        ("DASHBOARD_LAG_WARN", "five seconds", "a number from 0 to 86,400"),
        ("FENCE_AT", 1.5, "a number from 0.1 to 0.9"),
        ("MAX_SLEEP", float("nan"), "a number from 0.01 to 3,600"),
        ("DEFAULT_TIMEOUT", 2.5, "a whole number from 1 to 2,147,483,647"),
        ("DEFAULT_MAX_RETRIES", True, "a whole number from 0 to 2,147,483,647"),
        ("FAST_PUBLISH", "maybe", "true or false"),
        ("SCHEDULER_NAME", "host\nforged line", "text of up to 255 characters"),
    ],
)
def test_a_setting_out_of_its_range_is_an_error_naming_it_and_the_range(
    settings: Any, name: str, value: Any, accepts: str
) -> None:
    setattr(settings, f"SCHEDULING_{name}", value)
    [message] = checks.check_settings()
    assert message.id == "scheduling.E008"
    assert message.is_serious()
    assert message.msg.startswith(f"SCHEDULING_{name} = {value!r} ")
    assert message.msg.endswith(f"it accepts {accepts}")
    # Read anyway (a worker that never ran the checks), it fails with the same words.
    with pytest.raises(ImproperlyConfigured) as refused:
        conf.get(name)
    assert str(refused.value) == message.msg


def test_settings_from_the_environment_are_read_as_their_type(settings: Any) -> None:
    settings.SCHEDULING_STALE_AFTER = "30"
    settings.SCHEDULING_BATCH_SIZE = "500"
    settings.SCHEDULING_FAST_PUBLISH = "false"
    settings.SCHEDULING = {"MAX_SLEEP": "0.5"}  # the older dict form
    assert checks.check_settings() == []
    assert (conf.get("STALE_AFTER"), conf.get("BATCH_SIZE")) == (30.0, 500)
    assert (conf.get("FAST_PUBLISH"), conf.get("MAX_SLEEP")) == (False, 0.5)


def test_the_older_dict_form_is_checked_too(settings: Any) -> None:
    settings.SCHEDULING = {"STALE_AFTER": -1}
    assert ids(checks.check_settings()) == ["scheduling.E008"]


def test_every_default_is_within_its_own_range() -> None:
    assert {name: knob.problem(knob.default) for name, knob in conf.KNOBS.items()} == {
        name: None for name in conf.KNOBS
    }


def test_manage_py_check_stops_at_a_bad_setting_with_one_line_per_setting(settings: Any) -> None:
    settings.SCHEDULING_STALE_AFTER = 0
    settings.SCHEDULING_HARD_TIMEOUT_GRACE = "ten"  # also read by the visibility check
    with pytest.raises(SystemCheckError) as stopped:
        call_command("check", stdout=StringIO(), stderr=StringIO())
    report = str(stopped.value)
    assert "SCHEDULING_STALE_AFTER = 0 is out of range; it accepts a number from 1" in report
    assert "SCHEDULING_HARD_TIMEOUT_GRACE = 'ten' is not a number" in report
    assert "Traceback" not in report


@pytest.mark.django_db
def test_jobs_saved_before_the_queue_rules_with_a_queue_they_refuse_are_named(
    make_job: Callable[..., Job],
) -> None:
    job = make_job()
    assert checks.check_job_queues() == []
    Job.objects.filter(pk=job.pk).update(queue="celery\r\nX: y")  # as an older release saved it
    [message] = checks.check_job_queues()
    assert message.id == "scheduling.W010" and message.obj == "celery\r\nX: y"
    assert "1 job(s) use the queue 'celery\\r\\nX: y'" in message.msg


# --- MySQL/MariaDB collation (scheduling.W015) ------------------------------------------------


@pytest.mark.django_db
def test_a_ledger_that_compares_names_with_case_is_quiet() -> None:
    assert checks.check_mysql_collation() == []


@pytest.mark.django_db
def test_a_ledger_whose_names_compare_without_case_is_named_with_a_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blind = [{"table_name": "scheduling_job", "column_name": "name", "collation": "x_ci"}]
    monkeypatch.setattr(MySQLEngine, "case_blind_columns", lambda self: blind)
    messages = checks.check_mysql_collation()
    if database_engine() != "mysql":
        assert messages == []
        return
    assert ids(messages) == ["scheduling.W015"]
    assert "scheduling_job.name, x_ci" in messages[0].msg
    assert "COLLATE utf8mb4_bin" in (messages[0].hint or "")


# --- MariaDB's JSON depth (scheduling.W016) ---------------------------------------------------


@pytest.mark.django_db
def test_an_argument_depth_mariadb_cannot_keep_is_named_there_alone(settings: Any) -> None:
    settings.SCHEDULING_ARGS_MAX_DEPTH = MARIADB_ARGS_DEPTH + 1
    messages = checks.check_mariadb_argument_depth()
    if engine().json_depth_limit() is None:
        assert messages == []
        return
    assert ids(messages) == ["scheduling.W016"]
    assert f"SCHEDULING_ARGS_MAX_DEPTH = {MARIADB_ARGS_DEPTH}" in (messages[0].hint or "")
    settings.SCHEDULING_ARGS_MAX_DEPTH = MARIADB_ARGS_DEPTH
    assert checks.check_mariadb_argument_depth() == []


# --- MySQL/MariaDB session clock (scheduling.E017) ----------------------------------------------


@pytest.mark.django_db
def test_a_session_clock_in_utc_is_quiet_and_one_in_another_zone_is_an_error() -> None:
    assert checks.check_mysql_clock() == []
    if database_engine() != "mysql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SET time_zone = '+05:30'")
    try:
        messages = checks.check_mysql_clock()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET time_zone = '+00:00'")
    assert ids(messages) == ["scheduling.E017"]
    assert "+19800 s from UTC" in messages[0].msg
