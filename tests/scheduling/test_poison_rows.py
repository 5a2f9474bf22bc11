"""A row that cannot be planned never stops the scheduler, and every reader can show it.

The rows here get in by raw SQL, as a careless migration, a script or another program could
write them: times past what Python can hold (``9999-12-31 23:59:59.999999``, PostgreSQL's
``infinity``), a schedule that cannot be parsed, ``args`` that is an object and ``kwargs``
that is a list. Each such job is isolated where it is found (in the claim, the republish loop
and the reaper alike): it gets a failed execution or is paused, with an error naming the
field, while the healthy jobs around it keep their cadence and no scheduler process exits.
The command line and the admin show such rows, never a traceback.
"""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from scheduling.models import (
    Attempt,
    AttemptOutcome,
    Execution,
    ExecutionStatus,
    Job,
    JobStatus,
)
from tests.conftest import Processes, scheduler_command, wait_for
from tests.factories import create_job
from tests.scheduling.test_exactly_once import assert_exactly_once, create_load, runs_logged
from tests.scheduling.test_worker_lifecycle import SLOW, start_worker

NOOP = "scheduling.diagnostics.noop"
FAR_FUTURE = "9999-12-31 23:59:59.999999+00"

#: name -> (the column written by raw SQL, its value, the field an error must name)
POISON = {
    "far-future": ("next_occurrence_at", FAR_FUTURE, "next_occurrence_at"),
    "infinite": ("next_occurrence_at", "infinity", "next_occurrence_at"),
    "args-object": ("args", '{"to": "someone"}', "args"),
    "kwargs-list": ("kwargs", '["someone"]', "kwargs"),
}


def poison_job(owner: Any, name: str, column: str, value: str) -> Job:
    """A job due now whose ``column`` is then overwritten with ``value`` behind the model."""
    job = create_job(owner=owner, name=name, task=NOOP, every="PT1H", now=timezone.now())
    cast = "jsonb" if column in ("args", "kwargs") else "timestamptz"
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE scheduling_job SET {column} = %s::{cast} WHERE id = %s", [value, job.pk]
        )
    return job


def unparseable_schedule(owner: Any) -> Job:
    job = create_job(
        owner=owner, name="bad-schedule", task=NOOP, every="PT1H", now=timezone.now()
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduling_schedule SET interval = 'every now and then' WHERE id = %s",
            [job.schedule_id],
        )
    return job


def out_of_range_job(owner: Any, name: str) -> Job:
    """A job never due (its times are 'infinity'), for an execution of its to be recovered."""
    job = create_job(owner=owner, name=name, task=NOOP, every="PT1H", now=timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduling_job SET next_due_at = 'infinity', next_occurrence_at = 'infinity'"
            " WHERE id = %s",
            [job.pk],
        )
    return job


def retry_due_of(job: Job) -> Execution:
    """A failed attempt of ``job`` whose retry is due: the republish loop must publish it."""
    now = timezone.now()
    return Execution.objects.create(
        job=job,
        task=job.task,
        scheduled_for=now - timedelta(hours=1),
        status=ExecutionStatus.RETRY,
        retry_count=1,
        retry_at=now - timedelta(seconds=1),
        created_at=now,
    )


def stale_run_of(job: Job) -> Execution:
    """A running attempt of ``job`` whose worker stopped beating long ago: the reaper's."""
    now = timezone.now()
    execution = Execution.objects.create(
        job=job,
        task=job.task,
        scheduled_for=now - timedelta(hours=1),
        status=ExecutionStatus.RUNNING,
        started_at=now - timedelta(hours=1),
        last_heartbeat_at=now - timedelta(hours=1),
        worker="gone@nowhere",
        created_at=now,
    )
    Attempt.objects.create(
        execution=execution, number=1, worker="gone@nowhere", pid=1, started_at=now
    )
    return execution


def isolated(job: Job, field: str) -> bool:
    """The job is paused naming ``field``, or one of its executions failed naming it."""
    job = Job.objects.only("status", "pause_reason").get(pk=job.pk)
    if job.status == JobStatus.PAUSED and field in job.pause_reason:
        return True
    return Execution.objects.filter(
        job_id=job.pk, status=ExecutionStatus.FAILED, last_error__contains=field
    ).exists()


