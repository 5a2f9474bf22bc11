"""Ends of attempts are written for the attempt that ended, never over a newer one."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from scheduling.models import AttemptOutcome, Execution, ExecutionStatus
from scheduling.stages import attempts, claims, liveness, publishing

pytestmark = [pytest.mark.django_db, pytest.mark.specification]

SECOND = timedelta(seconds=1)


def _second_attempt(make_job: Any, now: datetime) -> tuple[Execution, int, int]:
    """An execution whose first attempt was reaped while its worker was cut off."""
    job = make_job(every="PT1H", max_retries=3)
    [bell] = claims.claim_due_jobs(now=now, limit=10).bells
    first = attempts.start_execution(execution_id=bell.execution_id, worker="a", pid=1, now=now)
    assert first is not None
    liveness.reap_stale_executions(now=now + 120 * SECOND, stale_after=60)
    second = attempts.start_execution(
        execution_id=bell.execution_id, worker="b", pid=2, now=now + 121 * SECOND
    )
    assert second is not None
    return Execution.objects.get(job=job), first.attempt, second.attempt


def test_a_reaped_attempt_that_finishes_late_does_not_complete_the_next_one(
    make_job: Any, now: datetime
) -> None:
    execution, first, second = _second_attempt(make_job, now)
    assert (first, second) == (1, 2)
    late = attempts.complete_execution(
        execution_id=execution.pk, now=now + 130 * SECOND, attempt=first
    )
    assert late is False
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.RUNNING
    assert [a.outcome for a in execution.attempts.all()] == [
        AttemptOutcome.ABANDONED,
        AttemptOutcome.RUNNING,
    ]
    assert attempts.complete_execution(
        execution_id=execution.pk, now=now + 140 * SECOND, attempt=second
    )
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.COMPLETED
    assert execution.retry_count == 1


def test_a_reaped_attempt_that_fails_late_does_not_fail_the_next_one(
    make_job: Any, now: datetime
) -> None:
    execution, first, _ = _second_attempt(make_job, now)
    status = attempts.fail_attempt(
        execution_id=execution.pk,
        error="RuntimeError: late",
        outcome=AttemptOutcome.FAILED,
        now=now + 130 * SECOND,
        attempt=first,
    )
    assert status is None
    execution.refresh_from_db()
    assert (execution.status, execution.retry_count) == (ExecutionStatus.RUNNING, 1)


def test_an_end_reported_without_an_attempt_number_ends_the_running_attempt(
    make_job: Any, now: datetime
) -> None:
    """The worker's main process (a lost pool process, a hard time limit) knows no number."""
    execution, _, _ = _second_attempt(make_job, now)
    status = attempts.fail_attempt(
        execution_id=execution.pk,
        error="WorkerLostError",
        outcome=AttemptOutcome.ABANDONED,
        now=now + 130 * SECOND,
        retry_in=0,
    )
    assert status == ExecutionStatus.RETRY
    execution.refresh_from_db()
    assert execution.retry_count == 2


class _Request:
    """What Celery's request holds for a message whose attempt never began."""

    id = None


class _Task:
    schedulable = True
    ledger = True
    permanent_errors: tuple[type[BaseException], ...] = ()
    request = _Request()


@pytest.mark.django_db(transaction=True)  # the receiver manages its connection as a worker does
def test_a_message_that_fails_before_its_attempt_begins_counts_as_a_failed_attempt(
    make_job: Any, now: datetime
) -> None:
    """Otherwise a message that can never start would be re-published forever."""
    from scheduling.worker.receivers import on_task_failure

    job = make_job(every="PT1H", max_retries=1)
    [bell] = claims.claim_due_jobs(now=now, limit=10).bells
    publishing.mark_queued(execution_ids=[bell.execution_id], now=now)
    for expected in (ExecutionStatus.RETRY, ExecutionStatus.FAILED):
        on_task_failure(sender=_Task(), task_id=bell.task_id, exception=ImportError("broken"))
        execution = Execution.objects.get(job=job)
        assert execution.status == expected
        assert "failed before the attempt started: ImportError: broken" in execution.last_error
        Execution.objects.filter(pk=execution.pk, status=ExecutionStatus.RETRY).update(
            status=ExecutionStatus.QUEUED
        )
    assert execution.retry_count == 1


