"""A job's arguments have a depth and a size limit at every door, and a worker never dies of
one message.

Nested 900 levels deep, a job's kwargs once killed every worker's main process (pickling them
for the pool raised ``RecursionError``); nested 3,000 deep, the admin answered HTTP 500. Here
500 levels stand for the first (every supported Python reads them) and 10,000 for text nested
past what any of them reads. Here
the model, the admin, the command line, the API and Django's ``enqueue`` refuse such values
in one line naming the field; a row written behind their back fails its occurrence at the
claim, on the path planned inside the locking statement too; and a message that carries them
anyway is refused alone by the worker, which goes on serving the next one.
"""

from __future__ import annotations

import io
import json
import pickle
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django.utils import timezone

from scheduling import api
from scheduling.models import Execution, ExecutionStatus, Job
from scheduling.rules import arguments
from scheduling.rules.registry import EXECUTION_HEADER
from scheduling.stages import claims, plain_claims
from tests.conftest import Processes, wait_for
from tests.factories import create_job
from tests.scheduling.test_admin_jobs import form_data
from tests.scheduling.test_worker_lifecycle import SLOW, send_message, start_worker
from tests.tasktable_app import tasks as django_tasks

pytestmark = pytest.mark.specification

try:  # Django 6
    from django.tasks.exceptions import InvalidTask
except ImportError:  # Django 5.2 with the backport
    from django_tasks.exceptions import InvalidTaskError as InvalidTask

NOOP = "scheduling.diagnostics.noop"
db = pytest.mark.django_db


def nested(levels: int) -> dict[str, Any]:
    """``{"a": {"a": … {}}}``, ``levels`` objects deep, built without recursion."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def nested_text(levels: int) -> str:
    """The same as JSON text, for depths Python's own encoder cannot write."""
    return '{"a": ' * (levels - 1) + "{}" + "}" * (levels - 1)


def huge() -> dict[str, Any]:
    return {"blob": "x" * 70_000}


# --- the measure ----------------------------------------------------------------------------


def test_depth_is_counted_in_lists_and_objects_without_recursion() -> None:
    assert arguments.nesting_depth(5) == 0
    assert arguments.nesting_depth([]) == 1
    assert arguments.nesting_depth({"a": [1, {"b": []}]}) == 4
    assert arguments.nesting_depth(nested(100_000)) == 100_000


def test_the_limits_are_settings_and_the_refusal_names_them(settings: Any) -> None:
    assert arguments.problem(nested(32)) is None
    assert arguments.problem(nested(33)) == (
        "is nested 33 levels deep; the limit is 32 (SCHEDULING_ARGS_MAX_DEPTH)"
    )
    assert "the limit is 65,536 (SCHEDULING_ARGS_MAX_BYTES)" in str(arguments.problem(huge()))
    settings.SCHEDULING_ARGS_MAX_DEPTH = 40
    settings.SCHEDULING_ARGS_MAX_BYTES = 100_000
    assert arguments.problem(nested(33)) is None and arguments.problem(huge()) is None


# --- every door -----------------------------------------------------------------------------


@db
@pytest.mark.parametrize(
    ("value", "reason"),
    [(nested(500), "nested 500 levels deep"), (huge(), "bytes as JSON; the limit is 65,536")],
)
def test_the_model_and_the_api_refuse_arguments_over_the_limits(
    owner: Any, value: Any, reason: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        create_job(owner=owner, name="deep", task=NOOP, every="PT1H", kwargs=value,
                        now=timezone.now())  # fmt: skip
    assert reason in caught.value.message_dict["kwargs"][0]
    with pytest.raises(ValidationError) as caught:
        api.schedule_task(NOOP, timing=api.Every("PT1H"), kwargs=value, owner=owner)
    assert reason in caught.value.message_dict["kwargs"][0]
    assert not Job.objects.exists()


@db
def test_a_number_too_long_for_python_to_write_is_refused_naming_the_field(owner: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        api.schedule_task(NOOP, timing=api.Every("PT1H"), kwargs={"n": 10**5000}, owner=owner)
    assert "holds a number too long to write as JSON" in caught.value.message_dict["kwargs"][0]


@db
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (nested_text(500), "kwargs: is nested 500 levels deep; the limit is 32"),
        (nested_text(10_000), "kwargs: is nested deeper than Python's JSON reader"),
        (json.dumps(huge()), "kwargs: is 70,011 bytes as JSON"),
    ],
)
def test_the_command_line_refuses_them_in_one_line(owner: Any, text: str, reason: str) -> None:
    with pytest.raises(CommandError) as caught:
        call_command("jobs", "add", "deep", "--task", NOOP, "--every", "PT1H", "--kwargs", text,
                     "--owner", owner.username, stderr=io.StringIO())  # fmt: skip
    message = str(caught.value)
    assert reason in message and "\n" not in message
    assert not Job.objects.exists()


