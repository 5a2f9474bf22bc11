"""The framework's contract for a backend, as Duecourse's backend keeps it.

Every public behaviour that Django's own specification of the Tasks framework (Django's
``tests/tasks``) asks of a backend that runs tasks elsewhere, keeps their results and supports
``run_after``, priorities and async tasks: what an enqueue returns, what ``get_result`` reads
back (the task as enqueued, with its ``using(...)`` options and backend alias), the validation
of a task and its arguments, and, on a real worker, the results of runs that succeed, fail,
return what cannot be stored, take their context or are retried. docs/django-tasks.md, *The
framework's contract*, lists them and what does not apply.

The worker is one for the whole module (no test here stops it); the tests that need the
scheduler (a deferred run, retries) start their own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pickle
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from scheduling.djangotasks.backend import DuecourseTask, DuecourseTaskBackend
from scheduling.djangotasks.framework import FRAMEWORK, Task, task, task_backends
from scheduling.models import Attempt, Execution
from tests.conftest import (
    Processes,
    celery_worker_command,
    processes_environment,
    wait_for,
    with_key_prefix,
)
from tests.scheduling.test_worker_lifecycle import SLOW, wait_ready
from tests.tasktable_app import contract_tasks as t

try:  # Django 6
    from django.tasks import TaskResultStatus
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
except ImportError:  # Django 5.2 with the backport
    from django_tasks import TaskResultStatus
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch

BACKEND = f"{DuecourseTaskBackend.__module__}.DuecourseTaskBackend"
#: The queues of the default alias, here and in the worker (``TASKS_QUEUES``).
QUEUES = ["default", "reports"]
MISSING = "00000000-0000-0000-0000-000000000000"

db = pytest.mark.django_db
committed = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def aliases(settings: Any) -> None:
    """The default alias with two queues, a second alias of the same backend, and an alias
    whose empty ``QUEUES`` lets any queue name through."""
    settings.TASKS = {
        "default": {"BACKEND": BACKEND, "QUEUES": QUEUES},
        "second": {"BACKEND": BACKEND, "QUEUES": QUEUES},
        "open": {"BACKEND": BACKEND, "QUEUES": []},
    }


def later() -> datetime:
    """A ``run_after`` far enough ahead that the run waits in the ledger for the whole test."""
    return timezone.now() + timedelta(hours=1)


# --- what an enqueue returns ------------------------------------------------------------------


@db
@pytest.mark.parametrize("declared", [t.noop, t.noop_async], ids=["sync", "async"])
def test_an_enqueue_returns_a_ready_result_with_nothing_run_yet(declared: Task) -> None:
    result = declared.enqueue(1, two=3)
    assert result.status == TaskResultStatus.READY and result.is_finished is False
    assert (result.started_at, result.finished_at, result.last_attempted_at) == (None,) * 3
    assert result.enqueued_at is not None and result.enqueued_at <= timezone.now()
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value
    assert result.task == declared and result.backend == "default"
    assert (result.args, result.kwargs) == ([1], {"two": 3})
    assert (result.attempts, result.worker_ids, result.errors) == (0, [], [])
    assert str(uuid.UUID(result.id)) == result.id


@db
def test_arguments_come_back_as_the_framework_normalizes_them() -> None:
    result = t.noop.enqueue((1, 2), b"bytes", key={"nested": (3,)})
    assert (result.args, result.kwargs) == ([[1, 2], "bytes"], {"key": {"nested": [3]}})
    assert t.noop.get_result(result.id).args == [[1, 2], "bytes"]


@db
@pytest.mark.parametrize(
    "value", [datetime.now(), object(), {1, 2}], ids=["datetime", "object", "set"]
)
def test_an_argument_the_framework_cannot_store_raises_its_own_type_error(value: Any) -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        t.noop.enqueue(value)
    with pytest.raises(TypeError, match="Unsupported type"):
        t.noop.enqueue(key=[value])
    assert not Execution.objects.exists()


@committed
def test_aenqueue_refuses_what_enqueue_refuses_with_the_same_type_error() -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        asyncio.run(t.noop.aenqueue(datetime.now()))
    assert not Execution.objects.exists()


@db
def test_enqueue_validates_the_task_against_the_settings_of_the_moment(settings: Any) -> None:
    to_reports = t.noop.using(queue_name="reports")
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"]}}
    with pytest.raises(InvalidTask, match="Queue 'reports' is not valid for backend"):
        to_reports.enqueue()
    assert not Execution.objects.exists()


@db
def test_inside_a_transaction_the_result_is_enqueued_at_once_and_waits_for_the_commit() -> None:
    with transaction.atomic():
        result = t.noop.using(run_after=later()).enqueue()
        assert result.enqueued_at is not None and result.status == TaskResultStatus.READY


@db
def test_the_enqueue_is_logged_by_the_framework_once_committed(
    caplog: pytest.LogCaptureFixture, django_capture_on_commit_callbacks: Any
) -> None:
    """The framework logs under its own module's name (``django.tasks``; ``django_tasks`` on
    Django 5.2) from its receiver of ``task_enqueued``."""
    with (
        caplog.at_level(logging.DEBUG, logger=FRAMEWORK),
        django_capture_on_commit_callbacks(execute=True),
    ):
        result = t.noop.using(run_after=later()).enqueue()
        assert not [r for r in caplog.records if r.name == FRAMEWORK]
    [logged] = [r.getMessage() for r in caplog.records if r.name == FRAMEWORK]
    assert "enqueued" in logged and result.id in logged


# --- what get_result reads back ---------------------------------------------------------------


@db
def test_get_result_equals_the_enqueued_result_with_the_task_as_enqueued() -> None:
    when = later()
    plain = t.noop.enqueue(1, two=3)
    moved = t.noop.using(priority=7, queue_name="reports", run_after=when).enqueue("x")
    backend = task_backends["default"]
    for result in (plain, moved):
        assert backend.get_result(result.id) == result
        assert t.noop.get_result(result.id) == result
    read = backend.get_result(moved.id)
    assert (read.task.priority, read.task.queue_name, read.task.run_after) == (7, "reports", when)
    assert read.enqueued_at == moved.enqueued_at < when, "enqueued, not due"
    assert isinstance(read.task, DuecourseTask) and read.task.timeout == t.noop.timeout


@committed
def test_aget_result_and_arefresh_read_the_same_as_get_result_and_refresh() -> None:
    async def read(result_id: str) -> Any:
        return await t.noop.aget_result(result_id)

    result = asyncio.run(t.noop.using(priority=-3, run_after=later()).aenqueue(5))
    assert asyncio.run(read(result.id)) == result == t.noop.get_result(result.id)
    before = dataclasses.asdict(result)
    result.refresh()
    assert dataclasses.asdict(result) == before, "nothing ran: refresh changes nothing"
    asyncio.run(result.arefresh())
    assert dataclasses.asdict(result) == before


@db
def test_a_result_from_a_second_alias_is_read_through_that_alias(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = t.noop.using(backend="second", run_after=later()).enqueue()
    assert (result.backend, result.task.backend) == ("second", "second")
    read_through: list[str] = []
    for alias in ("default", "second"):
        backend = task_backends[alias]
        original = backend.get_result

        def spy(result_id: str, alias: str = alias, original: Any = original) -> Any:
            read_through.append(alias)
            return original(result_id)

        monkeypatch.setattr(backend, "get_result", spy)
    result.refresh()
    assert read_through == ["second"]
    fetched = task_backends["second"].get_result(result.id)
    assert fetched == result and fetched.task.backend == "second"


@committed
def test_an_unknown_or_malformed_id_does_not_exist() -> None:
    for result_id in ("123", "not-a-uuid", MISSING):
        with pytest.raises(TaskResultDoesNotExist):
            t.noop.get_result(result_id)
        with pytest.raises(TaskResultDoesNotExist):
            task_backends["default"].get_result(result_id)
        with pytest.raises(TaskResultDoesNotExist):
            asyncio.run(t.noop.aget_result(result_id))


@committed
def test_a_result_of_another_task_is_a_mismatch() -> None:
    result = t.noop_async.using(run_after=later()).enqueue()
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        t.noop.get_result(result.id)
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        asyncio.run(t.noop.aget_result(result.id))


@db
def test_a_run_stays_readable_after_its_queue_leaves_the_settings(settings: Any) -> None:
    result = t.noop.using(queue_name="reports", run_after=later()).enqueue()
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"]}}
    read = task_backends["default"].get_result(result.id)
    assert read.task.queue_name == "reports" and read.id == result.id


# --- tasks, using() and validation -------------------------------------------------------------


def test_the_backend_says_what_it_supports_and_passes_its_checks() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, DuecourseTaskBackend) and backend.alias == "default"
    assert backend.options == {}
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority
    assert list(backend.check()) == []
    assert isinstance(t.noop, DuecourseTask) and isinstance(t.noop_async, DuecourseTask)


def test_using_returns_a_new_task_and_leaves_the_original_alone() -> None:
    now = timezone.now()
    same = t.noop.using()
    assert same == t.noop and same is not t.noop
    moved = t.noop.using(priority=1, queue_name="reports", run_after=now, backend="second")
    assert (moved.priority, moved.queue_name, moved.run_after, moved.backend) == (
        1,
        "reports",
        now,
        "second",
    )
    assert (t.noop.priority, t.noop.queue_name, t.noop.run_after, t.noop.backend) == (
        0,
        "default",
        None,
        "default",
    )
    chained = t.noop.using(run_after=now).using(priority=10)
    assert (chained.run_after, chained.priority) == (now, 10)
    assert isinstance(moved.get_backend(), DuecourseTaskBackend)
    assert moved.get_backend().alias == "second"


def test_an_unknown_backend_alias_is_refused() -> None:
    with pytest.raises(InvalidTaskBackend, match="unknown"):
        t.noop.using(backend="unknown")


def test_run_after_must_be_aware() -> None:
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime"):
        t.noop.using(run_after=datetime.now())


def test_priority_is_a_whole_number_between_the_framework_s_bounds() -> None:
    for bad in (-101, 101, 3.1):
        with pytest.raises(InvalidTask, match="priority must be a whole number between -100"):
            t.noop.using(priority=bad)
    for good in (-100, 0, 100):
        assert t.noop.using(priority=good).priority == good


def test_a_queue_must_be_one_of_the_alias_s_queues_unless_it_lists_none() -> None:
    with pytest.raises(InvalidTask, match="Queue 'elsewhere' is not valid for backend"):
        t.noop.using(queue_name="elsewhere")
    assert t.noop.using(queue_name="elsewhere", backend="open").queue_name == "elsewhere"


def test_a_task_is_a_module_level_function_that_takes_context_only_by_name() -> None:
    with pytest.raises(InvalidTask, match="module level"):
        task(lambda: None)
    with pytest.raises(InvalidTask, match="first argument of 'context'"):
        task(takes_context=True)(t.meaning_of_life.func)
    with pytest.raises(TypeError, match="run_after"):
        task(run_after=timezone.now())(t.meaning_of_life.func)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        task(unknown_option=1)(t.meaning_of_life.func)  # type: ignore[call-arg]


def test_a_task_has_a_name_and_a_module_path_that_imports_it() -> None:
    assert (t.noop.name, t.noop_async.name) == ("noop", "noop_async")
    assert t.noop.module_path == "tests.tasktable_app.contract_tasks.noop"
    assert import_string(t.noop.module_path) is t.noop
    assert import_string(t.noop_async.module_path) is t.noop_async


def test_call_and_acall_run_sync_and_async_functions_alike() -> None:
    assert t.meaning_of_life.call() == t.meaning_of_life_async.call() == 42
    assert asyncio.run(t.meaning_of_life.acall()) == 42
    assert asyncio.run(t.meaning_of_life_async.acall()) == 42


@db
@pytest.mark.skipif(not hasattr(Task, "_reconstruct"), reason="tasks pickle from Django 6.1")
def test_a_task_and_its_result_survive_pickling() -> None:
    assert pickle.loads(pickle.dumps(t.noop)) == t.noop
    moved = t.noop.using(priority=3, queue_name="reports")
    assert pickle.loads(pickle.dumps(moved)) == moved
    result = moved.using(run_after=later()).enqueue(1)
    assert pickle.loads(pickle.dumps(result)) == result
    for path in ("does.not.exist.task", "builtins.any"):
        with pytest.raises(ValueError, match="to point to a Task instance"):
            Task._reconstruct({"func": path})


# --- on a real worker -------------------------------------------------------------------------


@dataclasses.dataclass
class Side:
    """The module's worker and what a test needs to start its own scheduler beside it."""

    processes: Processes
    env: dict[str, str]


