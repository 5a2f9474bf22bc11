"""A Django task's RUNNING result comes from its attempt's start, equal to the one the ledger
reads back, so the worker reads nothing between the start and the body.

The result a task that takes its context sees, and that ``task_started`` carries, is the one
``get_result`` would give at that moment: the task as enqueued (its ``.using()`` options), the
run's creation time, the first attempt's start and the latest's, every attempt's worker and the
errors of the attempts before. The start statement returns what the message does not carry
(``scheduling.djangotasks.results.started_result``); each engine is held to the read-back.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from scheduling.djangotasks.enqueued import find_run
from scheduling.djangotasks.results import result_of, started_result
from scheduling.models import AttemptOutcome, Execution, ExecutionStatus
from scheduling.stages import attempts
from tests.tasktable_app import contract_tasks

pytestmark = [pytest.mark.django_db, pytest.mark.specification]


def built_and_read(result_id: str, started: Any, *, task: Any, worker: str) -> tuple[Any, Any]:
    """The result built from the start beside the result read back from the ledger."""
    run = find_run(result_id)
    assert run is not None
    message_args, message_kwargs = list(run.args), dict(run.kwargs)
    built = started_result(
        started,
        task=task,
        alias=task.backend,
        result_id=result_id,
        worker=worker,
        args=message_args,
        kwargs=message_kwargs,
    )
    return built, result_of(run, task=task, alias=task.backend)


def test_a_first_attempt_s_result_is_the_one_the_ledger_reads_back() -> None:
    enqueued = contract_tasks.as_enqueued.using(priority=7).enqueue()
    execution = Execution.objects.get(task_id=enqueued.id)
    started = attempts.start_execution(
        execution_id=execution.pk, worker="w1@host", pid=1, now=timezone.now()
    )
    assert started is not None
    built, read = built_and_read(
        enqueued.id, started, task=contract_tasks.as_enqueued, worker="w1@host"
    )
    assert built == read
    assert (built.task.priority, built.worker_ids, built.errors) == (7, ["w1@host"], [])
    assert built.enqueued_at == execution.created_at


def test_a_retried_attempt_s_result_keeps_the_first_start_every_worker_and_earlier_errors() -> (
    None
):
    enqueued = contract_tasks.fails_twice.enqueue(path="/nowhere")
    execution = Execution.objects.get(task_id=enqueued.id)
    first = timezone.now()
    assert attempts.start_execution(execution_id=execution.pk, worker="w1", pid=1, now=first)
    error = {"exception_class_path": "builtins.RuntimeError", "traceback": "RuntimeError: no"}
    status = attempts.fail_attempt(
        execution_id=execution.pk,
        error="RuntimeError: no",
        outcome=AttemptOutcome.FAILED,
        now=first,
        retry_in=0,
        task_error=error,
    )
    assert status == ExecutionStatus.RETRY
    second = first + timedelta(seconds=1)
    started = attempts.start_execution(execution_id=execution.pk, worker="w2", pid=2, now=second)
    assert started is not None and started.attempt == 2
    built, read = built_and_read(
        enqueued.id, started, task=contract_tasks.fails_twice, worker="w2"
    )
    assert built == read
    assert built.worker_ids == ["w1", "w2"]
    assert (built.started_at, built.last_attempted_at) == (first, second)
    assert [e.exception_class_path for e in built.errors] == ["builtins.RuntimeError"]
    assert (built.args, built.kwargs) == ([], {"path": "/nowhere"})