@pytest.mark.django_db(transaction=True)
def test_a_failure_before_start_never_touches_another_worker_s_running_attempt(
    make_job: Any, now: datetime
) -> None:
    from scheduling.worker.receivers import on_task_failure

    make_job(every="PT1H")
    [bell] = claims.claim_due_jobs(now=now, limit=10).bells
    assert attempts.start_execution(execution_id=bell.execution_id, worker="a", pid=1, now=now)
    on_task_failure(sender=_Task(), task_id=bell.task_id, exception=ImportError("broken"))
    execution = Execution.objects.get(pk=bell.execution_id)
    assert (execution.status, execution.retry_count) == (ExecutionStatus.RUNNING, 0)


def _run_jobs(make_job: Any, now: datetime, count: int) -> None:
    for _ in range(count):
        make_job(every="PT1H")
    for bell in claims.claim_due_jobs(now=now, limit=count).bells:
        started = attempts.start_execution(
            execution_id=bell.execution_id, worker="w", pid=1, now=now
        )
        assert started is not None
        assert attempts.complete_execution(
            execution_id=bell.execution_id, now=now, attempt=started.attempt
        )
    assert Execution.objects.filter(status=ExecutionStatus.COMPLETED).count() == count


def _prepared_statements() -> list[tuple[str, int]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans FROM pg_prepared_statements")
        return sorted((" ".join(sql.split())[:20], plans) for sql, plans in cursor.fetchall())


@pytest.mark.postgres
def test_a_workers_per_task_statements_are_prepared_once_and_planned_once(
    make_job: Any, now: datetime
) -> None:
    _run_jobs(make_job, now, 12)
    hot = [(sql, plans) for sql, plans in _prepared_statements() if sql.startswith("WITH")]
    assert [sql for sql, _ in hot] == ["WITH done AS ( UPDAT", "WITH started AS ( UP"]
    assert all(plans >= 5 for _, plans in hot), hot  # later calls reuse one generic plan


@pytest.mark.postgres
def test_without_prepared_statements_the_same_history_is_written(
    make_job: Any, now: datetime, settings: Any
) -> None:
    settings.SCHEDULING_PREPARE_STATEMENTS = False
    before = _prepared_statements()
    _run_jobs(make_job, now, 6)
    assert _prepared_statements() == before  # nothing prepared, no prepared plan used


@pytest.mark.django_db(transaction=True)  # the receiver manages its connection as a worker does
def test_a_thawed_worker_s_lost_pool_process_never_ends_another_worker_s_attempt(
    make_job: Any, now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker ``a`` was frozen past its lease and its attempt reaped; worker ``b`` runs the
    next one. When ``a`` thaws, its main process learns that its pool process died
    (WorkerLostError) and knows no attempt number: it ends only a running attempt of its own,
    so ``b``'s runs on and no death is counted against the run."""
    from billiard.exceptions import WorkerLostError

    from scheduling.worker import receivers

    execution, _, _ = _second_attempt(make_job, now)
    lost = WorkerLostError("Worker exited prematurely: signal 14 (SIGALRM).")
    monkeypatch.setattr(receivers, "_this_worker", "a")
    receivers.on_task_failure(sender=_Task(), task_id=str(execution.task_id), exception=lost)
    execution.refresh_from_db()
    assert (execution.status, execution.retry_count) == (ExecutionStatus.RUNNING, 1)
    assert [a.outcome for a in execution.attempts.order_by("number")] == [
        AttemptOutcome.ABANDONED,
        AttemptOutcome.RUNNING,
    ]

    monkeypatch.setattr(receivers, "_this_worker", "b")
    receivers.on_task_failure(sender=_Task(), task_id=str(execution.task_id), exception=lost)
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.RETRY
    assert [a.outcome for a in execution.attempts.order_by("number")] == [
        AttemptOutcome.ABANDONED,
        AttemptOutcome.ABANDONED,
    ]