@pytest.fixture(scope="module")
def worker(django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    """One worker for every test of the module that runs tasks, consuming the queues of
    ``QUEUES``; this process publishes under the worker's Redis key prefix meanwhile."""
    from config.celery import app

    prefix = f"t{uuid.uuid4().hex[:10]}:"
    env = {
        **processes_environment(prefix),
        "TASKS_QUEUES": ",".join(QUEUES),
        "SCHEDULING_MAX_SLEEP": "0.2",
        "SCHEDULING_RETRY_BACKOFF_BASE": "0.2",
        "SCHEDULING_RETRY_BACKOFF_CAP": "0.4",
    }
    group = Processes(tmp_path_factory.mktemp("contract-worker"))
    command = celery_worker_command(name="contract", queues="celery,reports")
    child = group.start([*command, "-I", t.__name__], env=env, name="worker")
    try:
        with with_key_prefix(app, prefix):
            wait_ready(group, child)
            yield Side(processes=group, env=env)
    finally:
        group.stop_all()


def finished(result: Any) -> Any:
    def check() -> Any:
        fresh = task_backends[result.backend].get_result(result.id)
        return fresh if fresh.is_finished else None

    return wait_for(check, timeout=SLOW, message=f"run {result.id} of {result.task.name} ends")


def with_the_scheduler(side: Side, processes: Processes) -> None:
    """``manage.py runscheduler``, in a process that has imported this module's tasks too (the
    scheduler publishes only what it knows)."""
    code = (
        "import django; django.setup();"
        f"import {t.__name__};"
        "from django.core.management import call_command; call_command('runscheduler')"
    )
    processes.start([sys.executable, "-c", code], env=side.env, name="scheduler")


@pytest.mark.parametrize(
    ("declared", "args", "kwargs", "value"),
    [
        (t.noop, [1], {"two": 3}, None),
        (t.noop_async, [], {}, None),
        (t.meaning_of_life, [], {}, 42),
        (t.meaning_of_life_async, [], {}, 42),
    ],
    ids=["sync", "async", "value", "async-value"],
)
@pytest.mark.slow
@pytest.mark.stack
@committed
def test_a_run_succeeds_with_its_value_times_worker_and_task(
    worker: Side, declared: Task, args: list[Any], kwargs: dict[str, Any], value: Any
) -> None:
    result = declared.enqueue(*args, **kwargs)
    done = finished(result)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.is_finished is True
    assert done.return_value == value
    assert done.started_at and done.last_attempted_at and done.finished_at
    assert done.enqueued_at == result.enqueued_at <= done.started_at <= done.finished_at
    assert done.task == declared and (done.args, done.kwargs) == (args, kwargs)
    assert done.attempts == 1 and done.worker_ids[0].startswith("contract@")
    assert done.errors == []
    result.refresh()
    assert (result.status, result.return_value, result.attempts) == (
        TaskResultStatus.SUCCESSFUL,
        value,
        1,
    )


@pytest.mark.parametrize(
    ("declared", "kind", "ending"),
    [
        (t.fails_with_value_error, ValueError, "ValueError: failed on purpose with ValueError\n"),
        (t.fails_with_system_exit, SystemExit, "SystemExit: failed on purpose with SystemExit\n"),
        (
            t.fails_with_keyboard_interrupt,
            KeyboardInterrupt,
            "KeyboardInterrupt: failed on purpose with KeyboardInterrupt\n",
        ),
    ],
    ids=["ValueError", "SystemExit", "KeyboardInterrupt"],
)
@pytest.mark.slow
@pytest.mark.stack
@committed
def test_a_failed_run_keeps_its_error_s_class_and_traceback(
    worker: Side, declared: Task, kind: type[BaseException], ending: str
) -> None:
    result = declared.enqueue()
    done = finished(result)
    assert done.status == TaskResultStatus.FAILED and done.is_finished is True
    with pytest.raises(ValueError, match="Task failed"):
        _ = done.return_value
    assert done._return_value is None
    assert done.started_at and done.last_attempted_at and done.finished_at
    assert done.enqueued_at <= done.started_at <= done.finished_at
    [error] = done.errors
    assert error.exception_class is kind
    assert error.exception_class_path == f"builtins.{kind.__name__}"
    assert error.traceback.endswith(ending), error.traceback
    assert done.task == declared and (done.args, done.kwargs) == ([], {})
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and len(result.errors) == 1


@pytest.mark.slow
@pytest.mark.stack
@committed
def test_an_exception_inside_an_exception_and_an_unstorable_return_value_fail_the_run(
    worker: Side,
) -> None:
    nested = finished(t.fails_with_nested_exception.enqueue())
    assert nested.status == TaskResultStatus.FAILED
    assert nested.errors[0].exception_class is ValueError
    assert 'ValueError(ValueError("the inner one"))' in nested.errors[0].traceback

    unstorable = finished(t.returns_a_function.enqueue())
    assert unstorable.status == TaskResultStatus.FAILED and unstorable._return_value is None
    assert unstorable.errors[0].exception_class is TypeError
    assert "Unsupported type" in unstorable.errors[0].traceback

    error = unstorable.errors[0]
    object.__setattr__(error, "exception_class_path", "subprocess.run")
    with pytest.raises(ValueError, match="does not reference a valid exception"):
        _ = error.exception_class
    object.__setattr__(error, "exception_class_path", "does.not.exist")
    with pytest.raises(ImportError):
        _ = error.exception_class


@pytest.mark.slow
@pytest.mark.stack
@committed
def test_a_running_task_sees_its_result_as_enqueued_through_its_context(
    worker: Side, processes: Processes
) -> None:
    with_the_scheduler(worker, processes)
    when = timezone.now() + timedelta(seconds=1)
    deferred = t.as_enqueued.using(priority=5, queue_name="reports", run_after=when).enqueue()
    second = t.as_enqueued.using(backend="second").enqueue()

    seen = finished(deferred).return_value
    assert seen["id"] == deferred.id and seen["attempt"] == 1
    assert (seen["priority"], seen["queue_name"], seen["backend"]) == (5, "reports", "default")
    assert datetime.fromisoformat(seen["run_after"]) == when
    assert datetime.fromisoformat(seen["enqueued_at"]) == deferred.enqueued_at < when
    assert datetime.fromisoformat(seen["started_at"]) >= when
    assert seen["status"] == TaskResultStatus.RUNNING and len(seen["worker_ids"]) == 1
    done = task_backends["default"].get_result(deferred.id)
    assert done.task == deferred.task and done.enqueued_at == deferred.enqueued_at

    seen = finished(second).return_value
    assert (seen["backend"], seen["result_backend"]) == ("second", "second")
    assert task_backends["second"].get_result(second.id).task == second.task


@pytest.mark.slow
@pytest.mark.stack
@committed
def test_after_retries_started_at_is_the_first_attempt_s_start(
    worker: Side, processes: Processes, tmp_path: Path
) -> None:
    with_the_scheduler(worker, processes)
    result = t.fails_twice.enqueue(str(tmp_path / "tries"))
    done = finished(result)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 3
    starts = list(
        Attempt.objects.filter(execution__task_id=result.id)
        .order_by("number")
        .values_list("started_at", flat=True)
    )
    assert len(starts) == done.attempts == 3
    assert (done.started_at, done.last_attempted_at) == (starts[0], starts[-1])
    assert done.started_at < done.last_attempted_at
    assert [e.exception_class_path for e in done.errors] == ["builtins.RuntimeError"] * 2


@pytest.mark.slow
@pytest.mark.stack
@committed
def test_a_task_takes_its_context_with_the_run_s_own_id(worker: Side) -> None:
    result = t.as_enqueued.enqueue()
    seen = finished(result).return_value
    assert seen["id"] == result.id and seen["attempt"] == 1
