"""Arguments are checked where they are typed: a job's ``args`` and ``kwargs`` must fit its
task's parameters at every door (the admin's form, ``jobs add``/``jobs edit``,
``scheduling.api``, ``import_beat``, Django's ``enqueue``), refused in one line naming the
argument. A job whose arguments stopped fitting after a deploy is named by ``manage.py check``
and its run fails once, naming why, instead of failing every retry with ``TypeError``.
"""

from __future__ import annotations

import importlib.util
import json
from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import Client

from scheduling import api, checks
from scheduling.models import Execution, ExecutionStatus, Job
from scheduling.rules import arguments
from scheduling.rules.validation import call_error, call_errors
from scheduling.worker.taskbase import schedulable_task
from tests.conftest import Processes, scheduler_command, wait_for
from tests.scheduling.test_admin_jobs import JOBS, form_data, form_of
from tests.scheduling.test_worker_lifecycle import SLOW, due_job, execution_of, start_worker
from tests.tasktable_app import tasks

pytestmark = pytest.mark.specification

try:  # Django 6
    from django.tasks.exceptions import InvalidTask
except ImportError:  # Django 5.2 with the backport
    from django_tasks.exceptions import InvalidTaskError as InvalidTask

db = pytest.mark.django_db

CLOSE = "tests.arguments.close_books"
SHOWN = "tests.arguments.close_books(period, *, dry_run=False)"
TICK = "tests.tasktable_app.tasks.tick"


@schedulable_task(name=CLOSE, bind=True)
def close_books(self: Any, period: str, *, dry_run: bool = False) -> str:
    """A bound task: Celery gives ``self``, the job gives the rest."""
    return period


@schedulable_task(name="tests.arguments.unchecked", bind=True, typing=False)
def unchecked(self: Any, only: int) -> int:
    """Declared with Celery's ``typing=False``: its calls are not checked, by Celery or here."""
    return only


# --- the rule ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ([], {"nope": 1, "period": "2026-01"}, f"kwargs: 'nope' is not a parameter of {SHOWN}"),
        ([1, 2, 3], {}, "args: close_books() takes 1 positional argument but 3 were given"),
        ([], {}, "kwargs: missing required argument 'period'"),
        ([], {"dry_run": True}, "kwargs: missing required argument 'period'"),
        (
            ["2026-01"],
            {"period": 2},
            "kwargs: 'period' is given twice: by position in args and by name",
        ),
        (["2026-01", True], {}, "args: close_books() takes 1 positional argument but 2 were given"),
    ],
)
def test_arguments_a_task_cannot_take_are_refused_naming_the_argument(
    args: list[Any], kwargs: dict[str, Any], expected: str
) -> None:
    assert call_error(CLOSE, args, kwargs) == expected


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (["2026-01"], {}),
        ([], {"period": "2026-01", "dry_run": True}),
        (["2026-01"], {"dry_run": 0}),
    ],
)
def test_arguments_a_bound_task_takes_fit_without_its_self(
    args: list[Any], kwargs: dict[str, Any]
) -> None:
    assert call_errors(CLOSE, args, kwargs) == {}


def test_a_task_that_takes_anything_or_asked_not_to_be_checked_accepts_anything() -> None:
    assert call_errors("scheduling.diagnostics.noop", [1, 2], {"any": 1}) == {}
    assert call_errors("tests.arguments.unchecked", [1, 2, 3], {"nope": 1}) == {}


def test_a_signature_that_cannot_be_read_fits_every_call() -> None:
    """A builtin's parameters may not be readable; the rule then accepts, as Celery does."""
    unreadable = arguments.function_signature(dict.fromkeys.__call__)  # type: ignore[attr-defined]
    assert arguments.binding_error(unreadable, [1, 2, 3], {"x": 1}, name="builtin") is None


def test_a_django_task_s_context_is_not_an_argument() -> None:
    signature = arguments.function_signature(tasks.who_am_i.func, takes_context=True)
    assert arguments.binding_error(signature, [], {}, name="who_am_i") is None
    assert arguments.binding_error(signature, [1], {}, name="t.who_am_i") == (
        "args",
        "who_am_i() takes 0 positional arguments but 1 was given",
    )


def test_json_keys_that_are_not_text_are_found_at_any_depth() -> None:
    assert arguments.key_problem({"a": [{"b": {2: "x"}}]}) == (
        "has the key 2 (int); JSON object keys must be text"
    )
    assert arguments.key_problem({"a": [{"b": {"2": "x"}}]}) is None


