"""Hostile or careless input is refused with a reason, at every door, and breaks nothing.

Each test is a request somebody sent: a staff user posting the admin's forms by hand, a shell
running ``manage.py jobs`` and ``prune_history``, a domain app calling ``scheduling.api``. Every
out-of-range number, date, size or encoding gets an error naming the field and the reason (a
form error, one command line, a ``ValidationError``), never an HTTP 500 or a traceback, and
nothing is saved. The rules live once, in ``scheduling.rules.validation``,
``scheduling.timing.schedules`` and the models, so the three doors refuse in the same words.

The cast: Alice is staff with every ``scheduling`` permission; the superuser is ``admin``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from scheduling import api, conf
from scheduling.models import AttemptOutcome, Execution, ExecutionStatus, Job, JobStatus, Schedule
from scheduling.stages import attempts, plain_claims
from scheduling.timing import schedules
from tests.factories import create_job
from tests.scheduling.test_admin_jobs import form_data

pytestmark = pytest.mark.django_db

NOOP = "scheduling.diagnostics.noop"
JOBS = "/admin/scheduling/job/"
EXECUTIONS = "/admin/scheduling/execution/"
SCHEDULES = "/admin/scheduling/schedule/"
WEEK = timedelta(days=7)


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user("alice", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="scheduling"))
    return user


@pytest.fixture
def as_alice(alice: Any) -> Client:
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def alices_job(alice: Any) -> Job:
    return create_job(owner=alice, name="nightly", task=NOOP, every="PT1H", now=timezone.now())


def refused(client: Client, url: str, data: dict[str, Any]) -> dict[str, list[str]]:
    """Post ``data``; the page comes back (200) with the form's errors by field."""
    response = client.post(url, data)
    assert response.status_code == 200, response.status_code
    return {
        field: list(errors) for field, errors in response.context["adminform"].form.errors.items()
    }


# --- the admin: a staff user's forms ------------------------------------------------------------


@pytest.mark.parametrize(
    ("posted", "field", "reason"),
    [
        ({"interval": "P9999999999D"}, "interval", "longer than any calendar"),
        ({"interval": "PT99999999999999999999S"}, "interval", "longer than any calendar"),
        ({"interval": "P" + "1" * 100 + "D"}, "interval", "at most 64 characters"),
        (
            {"interval": "", "run_at_0": "9999-12-31", "run_at_1": "23:59:59", "jitter": "3600"},
            "run_at",
            "plus 3600 s of jitter falls beyond the year 9999",
        ),
        ({"retry_backoff": "1e308"}, "retry_backoff", "from 0 to 604800"),
        ({"retry_backoff_max": "1e308"}, "retry_backoff_max", "from 0 to 604800"),
        ({"name": "nightly\njob.resumed job=1"}, "name", "control character (U+000A"),
        ({"name": "report\u202egnp.exe"}, "name", "control character (U+202E"),
        ({"note": "see \x1b[31mred"}, "note", "control character (U+001B"),
        ({"queue": "celery\r\nX: y"}, "queue", "is not a queue name"),
        ({"queue": "_kombu.binding.celery"}, "queue", "the broker keeps for its own use"),
        ({"queue": "unacked"}, "queue", "the broker keeps for its own use"),
        ({"queue": "amq.direct"}, "queue", "the broker keeps for its own use"),
        ({"queue": "reports " * 40}, "queue", "at most 200 characters"),
        ({"args": '["\\u0000"]'}, "args", "cannot be stored"),
        ({"kwargs": '{"\\ud800": 1}'}, "kwargs", "cannot be stored"),
    ],
)
def test_the_job_form_refuses_what_cannot_be_kept_beside_its_field(
    as_alice: Client, posted: dict[str, str], field: str, reason: str
) -> None:
    errors = refused(as_alice, f"{JOBS}add/", form_data(**posted))
    assert any(reason in message for message in errors.get(field, [])), errors
    assert not Job.objects.exists()


def test_a_one_off_at_the_calendars_end_without_jitter_is_kept(as_alice: Client) -> None:
    response = as_alice.post(
        f"{JOBS}add/", form_data(interval="", run_at_0="9999-12-31", run_at_1="23:59:59")
    )
    assert response.status_code == 302
    assert Job.objects.get().next_due_at == datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)