@db
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (nested_text(500), "nested 500 levels deep"),
        # 3,000 levels: within what Python 3.13's reader follows, past 3.11's and 3.12's.
        (nested_text(3000), "; the limit is 32"),
        (nested_text(10_000), "nested deeper than Python's JSON reader"),
        (json.dumps(huge()), "bytes as JSON"),
        ('{"n": ' + "9" * 5000 + "}", "holds a number Python will not read"),
    ],
)
def test_the_admin_answers_with_a_form_error_not_a_server_error(
    admin_client: Client, text: str, reason: str
) -> None:
    response = admin_client.post("/admin/scheduling/job/add/", form_data(kwargs=text))
    assert response.status_code == 200
    assert reason in " ".join(response.context["adminform"].form.errors["kwargs"])
    assert not Job.objects.exists()


@db
def test_django_s_enqueue_refuses_them_with_the_framework_s_error() -> None:
    with pytest.raises(InvalidTask, match="kwargs is nested 501 levels deep"):
        django_tasks.echo.enqueue(value=nested(500))
    with pytest.raises(InvalidTask, match=r"args is .* bytes as JSON"):
        django_tasks.echo.enqueue(huge())
    assert not Execution.objects.exists()


# --- rows written behind the doors ----------------------------------------------------------

#: name -> the kwargs written by raw SQL, and what the failed occurrence must say
BEHIND = {
    "deep": (nested_text(500), "kwargs: is nested 500 levels deep; the limit is 32"),
    "unreadable": (nested_text(10_000), "kwargs: is nested deeper than Python's JSON reader"),
    "huge": (json.dumps(huge()), "kwargs: is 70,011 bytes as JSON; the limit is 65,536"),
}


def storable() -> dict[str, tuple[str, str]]:
    """The rows of ``BEHIND`` this database takes: SQLite's JSON check refuses nesting past
    1,000 levels, so text nested past what Python reads never gets in there; MariaDB's refuses
    32 levels and more, so no row nested past the limit does."""
    if connection.vendor == "postgresql":
        return BEHIND
    if connection.vendor == "mysql":
        return {name: row for name, row in BEHIND.items() if name == "huge"}
    return {name: row for name, row in BEHIND.items() if name != "unreadable"}


def written_behind(owner: Any, name: str, kwargs_text: str) -> Job:
    """An interval job due now (the kind the locking statement plans itself) whose kwargs are
    then overwritten by raw SQL."""
    job = create_job(owner=owner, name=name, task=NOOP, every="PT1H", now=timezone.now())
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE scheduling_job SET kwargs = %s{cast} WHERE id = %s", [kwargs_text, job.pk]
        )
    return job