# --- every door --------------------------------------------------------------------------------


@db
def test_the_admin_shows_the_refusal_beside_the_field(admin_client: Client, admin_user: Any):
    for field, typed, expected in (
        ("kwargs", '{"nope": 1}', f"'nope' is not a parameter of {SHOWN}"),
        ("args", "[1, 2, 3]", "close_books() takes 1 positional argument but 3 were given"),
        ("kwargs", "{}", "missing required argument 'period'"),
    ):
        data = form_data(owner=admin_user.pk, task=CLOSE, **{field: typed})
        response = admin_client.post(f"{JOBS}add/", data)
        assert response.status_code == 200
        assert form_of(response).errors == {field: [expected]}
    assert not Job.objects.exists()
    fitting = form_data(owner=admin_user.pk, task=CLOSE, kwargs='{"period": "2026-01"}')
    assert admin_client.post(f"{JOBS}add/", fitting).status_code == 302


def refused(*argv: str) -> str:
    with pytest.raises(CommandError) as caught:
        call_command(*argv, stdout=StringIO())
    message = str(caught.value)
    assert "\n" not in message
    return message


@db
def test_jobs_add_and_edit_refuse_arguments_the_task_cannot_take(admin_user: Any) -> None:
    add = ("jobs", "add", "close", "--task", CLOSE, "--every", "PT1H")
    assert refused(*add, "--kwargs", '{"nope": 1}') == (
        f"kwargs: 'nope' is not a parameter of {SHOWN}"
    )
    assert refused(*add, "--args", "[1, 2, 3]") == (
        "args: close_books() takes 1 positional argument but 3 were given"
    )
    assert refused(*add) == "kwargs: missing required argument 'period'"
    assert not Job.objects.exists()

    call_command(*add, "--kwargs", '{"period": "2026-01"}', stdout=StringIO())
    assert refused("jobs", "edit", "close", "--kwargs", '{"period": 1, "nope": 2}') == (
        f"kwargs: 'nope' is not a parameter of {SHOWN}"
    )
    # A new task is held to the arguments the job keeps.
    assert refused("jobs", "edit", "close", "--task", "scheduling.diagnostics.sleep") == (
        "kwargs: 'period' is not a parameter of scheduling.diagnostics.sleep(seconds=1.0)"
    )
    assert Job.objects.get(name="close").kwargs == {"period": "2026-01"}


@db
def test_a_django_task_s_own_parameters_are_what_a_job_must_fit(admin_user: Any) -> None:
    """Its Celery runner takes anything; the job is held to the function's parameters."""
    add = ("jobs", "add", "ticking", "--task", TICK, "--every", "PT1M")
    assert refused(*add, "--kwargs", '{"nope": 1}') == (
        f"kwargs: 'nope' is not a parameter of {TICK}(label)"
    )
    assert refused(*add) == "kwargs: missing required argument 'label'"


@db
def test_the_api_refuses_arguments_the_task_cannot_take(owner: Any, now: Any) -> None:
    def schedule(**target: Any) -> dict[str, list[str]]:
        with pytest.raises(ValidationError) as caught:
            api.schedule_task(CLOSE, timing=api.Every("PT1H"), now=now, **target)
        return caught.value.message_dict

    assert schedule(kwargs={"nope": 1}) == {"kwargs": [f"'nope' is not a parameter of {SHOWN}"]}
    assert schedule(args=[1, 2, 3]) == {
        "args": ["close_books() takes 1 positional argument but 3 were given"]
    }
    assert schedule(kwargs={1: "a"}) == {
        "kwargs": ["has the key 1 (int); JSON object keys must be text"]
    }
    job = api.schedule_task(CLOSE, timing=api.Every("PT1H"), kwargs={"period": "x"}, now=now)
    with pytest.raises(ValidationError) as caught:
        api.edit(job.id, kwargs={})
    assert caught.value.message_dict == {"kwargs": ["missing required argument 'period'"]}
    assert Job.objects.get(pk=job.id).kwargs == {"period": "x"}