def test_an_instant_that_leaves_the_calendar_in_utc_is_refused(
    as_alice: Client, settings: Any
) -> None:
    settings.TIME_ZONE = "Asia/Tokyo"  # the admin reads times in the project's zone
    errors = refused(
        as_alice, f"{JOBS}add/", form_data(starts_at_0="0001-01-01", starts_at_1="00:00:00")
    )
    assert any("outside the years 1 to 9999" in m for m in errors["starts_at"]), errors


def test_a_shared_schedule_cannot_be_moved_where_a_jobs_jitter_overflows(
    as_alice: Client, alice: Any
) -> None:
    job = create_job(
        owner=alice,
        name="spread",
        task=NOOP,
        every="PT1H",
        jitter=timedelta(hours=1),
        now=timezone.now(),
    )
    data = {
        "name": "",
        "interval": "",
        "cron": "",
        "timezone": "UTC",
        "run_at_0": "9999-12-31",
        "run_at_1": "23:30:00",
        "starts_at_0": "",
        "starts_at_1": "",
        "ends_at_0": "",
        "ends_at_1": "",
    }
    response = as_alice.post(f"{SCHEDULES}{job.schedule_id}/change/", data)
    assert response.status_code == 200
    assert "falls beyond the year 9999" in str(response.context["adminform"].form.errors)
    assert Schedule.objects.get(pk=job.schedule_id).interval == "PT1H"


def test_a_pause_reason_that_would_forge_a_log_line_is_refused(
    as_alice: Client, alices_job: Job
) -> None:
    response = as_alice.post(
        JOBS,
        {
            "action": "pause_jobs",
            "apply": "yes",
            "_selected_action": [alices_job.pk],
            "reason": "maintenance\njob.resumed job=1 by=admin",
        },
    )
    assert response.status_code == 200  # the reason page again, with its error
    assert "control character (U+000A" in str(response.context["form"].errors["reason"])
    assert Job.objects.get(pk=alices_job.pk).status == JobStatus.ACTIVE


@pytest.mark.parametrize("selected", ["abc", "1\x00", "1.5"])
@pytest.mark.parametrize(
    ("listing", "action"),
    [
        (JOBS, "run_now"),
        (JOBS, "pause_jobs"),
        (JOBS, "resume_jobs"),
        (EXECUTIONS, "cancel_executions"),
        (EXECUTIONS, "retry_executions"),
    ],
)
def test_a_selection_that_is_not_an_id_does_nothing_and_says_so(
    as_alice: Client, alices_job: Job, listing: str, action: str, selected: str
) -> None:
    response = as_alice.post(
        listing, {"action": action, "_selected_action": [alices_job.pk, selected]}, follow=True
    )
    assert response.status_code == 200
    said = [str(message) for message in response.context["messages"]]
    assert said == ["The selection holds something that is not an id; nothing was done."]
    assert not Execution.objects.exists()
    assert Job.objects.get(pk=alices_job.pk).status == JobStatus.ACTIVE


@pytest.mark.parametrize(
    "query",
    [
        f"{JOBS}?queue=%00",
        f"{JOBS}?q=%00",
        f"{JOBS}?health=%00&made_by=%00",
        f"{EXECUTIONS}?status__exact=%00",
        f"{EXECUTIONS}?q=night%00",
        f"{EXECUTIONS}?scheduled_for__year=9999&scheduled_for__month=12&scheduled_for__day=31",
        f"{EXECUTIONS}?scheduled_for__year=99999999999999999999",
        f"{SCHEDULES}?q=%00",
        "/admin/autocomplete/?app_label=scheduling&model_name=job&field_name=current_execution"
        "&term=%00",
    ],
)
def test_a_crafted_list_address_finds_nothing_instead_of_failing(
    as_alice: Client, alices_job: Job, query: str
) -> None:
    # The list answers as for any lookup it cannot use (back to the list, flagged ?e=1) or
    # finds nothing; the autocomplete refuses a field it does not serve (403).
    response = as_alice.get(query, follow=True)
    assert response.status_code in (200, 403)


def test_the_queue_filter_lists_only_the_users_own_queues(
    as_alice: Client, alice: Any, admin_user: Any
) -> None:
    create_job(
        owner=alice, name="mine", task=NOOP, every="PT1H", queue="reports", now=timezone.now()
    )
    create_job(
        owner=admin_user,
        name="theirs",
        task=NOOP,
        every="PT1H",
        queue="payroll",
        now=timezone.now(),
    )
    page = as_alice.get(JOBS).content.decode()
    assert "?queue=reports" in page
    assert "payroll" not in page


# --- the command line --------------------------------------------------------------------------

