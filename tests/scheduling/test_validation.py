"""The rules of a valid job: every bad input is refused before anything is saved.

The same rules answer through ``jobs.create_job`` (the command line, the API and the code) and
through the models' ``full_clean`` (the admin's forms), each naming the field and the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from scheduling.models import Job, Schedule
from tests.conftest import FIXED_NOW
from tests.factories import create_job
from tests.tasktable_app.models import Chore

pytestmark = [pytest.mark.django_db, pytest.mark.specification]

NAIVE = datetime(2030, 1, 7, 9, 0)
HOUR = timedelta(hours=1)

# (id, create_job arguments, field named in the error, words of the reason)
SCHEDULE_CASES = [
    ("zero interval", {"every": "PT0S"}, "interval", "shorter than one second"),
    ("negative interval", {"every": "-PT1H"}, "interval", "negative"),
    ("interval in words", {"every": "3 hours"}, "interval", "not an ISO-8601 duration"),
    ("interval in months", {"every": "P1M"}, "interval", "months or years"),
    ("interval in years", {"every": "P1Y"}, "interval", "months or years"),
    ("no schedule at all", {"every": ""}, "interval", "exactly one"),
    ("interval and cron", {"every": "PT1M", "cron": "* * * * *"}, "interval", "exactly one"),
    ("cron out of range", {"cron": "61 * * * *"}, "cron", "minute"),
    ("cron with six fields", {"cron": "0 0 9 * * *"}, "cron", "expected 5 fields"),
    ("cron never fires", {"cron": "0 0 30 2 *"}, "cron", "never"),
    ("unknown zone", {"cron": "0 9 * * *", "tz": "Mars/Olympus_Mons"}, "timezone", "IANA"),
    ("end before start", {"start": FIXED_NOW + HOUR, "end": FIXED_NOW}, "ends_at", "after"),
    ("end equals start", {"start": FIXED_NOW, "end": FIXED_NOW}, "ends_at", "after"),
    ("naive at", {"at": NAIVE}, "run_at", "time zone offset"),
    ("naive start", {"start": NAIVE}, "starts_at", "time zone offset"),
    ("naive end", {"end": NAIVE}, "ends_at", "time zone offset"),
    ("at before start", {"at": FIXED_NOW, "start": FIXED_NOW + HOUR}, "run_at", "before"),
    ("interval off the calendar", {"every": "P99999999D"}, "interval", "beyond the year 9999"),
    (
        "second occurrence off the calendar",
        {"every": "PT1H", "start": datetime(9999, 12, 31, 23, 30, tzinfo=UTC)},
        "interval",
        "beyond the year 9999",
    ),
    (
        "cron off the calendar",
        {"cron": "@yearly", "start": datetime(9999, 6, 1, tzinfo=UTC)},
        "cron",
        "before the year 10000",
    ),
    ("zone with an interval", {"every": "PT1H", "tz": "Europe/Berlin"}, "timezone", "cron"),
    ("zone with an instant", {"at": FIXED_NOW + HOUR, "tz": "Asia/Tokyo"}, "timezone", "cron"),
]

JOB_CASES = [
    ("unknown task", {"task": "gone.task"}, "task", "not a registered Celery task"),
    ("empty task", {"task": ""}, "task", ""),
    ("builtin cleanup task", {"task": "celery.backend_cleanup"}, "task", "not schedulable"),
    ("builtin chord task", {"task": "celery.chord_unlock"}, "task", "not schedulable"),
    ("args not a list", {"args": {"a": 1}}, "args", "JSON list"),
    ("args a string", {"args": "[1]"}, "args", "JSON list"),
    ("kwargs not an object", {"kwargs": [1, 2]}, "kwargs", "JSON object"),
    ("negative retries", {"max_retries": -1}, "max_retries", ""),
    ("negative timeout", {"timeout": -5}, "timeout", ""),
    ("zero timeout", {"timeout": 0}, "timeout", "at least 1 second"),
    ("note too long", {"note": "x" * 501}, "note", "501 characters"),
    ("negative jitter", {"jitter": timedelta(seconds=-1)}, "jitter", "zero or more"),
    ("jitter over a day", {"jitter": timedelta(days=2)}, "jitter", "at most 86400 seconds"),
    ("priority too high", {"priority": 256}, "priority", "between 0 and 255"),
    ("empty name", {"name": "   "}, "name", "must not be empty"),
    ("empty queue", {"queue": ""}, "queue", ""),
    ("unknown misfire policy", {"misfire": "sometimes"}, "misfire", ""),
    ("unknown overlap policy", {"overlap": "maybe"}, "overlap", ""),
    (
        "task table not a model",
        {"task_table": "nowhere.Nothing", "task_row_id": 1},
        "task_table",
        "not a registered task table",
    ),
    (
        "task table never registered",
        {"task_table": "auth.User", "task_row_id": 1},
        "task_table",
        "not a registered task table",
    ),
    (
        "task row that does not exist",
        {"task_table": "tasktable_app.Chore", "task_row_id": 987654},
        "task_row_id",
        "no tasktable_app.Chore row with id 987654",
    ),
    ("task row without a table", {"task_row_id": 1}, "task_table", "required"),
]


def refused(call: Callable[[], Any]) -> dict[str, list[str]]:
    """Run ``call``, expect a ValidationError, and prove nothing was written."""
    before = (Job.objects.count(), Schedule.objects.count())
    with pytest.raises(ValidationError) as caught:
        call()
    assert (Job.objects.count(), Schedule.objects.count()) == before
    return caught.value.message_dict


def assert_names(errors: dict[str, list[str]], field: str, reason: str) -> None:
    assert field in errors, errors
    assert any(reason in message for message in errors[field]), errors[field]


def create(owner: Any, **overrides: Any) -> Job:
    options: dict[str, Any] = {
        "owner": owner,
        "name": "nightly",
        "task": "scheduling.diagnostics.noop",
        "now": FIXED_NOW,
    }
    if not {"every", "cron", "at"} & overrides.keys():
        options["every"] = "PT1M"
    options.update(overrides)
    return create_job(**options)


def build(owner: Any, **overrides: Any) -> Job:
    """An unsaved job and schedule, as the admin's forms would make them."""
    schedule = Schedule(
        owner=owner,
        interval=overrides.pop("every", "" if {"cron", "at"} & overrides.keys() else "PT1M"),
        cron=overrides.pop("cron", ""),
        timezone=overrides.pop("tz", "UTC"),
        run_at=overrides.pop("at", None),
        starts_at=overrides.pop("start", None),
        ends_at=overrides.pop("end", None),
    )
    fields: dict[str, Any] = {
        "owner": owner,
        "name": "nightly",
        "task": "scheduling.diagnostics.noop",
        "schedule": schedule,
        **overrides,
    }
    return Job(**fields)