@pytest.mark.django_db(transaction=True)
def test_the_claim_fails_an_occurrence_whose_row_breaks_the_limits_and_serves_the_rest(
    owner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On PostgreSQL the locking statement plans a row itself once the process has read its
    # interval text; SQLite plans every row in Python.
    monkeypatch.setattr(plain_claims, "STEPS", plain_claims.Steps())
    plain_claims.STEPS.learn("PT1H", timedelta(hours=1))
    healthy = create_job(owner=owner, name="healthy", task=NOOP, every="PT1H",
                              kwargs={"small": [1, 2]}, now=timezone.now())  # fmt: skip
    poisoned = {name: written_behind(owner, name, text) for name, (text, _) in storable().items()}

    claim = claims.claim_due_jobs(now=timezone.now() + timedelta(seconds=1), limit=100)

    assert [bell.kwargs for bell in claim.bells] == [{"small": [1, 2]}]
    assert Execution.objects.get(job=healthy).status == ExecutionStatus.PENDING
    for name, (_, reason) in storable().items():
        failed = Execution.objects.get(job=poisoned[name])
        assert failed.status == ExecutionStatus.FAILED, name
        assert failed.last_error.startswith(reason), (name, failed.last_error[:200])


@db
def test_every_reader_shows_such_rows(owner: Any, admin_client: Client) -> None:
    for name, (text, _) in storable().items():
        written_behind(owner, name, text)
    for command in (["jobs", "list"], ["jobs", "list", "--json"],
                    *(["jobs", "show", name] for name in storable())):  # fmt: skip
        out = io.StringIO()
        call_command(*command, stdout=out, stderr=io.StringIO())
        assert out.getvalue(), command
    assert admin_client.get("/admin/scheduling/job/").status_code == 200
    for job in Job.objects.filter(name__in=storable()):
        response = admin_client.get(f"/admin/scheduling/job/{job.pk}/change/")
        assert response.status_code == 200, job.name


# --- the worker -----------------------------------------------------------------------------


def publish_raw(env: dict[str, str], *, task: str, kwargs_text: str, execution: Execution) -> None:
    """A message for ``execution`` whose kwargs are ``kwargs_text`` as written: no encoder of
    Python's could write the deepest of them, but anything that reaches the broker can."""
    from config.celery import app

    headers, properties, _, _ = app.amqp.as_task_v2(str(execution.task_id), task, args=(),
                                                    kwargs={})  # fmt: skip
    headers[EXECUTION_HEADER] = execution.pk
    body = f'[[], {kwargs_text}, {{"callbacks": null, "errbacks": null, "chain": null, ' \
           '"chord": null}]'  # fmt: skip
    transport = {**app.conf.broker_transport_options,
                 "global_keyprefix": env["CELERY_REDIS_KEY_PREFIX"]}  # fmt: skip
    with app.connection_for_write(env["CELERY_BROKER_URL"], transport_options=transport) as conn:
        conn.default_channel.basic_publish(
            conn.default_channel.prepare_message(
                body, None, "application/json", "utf-8", headers, properties
            ),
            exchange="",
            routing_key="celery",
        )


def pickle_breaking_depth() -> int:
    """A nesting this Python's JSON reader follows and its pickler does not: what a worker's
    main process decodes and then dies pickling for the pool (500 levels on Python 3.11, 900
    on 3.12, about 6,000 on 3.13, depending on the stack)."""
    for levels in (500, 900, 1_500, 3_000, 6_000, 7_000):
        try:
            value = json.loads(nested_text(levels))
        except RecursionError:
            break
        try:
            pickle.dumps(value)
        except RecursionError:
            return levels
    return 500


def queued(job: Job) -> Execution:
    return Execution.objects.create(
        job=job, task=job.task, scheduled_for=timezone.now(), status=ExecutionStatus.QUEUED,
        task_id=uuid.uuid4(), queued_at=timezone.now(),
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_refuses_such_a_message_alone_and_serves_the_next(
    owner: Any, processes: Processes, process_env: dict[str, str]
) -> None:
    job = create_job(owner=owner, name="target", task=NOOP, every="PT1H",
                          now=timezone.now() + timedelta(days=1))  # fmt: skip
    deep, unreadable, good = queued(job), queued(job), queued(job)
    levels = pickle_breaking_depth()
    publish_raw(process_env, task=NOOP, kwargs_text=nested_text(levels), execution=deep)
    publish_raw(process_env, task=NOOP, kwargs_text=nested_text(10_000), execution=unreadable)
    send_message(process_env, NOOP, task_id=str(good.task_id),
                 headers={EXECUTION_HEADER: good.pk})  # fmt: skip
    worker = start_worker(processes, process_env, "guarded", concurrency=1)

    def status(execution: Execution) -> str:
        return str(Execution.objects.get(pk=execution.pk).status)

    wait_for(lambda: status(good) == ExecutionStatus.COMPLETED, timeout=SLOW,
             message="the message after them runs")  # fmt: skip
    wait_for(lambda: status(deep) == ExecutionStatus.FAILED, timeout=SLOW,
             message="the deep message's execution is failed")  # fmt: skip
    assert worker.poll() is None, processes.log_of(worker)
    refused = Execution.objects.get(pk=deep.pk)
    assert refused.last_error == (
        f"message refused by the worker: kwargs: is nested {levels:,} levels deep; the limit "
        "is 32 (SCHEDULING_ARGS_MAX_DEPTH)"
    )
    assert not refused.attempts.exists(), "nothing of it reached a pool process"
    log = processes.log_of(worker)
    assert "message.dropped" in log
    # Text nested past what Python reads never decodes: dropped as undecodable, its run failed.
    assert Execution.objects.get(pk=unreadable.pk).last_error == (
        "message refused by the worker: body: is nested deeper than Python's JSON reader can "
        "follow"
    )