ADD = ["jobs", "add", "nightly", "--task", NOOP]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([*ADD, "--every", "P9999999999D"], "interval (--every): 'P9999999999D' is longer than"),
        (
            [*ADD, "--at", "9999-12-31T23:59:59Z", "--jitter", "3600"],
            "run_at (--at): the occurrence at 9999-12-31T23:59:59+00:00 plus 3600 s of jitter",
        ),
        ([*ADD, "--at", "0001-01-01T00:00:00+09:00"], "at: '0001-01-01T00:00:00+09:00' falls"),
        ([*ADD, "--every", "PT1H", "--queue", "celery\r\nX: y"], "queue: 'celery\\r\\nX: y' is"),
        ([*ADD, "--every", "PT1H", "--queue", "_kombu.binding.celery"], "queue: '_kombu."),
        ([*ADD, "--every", "PT1H", "--note", "a\x00b"], "note: holds a control character"),
        ([*ADD, "--every", "PT1H", "--kwargs", '{"a": "\\u0000"}'], "kwargs: holds '\\x00'"),
        (
            ["jobs", "add", "a\nb", "--task", NOOP, "--every", "PT1H"],
            "name: holds a control character (U+000A at position 2)",
        ),
        ([*ADD, "--every", "PT1H", "--owner", "root\x00"], "owner: no user named 'root\\x00'"),
        (["jobs", "show", "nightly\x00"], "name: no job named 'nightly\\x00'"),
        (["executions", "--job", "nightly\x00"], "name: no job named 'nightly\\x00'"),
        (["executions", "--owner", "root\x00"], "owner: no user named 'root\\x00'"),
        (["executions", "--limit", "99999999999999999999"], "--limit: '9999"),
        (["prune_history", "--older-than", "P9999999999D"], "older_than (--older-than): 'P99"),
        (["prune_history", "--older-than", "30d", "--keep-last", "99999999999"], "--keep-last"),
        (["prune_history", "--older-than", "30d", "--batch-size", "99999999999"], "--batch-size"),
    ],
)
def test_a_command_refuses_in_one_line_naming_the_field(
    admin_user: Any, argv: list[str], says: str
) -> None:
    with pytest.raises(CommandError) as caught:
        call_command(*argv, stdout=StringIO(), stderr=StringIO())
    line = str(caught.value)
    assert says in line and "\n" not in line, line
    assert not Job.objects.exists()


# --- scheduling.api: a domain app's calls ------------------------------------------------------


def schedule(**options: Any) -> Callable[[], Any]:
    timing = options.pop("timing", api.Every("PT1H"))
    return lambda: api.schedule_task(NOOP, timing=timing, **options)


@pytest.mark.parametrize(
    ("call", "field", "reason"),
    [
        (schedule(timing=api.Every("P9999999999D")), "interval", "longer than any calendar"),
        (schedule(timing=api.Every(timedelta.max)), "interval", "longer than any calendar"),
        (
            schedule(
                timing=api.Once(datetime.max.replace(tzinfo=UTC)),
                policies=api.Policies(jitter=timedelta(hours=1)),
            ),
            "run_at",
            "of jitter falls beyond the year 9999",
        ),
        (schedule(policies=api.Policies(retry_backoff=1e308)), "retry_backoff", "from 0 to"),
        (schedule(policies=api.Policies(retry_backoff=float("nan"))), "retry_backoff", "from 0"),
        (schedule(policies=api.Policies(retry_backoff_max=-1)), "retry_backoff_max", "from 0"),
        (schedule(policies=api.Policies(retry_backoff="soon")), "retry_backoff", "float"),
        (schedule(policies=api.Policies(timeout="long")), "timeout", "integer"),
        (schedule(policies=api.Policies(queue="a b")), "queue", "is not a queue name"),
        (schedule(policies=api.Policies(queue="w1.celery.pidbox")), "queue", "keeps for its own"),
        (schedule(policies=api.Policies(note="x\x00")), "note", "control character (U+0000"),
        (schedule(name="nightly\r\nforged"), "name", "control character (U+000D"),
        (schedule(args=["\x00"]), "args", "cannot be stored"),
    ],
)
def test_the_api_refuses_with_a_validation_error_naming_the_field(
    call: Callable[[], Any], field: str, reason: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        call()
    messages = caught.value.message_dict.get(field, [])
    assert any(reason in message for message in messages), caught.value.message_dict
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda job: api.pause(job, reason="deploy\njob.resumed job=1"), "reason"),
        (lambda job: api.pause(job, reason="x" * 501), "reason"),
        (lambda job: api.cancel(job, reason="cancelled\x1b[2K"), "reason"),
        (lambda job: api.executions(job, limit=10**30), "limit"),
        (lambda job: api.executions(job, limit=0), "limit"),
    ],
)
def test_the_api_refuses_a_reason_or_limit_it_cannot_keep(
    call: Callable[[Any], Any], field: str
) -> None:
    job = api.schedule_task(NOOP, timing=api.Every("PT1H"), name="nightly")
    with pytest.raises(ValidationError) as caught:
        call(job)
    assert list(caught.value.message_dict) == [field]
    assert Job.objects.get().status == JobStatus.ACTIVE


