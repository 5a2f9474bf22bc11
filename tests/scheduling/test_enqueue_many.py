"""``scheduling.api.enqueue_many``: many runs of one task in one statement.

Every call is checked as ``enqueue`` checks one before anything is written; the rows go in
as one INSERT in the caller's transaction and are published when it commits; a Django task
gives the framework's results, a schedulable Celery task its execution ids.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.api import enqueue_many
from scheduling.models import Execution, ExecutionStatus
from tests.conftest import Processes, scheduler_command, wait_for
from tests.scheduling.test_django_tasks import InvalidTask, TaskResultStatus, lines
from tests.scheduling.test_worker_lifecycle import SLOW, launch_worker, wait_ready
from tests.tasktable_app import tasks

db = pytest.mark.django_db
pytestmark = pytest.mark.specification
EXECUTION = Execution._meta.db_table


def inserts(queries: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith("INSERT") and EXECUTION in q["sql"]
    ]


def statements_for(rows: int) -> int:
    """How many INSERTs a batch of ``rows`` runs takes: one on PostgreSQL (one JSON
    parameter); elsewhere the ORM's multi-row INSERT, as few as the database's limit on bound
    parameters allows (SQLite builds of 999 parameters split 128 rows of 13 columns in 3)."""
    if connection.vendor == "postgresql":
        return 1
    fields = [f for f in Execution._meta.concrete_fields if not f.primary_key]
    per_statement = connection.ops.bulk_batch_size(fields, [None] * rows)
    return -(-rows // per_statement)


@db
def test_a_django_task_s_calls_are_written_in_one_insert_as_ready_runs_in_order(
    django_capture_on_commit_callbacks: Any, publish_under_prefix: str
) -> None:
    calls = [([i, 10], {}) for i in range(128)]
    assert statements_for(128) <= 3
    with (
        CaptureQueriesContext(connection) as queries,
        django_capture_on_commit_callbacks(execute=True),
    ):
        results = enqueue_many(tasks.add, calls)
    assert len(inserts(queries)) == statements_for(128)
    assert [(r.args, r.kwargs, r.status) for r in results] == [
        ([i, 10], {}, TaskResultStatus.READY) for i in range(128)
    ]
    rows = {
        e.task_id.hex: e for e in Execution.objects.filter(task="tests.tasktable_app.tasks.add")
    }
    assert len(rows) == 128
    for i, result in enumerate(results):
        row = rows[result.id.replace("-", "")]
        assert row.status == ExecutionStatus.QUEUED and row.job is None
        assert (row.call["args"], row.call["kwargs"]) == ([i, 10], {})
        assert tasks.add.get_result(result.id).status == TaskResultStatus.READY


@db
def test_one_bad_call_is_refused_naming_its_position_and_nothing_is_written() -> None:
    calls: list[Any] = [([1, 2], {}), ([3, 4], {}), ([5], {"nope": 1})]
    with pytest.raises(InvalidTask) as caught:
        enqueue_many(tasks.add, calls)
    assert str(caught.value).startswith("calls[2]: Task kwargs: 'nope' is not a parameter of")
    with pytest.raises(InvalidTask, match=r"^calls\[1\]: Task arguments must round-trip"):
        enqueue_many(tasks.echo, [([1], {}), ([float("nan")], {})])
    with pytest.raises(TypeError, match=r"^calls\[0\]: give each call as a pair"):
        enqueue_many(tasks.add, [[1, 2, 3]])
    assert not Execution.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_runs_enqueued_in_a_transaction_that_rolls_back_never_were(
    publish_under_prefix: str,
) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        results = enqueue_many(tasks.add, [([1, 1], {}), ([2, 2], {})])
        raise RuntimeError("the import failed after enqueueing")
    assert not Execution.objects.filter(task_id__in=[r.id for r in results]).exists()


@db
def test_using_applies_to_every_call_and_a_later_run_after_defers_them_all() -> None:
    later = timezone.now() + timedelta(hours=1)
    results = enqueue_many(tasks.add.using(run_after=later, priority=-50), [([1, 2], {})] * 3)
    assert {r.task.run_after for r in results} == {later}
    rows = Execution.objects.filter(task_id__in=[r.id for r in results])
    assert {(e.status, e.retry_at) for e in rows} == {(ExecutionStatus.RETRY, later)}
    assert {e.call["priority"] for e in rows} == {-50}


@db
def test_a_task_of_another_backend_or_a_plain_function_is_refused(settings: Any) -> None:
    settings.TASKS = {
        **settings.TASKS,
        "dummy": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}
        if hasattr(__import__("django"), "tasks")
        else {"BACKEND": "django_tasks.backends.dummy.DummyBackend"},
    }
    with pytest.raises(InvalidTask, match="uses the backend 'DummyBackend'"):
        enqueue_many(tasks.add.using(backend="dummy"), [([1, 2], {})])
    with pytest.raises(TypeError, match="takes a Django task or a Celery task"):
        enqueue_many(print, [([1], {})])
    with pytest.raises(TypeError, match=r"options from task.using\(\)"):
        enqueue_many(tasks.add, [([1, 2], {})], queue="other")


@db
def test_a_schedulable_celery_task_s_calls_become_executions_without_a_job() -> None:
    with CaptureQueriesContext(connection) as queries:
        ids = enqueue_many(
            tasks.note_call, [(["a"], {}), (["b"], {"times": 2})], max_retries=1, timeout=30
        )
    assert len(inserts(queries)) == statements_for(2)
    rows = Execution.objects.in_bulk(ids)
    assert [(rows[i].call["args"], rows[i].call["kwargs"]) for i in ids] == [
        (["a"], {}),
        (["b"], {"times": 2}),
    ]
    assert {(e.task, e.job_id, e.status) for e in rows.values()} == {
        ("tests.tasktable_app.note_call", None, ExecutionStatus.QUEUED)
    }
    assert {(e.call["max_retries"], e.call["timeout"], e.call["queue"]) for e in rows.values()} == {
        (1, 30, "celery")
    }


@db
def test_a_celery_call_that_does_not_fit_or_a_task_outside_the_ledger_is_refused_by_field() -> None:
    with pytest.raises(ValidationError) as caught:
        enqueue_many(tasks.note_call, [(["a"], {}), (["b"], {"nope": 1})])
    assert caught.value.message_dict == {
        "kwargs": [
            "calls[1]: 'nope' is not a parameter of "
            "tests.tasktable_app.note_call(label, *, times=1)"
        ]
    }
    with pytest.raises(ValidationError) as caught:
        enqueue_many(tasks.note_call, [(["a"], {1: "x"})])
    assert list(caught.value.message_dict) == ["kwargs"]
    with pytest.raises(ValidationError) as caught:
        enqueue_many(tasks.enqueue_from_a_worker, [([1, 2], {})])
    assert list(caught.value.message_dict) == ["task"]
    with pytest.raises(ValidationError) as caught:
        enqueue_many(tasks.note_call, [(["a"], {})], max_retries=-1)
    assert list(caught.value.message_dict) == ["max_retries"]
    assert not Execution.objects.exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_every_run_enqueued_in_bulk_runs_once_on_a_stock_worker(
    processes: Processes, process_env: dict[str, str], publish_under_prefix: str, tmp_path: Path
) -> None:
    body_log = tmp_path / "bodies.log"
    process_env["DUECOURSE_TEST_BODY_LOG"] = str(body_log)
    worker = launch_worker(processes, process_env, "tasks")
    processes.start(scheduler_command(), env=process_env, name="scheduler")
    wait_ready(processes, worker)
    with transaction.atomic():
        results = enqueue_many(tasks.add, [([i, 1000], {}) for i in range(150)])
        ids = enqueue_many(tasks.note_call, [([f"n{i}"], {}) for i in range(150)])

    def all_done() -> bool:
        return Execution.objects.filter(
            status=ExecutionStatus.COMPLETED, pk__in=ids
        ).count() == 150 and all(tasks.add.get_result(r.id).is_finished for r in results[-5:])

    wait_for(all_done, timeout=SLOW, message="every run enqueued in bulk finishes")
    wait_for(lambda: len(lines(body_log)) >= 300, timeout=SLOW, message="every body noted its run")
    noted = lines(body_log)
    assert sorted(x for x in noted if x.startswith("add")) == sorted(
        f"add {i} 1000" for i in range(150)
    ), "each Django task run ran exactly once"
    assert sorted(x for x in noted if x.startswith("celery")) == sorted(
        f"celery n{i} 1" for i in range(150)
    ), "each Celery task run ran exactly once"
    assert {tasks.add.get_result(r.id).status for r in results} == {TaskResultStatus.SUCCESSFUL}