@pytest.mark.parametrize(
    ("overrides", "field", "reason"),
    [case[1:] for case in SCHEDULE_CASES + JOB_CASES],
    ids=[case[0] for case in SCHEDULE_CASES + JOB_CASES],
)
def test_create_job_refuses_bad_input_before_saving_anything(
    owner: Any, overrides: dict[str, Any], field: str, reason: str
) -> None:
    if "task_table" in overrides:
        overrides = {"task": "", **overrides}
    errors = refused(lambda: create(owner, **overrides))
    assert_names(errors, field, reason)


@pytest.mark.parametrize(
    ("overrides", "field", "reason"),
    [case[1:] for case in SCHEDULE_CASES],
    ids=[case[0] for case in SCHEDULE_CASES],
)
def test_schedule_full_clean_refuses_bad_timing(
    overrides: dict[str, Any], field: str, reason: str
) -> None:
    schedule = build(None, **overrides).schedule
    errors = refused(schedule.full_clean)
    assert_names(errors, field, reason)


@pytest.mark.parametrize(
    ("overrides", "field", "reason"),
    [case[1:] for case in SCHEDULE_CASES + JOB_CASES],
    ids=[case[0] for case in SCHEDULE_CASES + JOB_CASES],
)
def test_job_full_clean_refuses_bad_input_with_the_same_words(
    owner: Any, overrides: dict[str, Any], field: str, reason: str
) -> None:
    if "task_table" in overrides:
        overrides = {"task": "scheduling.run_task_row", **overrides}
    job = build(owner, **overrides)
    errors = refused(lambda: job.full_clean(exclude=["schedule"]))
    assert_names(errors, field, reason)


def test_a_bad_saved_schedule_is_reported_by_the_job_that_uses_it(owner: Any) -> None:
    schedule = Schedule.objects.create(owner=owner, interval="PT0S")  # written around the rules
    job = Job(owner=owner, name="n", task="scheduling.diagnostics.noop", schedule=schedule)
    with pytest.raises(ValidationError) as caught:
        job.full_clean()
    assert_names(caught.value.message_dict, "interval", "shorter than one second")


def test_all_errors_are_reported_at_once(owner: Any) -> None:
    errors = refused(
        lambda: create(owner, every="PT0S", task="gone.task", args={}, timeout=0, note="x" * 600)
    )
    assert {"interval", "task", "args", "timeout", "note"} <= errors.keys()


def test_a_reason_is_not_repeated_when_two_layers_check_it(owner: Any) -> None:
    errors = refused(lambda: create(owner, every="PT0S"))
    assert len(errors["interval"]) == 1, errors


def test_a_good_job_is_accepted_and_planned(owner: Any) -> None:
    job = create(owner, every="PT1H", start=FIXED_NOW + HOUR, note="x" * 500, max_retries=0)
    assert job.pk is not None
    assert job.next_occurrence_at == FIXED_NOW + HOUR
    assert Schedule.objects.count() == 1


