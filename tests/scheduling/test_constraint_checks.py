"""A job's and a schedule's check constraints are validated in one query, with Django's errors.

``scheduling.models.checks.OneQueryChecks`` replaces Django's query per check constraint (and
its savepoint) with one ``SELECT`` of every condition; whatever it finds must be what Django's
own ``Model.validate_constraints`` finds, on every database.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, models
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.models import Job, Schedule
from tests.factories import create_job

pytestmark = [pytest.mark.django_db, pytest.mark.specification]

NOOP = "scheduling.diagnostics.noop"


def djangos_errors(instance: Any, exclude: Any = None) -> dict[str, list[str]] | None:
    try:
        models.Model.validate_constraints(instance, exclude=exclude)
    except ValidationError as error:
        return error.message_dict
    return None


def our_errors(instance: Any, exclude: Any = None) -> dict[str, list[str]] | None:
    try:
        instance.validate_constraints(exclude=exclude)
    except ValidationError as error:
        return error.message_dict
    return None


@pytest.fixture
def job(admin_user: Any) -> Job:
    return create_job(owner=admin_user, name="checked", task=NOOP, every="PT1H", now=timezone.now())


def test_a_valid_job_and_schedule_pass_in_one_select(job: Job) -> None:
    with CaptureQueriesContext(connection) as job_queries:
        job.validate_constraints()
    with CaptureQueriesContext(connection) as schedule_queries:
        job.schedule.validate_constraints()
    selects = [q["sql"] for q in job_queries.captured_queries if q["sql"].startswith("SELECT")]
    # The check constraints' one SELECT, and the unique (owner, name) constraint's own.
    assert len(selects) == 2, selects
    assert [q["sql"] for q in schedule_queries.captured_queries if q["sql"].startswith("SELECT")]
    assert len(schedule_queries.captured_queries) <= 3  # one SELECT, within a savepoint


@pytest.mark.parametrize(
    "change",
    [
        {"status": "sleeping"},
        {"overlap": "sometimes"},
        {"jitter": timedelta(seconds=-1)},
        {"task_table": "some_table"},
        {"status": "sleeping", "misfire": "never", "pause_kind": "odd"},
    ],
)
def test_each_violated_check_is_refused_with_djangos_own_error(
    job: Job, change: dict[str, Any]
) -> None:
    for field, value in change.items():
        setattr(job, field, value)
    expected = djangos_errors(job)
    assert expected is not None
    assert our_errors(job) == expected


def test_a_condition_over_an_excluded_field_is_not_asked(job: Job) -> None:
    job.jitter = timedelta(seconds=-1)
    job.status = "sleeping"
    assert our_errors(job, exclude={"jitter"}) == djangos_errors(job, exclude={"jitter"})
    assert our_errors(job, exclude={"jitter", "status"}) is None


def test_a_schedule_of_two_kinds_ending_before_it_starts_gets_both_refusals(job: Job) -> None:
    schedule: Schedule = job.schedule
    schedule.cron = "* * * * *"  # an interval too: two kinds
    schedule.starts_at = timezone.now()
    schedule.ends_at = schedule.starts_at - timedelta(days=1)
    expected = djangos_errors(schedule)
    assert expected is not None and len(expected["__all__"]) == 2
    assert our_errors(schedule) == expected