# --- the failure handler: a task's error is always recorded -----------------------------------


@pytest.fixture
def running(make_job: Callable[..., Job], now: datetime) -> Callable[..., Execution]:
    """A running first attempt of a job whose backoff was written behind the model."""

    def start(**columns: Any) -> Execution:
        job = make_job(max_retries=5)
        Job.objects.filter(pk=job.pk).update(**columns)  # raw: the model would refuse them
        execution = Execution.objects.create(job=job, task=job.task, scheduled_for=now)
        attempts.start_execution(execution_id=execution.pk, worker="w1", pid=1, now=now)
        return execution

    return start


@pytest.mark.parametrize(
    "columns",
    [
        {"retry_backoff": 1e308},
        {"retry_backoff": 1e308, "retry_backoff_max": 1e308},
        {"retry_backoff": float("inf"), "retry_backoff_max": float("nan")},
        {"retry_backoff": -5.0},
    ],
)
def test_a_backoff_written_behind_the_model_still_records_the_error_and_the_retry(
    running: Callable[..., Execution], now: datetime, columns: dict[str, float]
) -> None:
    execution = running(**columns)
    status = attempts.fail_attempt(
        execution_id=execution.pk,
        error="ValueError: the real reason",
        outcome=AttemptOutcome.FAILED,
        now=now,
    )
    execution.refresh_from_db()
    assert status == ExecutionStatus.RETRY
    assert execution.last_error == "ValueError: the real reason"
    assert now <= execution.retry_at <= now + WEEK
    assert execution.attempts.get().error == "ValueError: the real reason"


def test_a_task_asking_to_retry_in_1e308_seconds_is_retried_within_a_week(
    running: Callable[..., Execution], now: datetime
) -> None:
    execution = running()
    attempts.fail_attempt(
        execution_id=execution.pk,
        error="Retry: later",
        outcome=AttemptOutcome.FAILED,
        now=now,
        retry_in=1e308,
    )
    execution.refresh_from_db()
    assert (execution.status, execution.retry_at) == (ExecutionStatus.RETRY, now + WEEK)


@pytest.mark.parametrize("attempt", [1, 64, 1100, 2**31 - 1])
def test_backoff_arithmetic_never_overflows_whatever_the_attempt(attempt: int) -> None:
    delay = schedules.retry_delay(attempt=attempt, base=1e308, cap=1e308, key=7)
    assert timedelta(0) <= delay <= timedelta(seconds=conf.RETRY_DELAY_LIMIT)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("queue", ["celery\r\nX: y", "_kombu.binding.celery", "amq.direct"])
def test_a_queue_written_behind_the_rules_fails_its_occurrence_and_writes_no_broker_key(
    owner: Any, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On every claim path: the locking statement plans an interval job itself once it knows
    its interval text, and leaves one with such a queue to Python, which fails it."""
    from django.db import connection

    from scheduling.stages import claims

    monkeypatch.setattr(plain_claims, "STEPS", plain_claims.Steps())
    plain_claims.STEPS.learn("PT1H", timedelta(hours=1))
    healthy = create_job(owner=owner, name="healthy", task=NOOP, every="PT1H",
                              now=timezone.now())  # fmt: skip
    bad = create_job(owner=owner, name="bad", task=NOOP, every="PT1H", now=timezone.now())
    with connection.cursor() as cursor:
        cursor.execute("UPDATE scheduling_job SET queue = %s WHERE id = %s", [queue, bad.pk])

    claim = claims.claim_due_jobs(now=timezone.now() + timedelta(seconds=1), limit=100)

    assert [bell.queue for bell in claim.bells] == ["celery"]
    assert Execution.objects.get(job=healthy).status == ExecutionStatus.PENDING
    failed = Execution.objects.get(job=bad)
    assert failed.status == ExecutionStatus.FAILED
    assert failed.last_error.startswith("queue: ")