@db
@pytest.mark.skipif(
    importlib.util.find_spec("django_celery_beat") is None,
    reason="django-celery-beat does not admit this Django",
)
def test_import_beat_skips_an_entry_whose_arguments_do_not_fit(admin_user: Any) -> None:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    hourly = IntervalSchedule.objects.create(every=1, period=IntervalSchedule.HOURS)
    PeriodicTask.objects.create(name="close", task=CLOSE, interval=hourly, args="[1, 2, 3]")
    PeriodicTask.objects.create(
        name="close-ok", task=CLOSE, interval=hourly, kwargs='{"period": "2026-01"}'
    )
    out = StringIO()
    call_command("import_beat", "--json", stdout=out)
    rows = {row["name"]: row for row in json.loads(out.getvalue())["rows"]}
    assert rows["close"]["action"] == "skipped"
    assert rows["close"]["detail"] == (
        "args: close_books() takes 1 positional argument but 3 were given"
    )
    assert rows["close-ok"]["action"] == "created"
    assert list(Job.objects.values_list("name", flat=True)) == ["close-ok"]


@db
def test_enqueue_refuses_arguments_the_function_cannot_take() -> None:
    shown = "tests.tasktable_app.tasks.add(a, b)"
    with pytest.raises(InvalidTask, match=r"^Task args: add\(\) takes 2 positional arguments "):
        tasks.add.enqueue(1, 2, 3)
    with pytest.raises(InvalidTask) as caught:
        tasks.add.enqueue(1, 2, nope=1)
    assert str(caught.value) == f"Task kwargs: 'nope' is not a parameter of {shown}"
    with pytest.raises(InvalidTask, match=r"^Task kwargs: missing required argument 'b'$"):
        tasks.add.enqueue(1)
    assert not Execution.objects.exists()


@db
def test_enqueue_refuses_object_keys_that_are_not_text_at_any_depth() -> None:
    """JSON would hand the task ``{"1": "a"}`` for ``{1: "a"}``: not the call that was made."""
    with pytest.raises(InvalidTask, match=r"^Task args has the key 1 \(int\); JSON object keys"):
        tasks.echo.enqueue({1: "a"})
    with pytest.raises(InvalidTask, match=r"has the key 2\.5 \(float\)"):
        tasks.echo.enqueue(value=[{"deep": {2.5: "x"}}])
    assert not Execution.objects.exists()


@pytest.mark.parametrize("priority", ["high", None, float("nan"), 1.5, True])
def test_a_priority_that_is_not_a_whole_number_is_the_framework_s_invalid_task(
    priority: Any,
) -> None:
    if priority is None:  # using() leaves None as it is: the framework's "no change"
        assert tasks.add.using(priority=priority).priority == 0
        return
    with pytest.raises(InvalidTask, match=r"^priority must be a whole number between -100"):
        tasks.add.using(priority=priority)


# --- after a deploy ---------------------------------------------------------------------------


@db
def test_check_names_a_job_whose_arguments_no_longer_fit(make_job: Any) -> None:
    job = make_job(name="close", task=CLOSE, kwargs={"period": "2026-01"})
    assert checks.check_job_arguments() == []
    # The task's parameters changed under the stored row: written as the old release saved it.
    Job.objects.filter(pk=job.pk).update(kwargs={"period": "2026-01", "ledger": "main"})
    (warning,) = checks.check_job_arguments()
    assert (warning.id, warning.obj) == ("scheduling.W013", "close")
    assert warning.msg == (
        f"Job 'close' (owner owner) runs {CLOSE} with arguments that no longer fit it: "
        f"kwargs: 'ledger' is not a parameter of {SHOWN}."
    )
    out, err = StringIO(), StringIO()
    call_command("check", stdout=out, stderr=err)
    assert "scheduling.W013" in out.getvalue() + err.getvalue()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_run_whose_arguments_no_longer_fit_fails_once_naming_why(
    owner: Any, processes: Processes, process_env: dict[str, str]
) -> None:
    job = due_job(
        owner, "sleeps", "scheduling.diagnostics.sleep", kwargs={"seconds": 0}, max_retries=3
    )
    Job.objects.filter(pk=job.pk).update(kwargs={"seconds": 0, "nope": 1})
    start_worker(processes, process_env, "unfit")
    processes.start(scheduler_command(), env=process_env, name="scheduler")

    wait_for(
        lambda: Execution.objects.filter(job=job, status=ExecutionStatus.FAILED).exists(),
        timeout=SLOW,
        message="the occurrence fails",
    )
    execution = execution_of(job)
    assert execution is not None and execution.retry_count == 0
    (attempt,) = execution.attempts.all()
    assert attempt.outcome == "failed"
    assert attempt.error.startswith(
        "ArgumentsDoNotFit: kwargs: 'nope' is not a parameter of "
        "scheduling.diagnostics.sleep(seconds=1.0)\n"
    )
    assert execution.last_error == attempt.error