def test_a_task_table_job_gets_the_row_runner_task(owner: Any) -> None:
    row = Chore.objects.create(name="digest")
    job = create(owner, task="", task_table="tasktable_app.Chore", task_row_id=row.pk)
    assert job.task == "scheduling.run_task_row"
    assert (job.task_table, job.task_row_id) == ("tasktable_app.Chore", row.pk)


def test_duplicate_name_for_the_same_owner_is_refused(owner: Any) -> None:
    create(owner, name="report")
    errors = refused(lambda: create(owner, name="report", every="PT5M"))
    assert_names(errors, "name", "already has a job named 'report'")


def test_duplicate_name_is_refused_by_full_clean_too(owner: Any) -> None:
    first = create(owner, name="report")
    twin = Job(owner=owner, name="report", task=first.task, schedule=first.schedule)
    with pytest.raises(ValidationError) as caught:
        twin.full_clean()
    messages = " ".join(m for ms in caught.value.message_dict.values() for m in ms)
    assert "Name" in messages and "already exists" in messages


def test_same_name_for_another_owner_is_allowed(owner: Any, django_user_model: Any) -> None:
    other = django_user_model.objects.create(username="other")
    create(owner, name="report")
    create(other, name="report")
    assert Job.objects.filter(name="report").count() == 2


def test_errors_read_as_one_line_naming_the_field() -> None:
    from scheduling.rules.validation import first_error

    text = first_error(ValidationError({"interval": ["'PT0S' is shorter than one second"]}))
    assert text == "interval: 'PT0S' is shorter than one second"
    assert "\n" not in text


def test_json_arguments_from_the_command_line_must_have_the_right_shape() -> None:
    from scheduling.rules.validation import parse_json_argument

    assert parse_json_argument('[1, "a"]', field="args", expect=list) == [1, "a"]
    assert parse_json_argument('{"k": 1}', field="kwargs", expect=dict) == {"k": 1}
    for raw, field, expect, reason in [
        ("{}", "args", list, "JSON list"),
        ("[]", "kwargs", dict, "JSON object"),
        ("[1,", "args", list, "not valid JSON"),
    ]:
        with pytest.raises(ValidationError) as caught:
            parse_json_argument(raw, field=field, expect=expect)
        assert_names(caught.value.message_dict, field, reason)


def test_a_task_table_job_must_run_the_row_runner(owner: Any) -> None:
    row = Chore.objects.create(name="digest")
    errors = refused(
        lambda: create(
            owner,
            task="scheduling.diagnostics.noop",
            task_table="tasktable_app.Chore",
            task_row_id=row.pk,
        )
    )
    assert_names(errors, "task", "scheduling.run_task_row")


def test_a_field_failing_djangos_validator_and_our_rule_reads_as_one_reason(owner: Any) -> None:
    from scheduling.rules.validation import first_error

    with pytest.raises(ValidationError) as caught:
        create(owner, timeout=0)
    assert first_error(caught.value) == "timeout: must be at least 1 second"


def test_distinct_reasons_for_one_field_are_separated() -> None:
    from scheduling.rules.validation import first_error

    text = first_error(ValidationError({"task": ["is required", "is not registered"]}))
    assert text == "task: is required; is not registered"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("nan", "'nan' is not a number of seconds"),
        ("inf", "'inf' is not a number of seconds"),
        ("-inf", "'-inf' is not a number of seconds"),
        ("ten", "'ten' is not a number of seconds"),
        ("-1", "must be zero or more"),
        ("1e15", "must be at most 86400 seconds"),
    ],
)
def test_seconds_from_the_command_line_are_finite_and_bounded(raw: str, reason: str) -> None:
    from scheduling.rules.validation import MAX_JITTER, parse_seconds

    with pytest.raises(ValidationError) as caught:
        parse_seconds(raw, field="jitter", maximum=MAX_JITTER)
    assert caught.value.message_dict == {"jitter": [reason]}


def test_seconds_from_the_command_line_may_be_fractional() -> None:
    from scheduling.rules.validation import MAX_JITTER, parse_seconds

    assert parse_seconds("2.5", field="jitter", maximum=MAX_JITTER) == timedelta(seconds=2.5)
    assert parse_seconds("86400", field="jitter", maximum=MAX_JITTER) == MAX_JITTER


def test_a_schedule_in_a_zone_is_fine_for_cron_and_utc_is_fine_for_anything(owner: Any) -> None:
    create(owner, name="berlin", cron="0 9 * * *", tz="Europe/Berlin")
    create(owner, name="utc", every="PT1H", tz="UTC")
    assert Job.objects.count() == 2


@pytest.mark.parametrize(("count", "text"), [(0, "0 jobs"), (1, "1 job"), (2, "2 jobs")])
def test_admin_action_counts_use_plural_forms(count: int, text: str) -> None:
    from scheduling.web.admin.display import say as _say

    assert _say(count, "%(count)d job paused.", "%(count)d jobs paused.") == f"{text} paused."
