"""Django's Tasks framework on the ledger: ``scheduling.tasks_backend.DuecourseTaskBackend``.

The in-process part pins the framework's contract (validation, transactional enqueue, results,
signals); the worker part runs real ``celery worker`` processes and the scheduler, and kills
one mid-run.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.utils import timezone

from scheduling.api import task_options
from scheduling.djangotasks.backend import broker_priority
from scheduling.models import Execution, ExecutionStatus, Job
from tests.conftest import Processes, scheduler_command, wait_for
from tests.scheduling.test_worker_lifecycle import SLOW, launch_worker, wait_ready
from tests.tasktable_app import tasks

# The framework's own names, from the version in use: what a project's code catches.
try:  # Django 6
    from django.tasks import TaskResultStatus, task
    from django.tasks.backends.dummy import DummyBackend
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued
except ImportError:  # Django 5.2 with the backport
    from django_tasks import TaskResultStatus, task
    from django_tasks.backends.dummy import DummyBackend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued

db = pytest.mark.django_db


def module_level_function(x: int) -> int:
    return x


# --- the contract, in process --------------------------------------------------------------


@db
def test_an_enqueue_writes_a_ready_run_into_the_ledger(
    django_capture_on_commit_callbacks: Any, publish_under_prefix: str
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        result = tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs, result.backend) == ([2, 3], {}, "default")
    execution = Execution.objects.get(task_id=result.id)
    assert execution.task == "tests.tasktable_app.tasks.add"
    assert execution.job is None and execution.status == ExecutionStatus.QUEUED
    fetched = tasks.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.READY
    assert fetched.enqueued_at == execution.created_at and fetched.worker_ids == []


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_rolled_back_never_runs_and_has_no_result(publish_under_prefix: str) -> None:
    enqueued: list[Any] = []
    task_enqueued.connect(lambda **kw: enqueued.append(kw["task_result"]), weak=False)
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            result = tasks.add.enqueue(1, 1)
            raise RuntimeError("the view failed after enqueueing")
        assert not Execution.objects.filter(task_id=result.id).exists()
        with pytest.raises(TaskResultDoesNotExist):
            tasks.add.get_result(result.id)
        assert enqueued == [], "no signal for a run that never was"

        with transaction.atomic():
            kept = tasks.add.enqueue(1, 2)
            assert enqueued == [], "the signal waits for the commit"
        assert [r.id for r in enqueued] == [kept.id]
    finally:
        task_enqueued.receivers.clear()
        task_enqueued.sender_receivers_cache.clear()


@db
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: task(lambda: None), "module level"),
        (lambda: tasks.add.using(priority=101), "priority must be a whole number"),
        (lambda: tasks.add.using(queue_name="nowhere"), "Queue 'nowhere' is not valid"),
        (
            lambda: tasks.add.using(run_after=timezone.now().replace(tzinfo=None)),
            "run_after must be an aware datetime",
        ),
        (
            lambda: tasks.add.using(run_after=timedelta(seconds=5)),
            "run_after must be an aware datetime, got timedelta",
        ),
        (lambda: tasks.add.using(run_after="2030-01-01T09:00Z"), "got str"),
        (lambda: tasks.add.using(queue_name=5), "queue_name must be text, got int"),
        (lambda: task_options(max_retries=-1)(task(module_level_function)), "max_retries must"),
        (lambda: task_options(timeout=0)(task(module_level_function)), "timeout must be"),
        (lambda: task_options(schedulable="yes")(task(module_level_function)), "schedulable"),
    ],
)
def test_bad_tasks_are_refused_with_the_framework_s_exception(make: Any, message: str) -> None:
    with pytest.raises(InvalidTask, match=message):
        make()


def test_options_set_above_the_framework_s_own_task_stay_with_it() -> None:
    assert (tasks.slow.timeout, tasks.flaky.max_retries, tasks.tick.schedulable) == (60, 2, True)
    moved = tasks.slow.using(priority=-1, queue_name="default")
    assert (moved.timeout, moved.priority) == (60, -1), "using() keeps them"
    assert (tasks.add.max_retries, tasks.add.timeout, tasks.add.schedulable) == (0, None, False)


def test_another_backend_s_task_comes_back_from_task_options_unchanged(settings: Any) -> None:
    settings.TASKS = {
        **settings.TASKS,
        "dummy": {"BACKEND": f"{DummyBackend.__module__}.DummyBackend"},
    }
    theirs = task(backend="dummy")(module_level_function)
    assert task_options(max_retries=3, schedulable=True)(theirs) is theirs
    with pytest.raises(InvalidTask, match="max_retries"):
        task_options(max_retries=-3)(theirs)


def test_task_options_below_task_is_refused_in_one_line() -> None:
    with pytest.raises(TypeError, match="@task_options goes above @task"):
        task_options(timeout=5)(module_level_function)


@db
def test_arguments_that_do_not_round_trip_through_json_are_refused() -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks.echo.enqueue(object())
    with pytest.raises(InvalidTask, match="round-trip through JSON"):
        tasks.echo.enqueue(float("nan"))
    assert not Execution.objects.exists()


@db
def test_an_unknown_or_malformed_result_id_does_not_exist() -> None:
    for result_id in ("not-a-uuid", "00000000-0000-0000-0000-000000000000"):
        with pytest.raises(TaskResultDoesNotExist):
            tasks.add.get_result(result_id)


@db
def test_a_deferred_run_waits_in_the_ledger_until_run_after() -> None:
    later = timezone.now() + timedelta(hours=1)
    result = tasks.add.using(run_after=later).enqueue(1, 2)
    execution = Execution.objects.get(task_id=result.id)
    assert (execution.status, execution.retry_at, execution.retry_count) == ("retry", later, 0)
    assert tasks.add.get_result(result.id).status == TaskResultStatus.READY


@pytest.mark.django_db(transaction=True)
def test_aenqueue_and_aget_result(publish_under_prefix: str) -> None:
    async def both() -> tuple[Any, Any]:
        result = await tasks.add.aenqueue(4, 5)
        return result, await tasks.add.aget_result(result.id)

    result, fetched = asyncio.run(both())
    assert fetched.id == result.id and fetched.args == [4, 5]


def test_priorities_map_onto_the_broker_s() -> None:
    assert broker_priority(0, "redis://x") is None
    assert broker_priority(50, "redis://x") is None  # Redis's first lane is the default one
    assert [broker_priority(p, "redis://x") for p in (-1, -50, -100)] == [3, 6, 9]
    assert [broker_priority(p, "amqp://x") for p in (-100, 100)] == [0, 9]
    assert broker_priority(10, "filesystem://") is None


@db
def test_only_tasks_that_opt_in_may_be_scheduled(admin_user: Any) -> None:
    call_command(
        "jobs", "add", "ticking", "--task", "tests.tasktable_app.tasks.tick",
        "--kwargs", '{"label": "a"}', "--every", "PT1M",
    )  # fmt: skip
    assert Job.objects.get(name="ticking").task == "tests.tasktable_app.tasks.tick"
    with pytest.raises(CommandError, match="not schedulable"):
        call_command(
            "jobs", "add", "adding", "--task", "tests.tasktable_app.tasks.add", "--every", "PT1M"
        )


# --- on real workers --------------------------------------------------------------------------


@pytest.fixture
def body_log(tmp_path: Path, process_env: dict[str, str]) -> Path:
    path = tmp_path / "bodies.log"
    process_env["DUECOURSE_TEST_BODY_LOG"] = str(path)
    return path


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def finished(result: Any) -> Any:
    def check() -> Any:
        fresh = tasks.add.get_backend().get_result(result.id)
        return fresh if fresh.is_finished else None

    return check


@pytest.mark.slow
@pytest.mark.stack  # the Django Tasks framework is each Django's own (or the 5.2 backport)
@pytest.mark.django_db(transaction=True)
def test_runs_complete_once_on_stock_workers_with_results_errors_and_signals(
    processes: Processes, process_env: dict[str, str], publish_under_prefix: str, body_log: Path
) -> None:
    worker = launch_worker(processes, process_env, "tasks")
    processes.start(scheduler_command(), env=process_env, name="scheduler")
    wait_ready(processes, worker)
    added = [tasks.add.enqueue(i, 10) for i in range(5)]
    failed = tasks.explode.enqueue("on purpose")
    context = tasks.who_am_i.enqueue()
    deferred = tasks.add.using(run_after=timezone.now() + timedelta(seconds=3)).enqueue(7, 7)

    for result in [*added, failed, context, deferred]:
        wait_for(finished(result), timeout=SLOW, message=f"run {result.id} finishes")

    for i, result in enumerate(added):
        done = tasks.add.get_result(result.id)
        assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == i + 10
        assert done.started_at and done.finished_at and done.last_attempted_at
        assert len(done.worker_ids) == 1 and done.worker_ids[0].startswith("tasks@")
    assert sorted(line for line in lines(body_log) if line.startswith("add")) == sorted(
        [f"add {i} 10" for i in range(5)] + ["add 7 7"]
    ), "each enqueue ran exactly once"

    bad = tasks.explode.get_result(failed.id)
    assert bad.status == TaskResultStatus.FAILED
    [error] = bad.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert "exploded: on purpose" in error.traceback and error.exception_class is ValueError
    with pytest.raises(ValueError, match="Task failed"):
        _ = bad.return_value

    assert tasks.who_am_i.get_result(context.id).return_value == {"id": context.id, "attempt": 1}
    late = tasks.add.get_result(deferred.id)
    assert late.started_at >= deferred.enqueued_at + timedelta(seconds=3)

    signals = [line for line in lines(body_log) if line.startswith("signal")]
    assert f"signal started {failed.id}" in signals
    assert f"signal finished {failed.id} FAILED" in signals
    assert f"signal finished {added[0].id} SUCCESSFUL" in signals


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_task_that_opts_in_to_retries_is_retried_and_one_that_does_not_is_not(
    processes: Processes,
    process_env: dict[str, str],
    publish_under_prefix: str,
    tmp_path: Path,
) -> None:
    env = {
        **process_env,
        "SCHEDULING_RETRY_BACKOFF_BASE": "0.2",
        "SCHEDULING_RETRY_BACKOFF_CAP": "1",
    }
    worker = launch_worker(processes, env, "retries")
    processes.start(scheduler_command(), env=env, name="scheduler")
    wait_ready(processes, worker)
    counter = tmp_path / "flaky.count"
    flaky = tasks.flaky.enqueue(str(counter))
    once = tasks.explode.enqueue("no retries asked")
    wait_for(finished(flaky), timeout=SLOW, message="the flaky task ends")
    wait_for(finished(once), timeout=SLOW, message="the exploding task ends")

    done = tasks.flaky.get_result(flaky.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == "ok after 3"
    assert [e.exception_class_path for e in done.errors] == ["builtins.RuntimeError"] * 2
    assert len(done.worker_ids) == 3
    assert len(tasks.explode.get_result(once.id).worker_ids) == 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_run_neither_loses_nor_doubles_the_run(
    processes: Processes, process_env: dict[str, str], publish_under_prefix: str, body_log: Path
) -> None:
    victim = launch_worker(processes, process_env, "victim")
    processes.start(scheduler_command(), env=process_env, name="scheduler")
    wait_ready(processes, victim)
    result = tasks.slow.enqueue("only", 4)
    wait_for(lambda: "start only" in lines(body_log), timeout=SLOW, message="the body starts")
    processes.kill(victim)  # SIGKILL to the whole process group
    victim.wait(timeout=10)
    survivor = launch_worker(processes, process_env, "survivor")
    wait_ready(processes, survivor)

    done = wait_for(finished(result), timeout=2 * SLOW, message="the survivor completes it")
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == "only"
    assert [w.split("@")[0] for w in done.worker_ids] == ["victim", "survivor"]
    assert lines(body_log).count("end only") == 1, "the body completed exactly once"
    execution = Execution.objects.get(task_id=result.id)
    assert [a.outcome for a in execution.attempts.order_by("number")] == [
        "abandoned",
        "completed",
    ]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_schedulable_django_task_runs_on_a_schedule(
    processes: Processes,
    process_env: dict[str, str],
    publish_under_prefix: str,
    body_log: Path,
    admin_user: Any,
) -> None:
    call_command(
        "jobs", "add", "ticking", "--task", "tests.tasktable_app.tasks.tick",
        "--kwargs", '{"label": "each-second"}', "--every", "PT1S",
    )  # fmt: skip
    worker = launch_worker(processes, process_env, "ticks")
    processes.start(scheduler_command(), env=process_env, name="scheduler")
    wait_ready(processes, worker)
    runs = Execution.objects.filter(job__name="ticking", status="completed")
    wait_for(lambda: runs.count() >= 3, timeout=SLOW, message="three occurrences completed")
    assert {r.result["value"] for r in runs} == {"each-second"}