def read_everything(client: Client, names: list[str]) -> None:
    """Every reader of jobs and executions, on a database holding the rows."""
    for command in (["jobs", "list"], ["jobs", "list", "--json"], ["executions"],
                    ["executions", "--attempts", "--json"],
                    *(["jobs", "show", name] for name in names)):  # fmt: skip
        out = io.StringIO()
        call_command(*command, stdout=out, stderr=io.StringIO())
        assert out.getvalue(), command
    for page in ("job", "execution", "schedule"):
        response = client.get(f"/admin/scheduling/{page}/")
        assert response.status_code == 200, page
    for job in Job.objects.filter(name__in=names).values_list("pk", flat=True):
        response = client.get(f"/admin/scheduling/job/{job}/change/")
        assert response.status_code == 200, job
        assert client.get(f"/admin/scheduling/execution/?job__id__exact={job}").status_code == 200


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_poison_rows_among_healthy_jobs_are_isolated(
    owner: Any, processes: Processes, process_env: dict[str, str], admin_client: Client
) -> None:
    load = create_load(owner, jobs=5, seconds=8, lead=3, name="healthy")
    poison = {name: poison_job(owner, name, column, value)
              for name, (column, value, _) in POISON.items()}  # fmt: skip
    bad_schedule = unparseable_schedule(owner)
    retry = retry_due_of(out_of_range_job(owner, "retry-of-infinite"))
    stale = stale_run_of(out_of_range_job(owner, "stale-of-infinite"))
    env = {**process_env, "SCHEDULING_MAX_SLEEP": "0.5"}
    worker = start_worker(processes, env, "healthy", concurrency=2)
    scheduler = processes.start(scheduler_command(), env=env, name="scheduler")

    def settled() -> bool:
        done = not load.executions().exclude(status=ExecutionStatus.COMPLETED).exists()
        return (
            done
            and load.executions().count() == load.expected
            and all(isolated(poison[name], field) for name, (*_, field) in POISON.items())
            and isolated(bad_schedule, "interval")
            and Execution.objects.get(pk=retry.pk).status not in (ExecutionStatus.RETRY,
                                                                   ExecutionStatus.PENDING,
                                                                   ExecutionStatus.QUEUED,
                                                                   ExecutionStatus.RUNNING)
            and Execution.objects.get(pk=stale.pk).status != ExecutionStatus.RUNNING
        )  # fmt: skip

    wait_for(settled, timeout=SLOW, interval=0.5, message="healthy jobs run, poison is isolated")
    assert scheduler.poll() is None and worker.poll() is None
    assert "Traceback" not in processes.log_of(scheduler)
    assert_exactly_once(load, runs_logged(load, lambda: [processes.log_of(worker)], timeout=SLOW))

    # Arguments of the wrong type never reach a worker.
    for name in ("args-object", "kwargs-list"):
        assert not Attempt.objects.filter(execution__job=poison[name]).exists(), name
    # The recovered executions were published or reaped, not stuck.
    assert Execution.objects.get(pk=retry.pk).status in (
        ExecutionStatus.COMPLETED,
        ExecutionStatus.FAILED,
    )
    reaped = Attempt.objects.get(execution_id=stale.pk, number=1)
    assert reaped.outcome == AttemptOutcome.ABANDONED
    read_everything(admin_client, [*POISON, "bad-schedule"])


@pytest.mark.django_db
def test_every_reader_shows_rows_out_of_range(owner: Any, admin_client: Client) -> None:
    for name, (column, value, _) in POISON.items():
        poison_job(owner, name, column, value)
    unparseable_schedule(owner)
    retry_due_of(out_of_range_job(owner, "retry-of-infinite"))
    stale_run_of(out_of_range_job(owner, "stale-of-infinite"))
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduling_execution SET retry_at = 'infinity' WHERE status = 'retry'"
        )
    names = [*POISON, "bad-schedule", "retry-of-infinite", "stale-of-infinite"]
    read_everything(admin_client, names)
