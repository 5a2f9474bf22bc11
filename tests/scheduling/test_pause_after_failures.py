"""Pause after failures: a job that failed N occurrences in a row pauses itself, with the reason.

The rules are specified on the ledger's own verbs (start, fail, complete, reap), which is
where a worker's, the reaper's and the publisher's ends are written; the last tests run a
real scheduler and real ``celery worker`` processes against a task that fails, and read the
pause on the dashboard and ``/metrics``.
"""

from __future__ import annotations

import sys
import threading
from datetime import datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import close_old_connections, connection
from django.test import Client
from django.utils import timezone

from scheduling import api
from scheduling.models import (
    ChangeSource,
    Execution,
    ExecutionStatus,
    Job,
    JobChange,
    JobStatus,
    PauseKind,
    Schedule,
)
from scheduling.stages import attempts, claims, controls, jobs, liveness
from scheduling.stages.audit import Actor
from scheduling.worker.taskbase import schedulable_task
from tests.conftest import celery_worker_command, wait_for

pytestmark = [pytest.mark.django_db, pytest.mark.specification]

SECOND = timedelta(seconds=1)
NOOP = "scheduling.diagnostics.noop"
SLOW = 90.0


def occurrence(job: Job, at: datetime) -> int:
    """One started occurrence of ``job`` due at ``at``: its execution id."""
    execution = controls.run_job_now(job=job, now=at)
    started = attempts.start_execution(execution_id=execution.pk, worker="w", pid=1, now=at)
    assert started is not None
    return int(execution.pk)


def fails(job: Job, at: datetime, error: str = "ValueError: card declined") -> str | None:
    execution_id = occurrence(job, at)
    return attempts.fail_attempt(execution_id=execution_id, error=error, outcome="failed", now=at)


def completes(job: Job, at: datetime) -> None:
    assert attempts.complete_execution(execution_id=occurrence(job, at), now=at)


def test_a_job_pauses_itself_after_n_failed_occurrences_in_a_row(
    make_job: Any, now: datetime
) -> None:
    job = make_job(task=NOOP, max_retries=0, pause_after_failures=3)
    for n in (1, 2):
        assert fails(job, now + n * SECOND) == ExecutionStatus.FAILED
        job.refresh_from_db()
        assert (job.status, job.consecutive_failures) == (JobStatus.ACTIVE, n)
    fails(job, now + 3 * SECOND, error="ValueError: card declined\nTraceback (most recent...)")
    job.refresh_from_db()
    assert job.status == JobStatus.PAUSED
    assert job.pause_kind == PauseKind.FAILURES
    assert job.consecutive_failures == 3
    assert job.pause_reason == (
        "paused after 3 failed occurrences in a row; last error: ValueError: card declined"
    )
    [change] = JobChange.objects.filter(job=job, action="paused")
    assert (change.who, change.source, change.at) == ("system", "system", now + 3 * SECOND)
    assert change.changes == {
        "status": {"from": "active", "to": "paused"},
        "pause_reason": {"from": "", "to": job.pause_reason},
        "pause_kind": {"from": "", "to": "failures"},
    }


def test_an_attempt_that_is_retried_is_not_a_failed_occurrence(
    make_job: Any, now: datetime
) -> None:
    job = make_job(task=NOOP, max_retries=1, pause_after_failures=1)
    assert fails(job, now) == ExecutionStatus.RETRY
    job.refresh_from_db()
    assert (job.status, job.consecutive_failures) == (JobStatus.ACTIVE, 0)


def test_a_success_in_between_starts_the_count_again(make_job: Any, now: datetime) -> None:
    job = make_job(task=NOOP, max_retries=0, pause_after_failures=3)
    fails(job, now + 1 * SECOND)
    fails(job, now + 2 * SECOND)
    completes(job, now + 3 * SECOND)
    job.refresh_from_db()
    assert job.consecutive_failures == 0
    fails(job, now + 4 * SECOND)
    fails(job, now + 5 * SECOND)
    job.refresh_from_db()
    assert (job.status, job.consecutive_failures) == (JobStatus.ACTIVE, 2)
    fails(job, now + 6 * SECOND)
    job.refresh_from_db()
    assert job.status == JobStatus.PAUSED


def test_skipped_and_cancelled_occurrences_count_neither_way(make_job: Any, now: datetime) -> None:
    job = make_job(task=NOOP, max_retries=0, pause_after_failures=2)
    fails(job, now + 1 * SECOND)
    assert attempts.cancel_execution(execution_id=occurrence(job, now + 2 * SECOND), now=now)
    job.refresh_from_db()
    assert (job.status, job.consecutive_failures) == (JobStatus.ACTIVE, 1)
    fails(job, now + 3 * SECOND)
    job.refresh_from_db()
    assert job.status == JobStatus.PAUSED


def test_a_run_lost_with_its_worker_for_good_is_a_failed_occurrence(
    make_job: Any, now: datetime
) -> None:
    job = make_job(task=NOOP, max_retries=0, pause_after_failures=1)
    occurrence(job, now)
    reaped = liveness.reap_stale_executions(now=now + 120 * SECOND, stale_after=60)
    assert len(reaped) == 1
    job.refresh_from_db()
    assert job.status == JobStatus.PAUSED
    assert job.pause_reason.startswith(
        "paused after 1 failed occurrences in a row; last error: abandoned: worker w"
    )


@pytest.mark.parametrize("door", ["admin", "command", "api"])
def test_resuming_starts_the_count_again_from_every_door(
    door: str, make_job: Any, now: datetime, admin_user: Any, client: Client
) -> None:
    job = make_job(owner=admin_user, task=NOOP, max_retries=0, pause_after_failures=2)
    fails(job, now + 1 * SECOND)
    fails(job, now + 2 * SECOND)
    job.refresh_from_db()
    assert job.status == JobStatus.PAUSED
    if door == "admin":
        client.force_login(admin_user)
        client.post(
            "/admin/scheduling/job/", {"action": "resume_jobs", "_selected_action": [job.pk]}
        )
    elif door == "command":
        call_command("jobs", "resume", job.name)
    else:
        api.resume(job.pk)
    job.refresh_from_db()
    assert (job.status, job.consecutive_failures, job.pause_kind, job.pause_reason) == (
        JobStatus.ACTIVE,
        0,
        PauseKind.NONE,
        "",
    )
    [resumed] = JobChange.objects.filter(job=job, action="resumed")
    assert resumed.source == door
    assert resumed.changes["consecutive_failures"] == {"from": 2, "to": 0}
    fails(job, now + 3 * SECOND)
    job.refresh_from_db()
    assert (job.status, job.consecutive_failures) == (JobStatus.ACTIVE, 1)


def test_a_job_paused_by_a_person_keeps_that_pause(make_job: Any, now: datetime) -> None:
    job = make_job(task=NOOP, max_retries=0, pause_after_failures=1)
    execution_id = occurrence(job, now)
    controls.pause_job(job=job, now=now, reason="database upgrade", by=Actor("ops", "admin"))
    attempts.fail_attempt(execution_id=execution_id, error="boom", outcome="failed", now=now)
    job.refresh_from_db()
    assert (job.status, job.pause_reason, job.pause_kind) == (
        JobStatus.PAUSED,
        "database upgrade",
        PauseKind.MANUAL,
    )


def test_without_the_setting_a_job_never_pauses_itself(make_job: Any, now: datetime) -> None:
    job = make_job(task=NOOP, max_retries=0)
    for n in range(1, 6):
        fails(job, now + n * SECOND)
    job.refresh_from_db()
    assert (job.status, job.consecutive_failures) == (JobStatus.ACTIVE, 5)


def test_the_setting_is_refused_below_one_naming_the_field(make_job: Any) -> None:
    with pytest.raises(ValidationError) as refused:
        make_job(task=NOOP, pause_after_failures=0)
    assert "pause_after_failures" in refused.value.message_dict


@pytest.mark.django_db(transaction=True)
def test_failures_that_end_at_once_are_each_counted_and_pause_once(
    make_job: Any, now: datetime
) -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite serialises every write transaction; nothing runs at once there")
    job = make_job(task=NOOP, max_retries=0, overlap="allow", pause_after_failures=4)
    ids = [occurrence(job, now + n * SECOND) for n in range(1, 5)]
    gate = threading.Barrier(len(ids))
    errors: list[BaseException] = []

    def end(execution_id: int) -> None:
        try:
            gate.wait(timeout=30)
            attempts.fail_attempt(
                execution_id=execution_id, error="boom", outcome="failed", now=now + 10 * SECOND
            )
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=end, args=(i,)) for i in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    job.refresh_from_db()
    assert (job.status, job.consecutive_failures) == (JobStatus.PAUSED, 4)
    assert JobChange.objects.filter(job=job, action="paused").count() == 1


# --- real processes ---------------------------------------------------------------------------


@schedulable_task(name="tests.pause.by_script", bind=True)
def by_script(self: Any, path: str) -> str:
    """Fail or succeed as the next line of the file at ``path`` says; succeed once it is read.

    One worker process with one slot runs the job's occurrences one after another, so the
    file is read in order.
    """
    script = Path(path)
    lines = script.read_text().splitlines()
    if not lines:
        return "ok"
    script.write_text("".join(f"{line}\n" for line in lines[1:]))
    if lines[0] == "fail":
        raise ValueError("card declined")
    return "ok"


def scheduler_with_this_module() -> list[str]:
    """``manage.py runscheduler`` in a process that has registered this module's task."""
    code = (
        "import os, django;"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings');"
        f"django.setup(); import {__name__};"
        "from django.core.management import call_command; call_command('runscheduler')"
    )
    return [sys.executable, "-c", code]


def start_worker(processes: Any, env: dict[str, str]) -> Any:
    command = [*celery_worker_command(name="pausing", concurrency=1), "-I", __name__]
    worker = processes.start(command, env=env, name="worker")
    wait_for(
        lambda: "worker.ready" in processes.log_of(worker) or worker.poll() is not None,
        timeout=SLOW,
        message="the worker is ready",
    )
    assert worker.poll() is None, processes.log_of(worker)
    return worker


def statuses(job: Job) -> list[str]:
    return list(
        Execution.objects.filter(job=job).order_by("scheduled_for").values_list("status", flat=True)
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_job_that_always_fails_pauses_itself_after_exactly_three_occurrences(
    processes: Any, process_env: dict[str, str], admin_user: Any
) -> None:
    call_command(
        "jobs",
        "add",
        "charge-cards",
        "--owner",
        admin_user.username,
        "--task",
        "scheduling.diagnostics.fail",
        "--kwargs",
        '{"message": "card declined"}',
        "--every",
        "PT1S",
        "--max-retries",
        "0",
        "--misfire",
        "coalesce",
        "--pause-after-failures",
        "3",
    )
    job = Job.objects.get(name="charge-cards")
    processes.start([sys.executable, "manage.py", "runscheduler"], env=process_env, name="sched")
    start_worker(processes, process_env)
    wait_for(
        lambda: Job.objects.filter(pk=job.pk, status=JobStatus.PAUSED).exists(),
        timeout=SLOW,
        message="the job pauses itself",
    )
    job.refresh_from_db()
    assert job.pause_reason == (
        "paused after 3 failed occurrences in a row; last error: RuntimeError: card declined"
    )
    assert (job.pause_kind, job.consecutive_failures) == (PauseKind.FAILURES, 3)
    # Exactly three: nothing is claimed once it paused (an occurrence claimed before the
    # third failure ended would still be running or failed; overlap=forbid allows none).
    assert statuses(job) == [ExecutionStatus.FAILED] * 3

    client = Client()
    client.force_login(admin_user)
    page = client.get("/dashboard/").content.decode()
    panel = page[page.index('id="panel-paused-after-failures"') :]
    panel = panel[: panel.index("</section>")]
    assert "charge-cards" in panel and "card declined" in panel
    metrics = client.get("/metrics").content.decode()
    assert "duecourse_jobs_paused_after_failures 1.0" in metrics

    shown = call_show(job.name)
    assert "pause after failures: 3 in a row (3 so far)" in shown

    [paused] = JobChange.objects.filter(job=job, action="paused")
    assert (paused.who, paused.source) == ("system", ChangeSource.SYSTEM)


def call_show(name: str) -> str:
    out = StringIO()
    call_command("jobs", "show", name, stdout=out)
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_success_in_between_and_a_resume_each_start_the_count_again(
    processes: Any, process_env: dict[str, str], admin_user: Any, tmp_path: Path
) -> None:
    script = tmp_path / "outcomes"
    # Two failures, a success (the count starts again), three failures (paused); after the
    # resume two failures and then successes: a count not reset by the resume would pause
    # the job again at the first of them.
    script.write_text("fail\nfail\nok\nfail\nfail\nfail\nfail\nfail\n")
    job = jobs.create_job(
        owner=admin_user,
        name="scripted",
        schedule=Schedule(interval="PT1S"),
        target=jobs.Target(task="tests.pause.by_script", kwargs={"path": str(script)}),
        policies=jobs.Policies(max_retries=0, misfire="coalesce", pause_after_failures=3),
        now=timezone.now(),
    )
    processes.start(scheduler_with_this_module(), env=process_env, name="sched")
    start_worker(processes, process_env)
    wait_for(
        lambda: Job.objects.filter(pk=job.pk, status=JobStatus.PAUSED).exists(),
        timeout=SLOW,
        message="the job pauses itself",
    )
    failed, completed = ExecutionStatus.FAILED, ExecutionStatus.COMPLETED
    assert statuses(job) == [failed, failed, completed, failed, failed, failed]
    job.refresh_from_db()
    assert job.pause_reason == (
        "paused after 3 failed occurrences in a row; last error: ValueError: card declined"
    )

    call_command("jobs", "resume", job.name)
    wait_for(
        lambda: statuses(job)[6:9] == [failed, failed, completed],
        timeout=SLOW,
        message="two failures and a success after the resume",
    )
    job.refresh_from_db()
    assert job.status == JobStatus.ACTIVE


@pytest.mark.parametrize("broken", ["target", "arguments"])
def test_occurrences_the_claim_fails_are_failed_occurrences(
    broken: str, make_job: Any, now: datetime
) -> None:
    job = make_job(task=NOOP, every="PT1M", max_retries=0, pause_after_failures=2)
    # Written behind the model, as another program might: the claim refuses each occurrence.
    # (A task no process knows is waited for first, a rolling deploy; Celery's own tasks are
    # never schedulable, so the claim refuses them at once.)
    if broken == "target":
        Job.objects.filter(pk=job.pk).update(task="celery.backend_cleanup")
    else:
        Job.objects.filter(pk=job.pk).update(args={"not": "a list"})
    claims.claim_due_jobs(now=now, limit=10)
    job.refresh_from_db()
    assert (job.status, job.consecutive_failures) == (JobStatus.ACTIVE, 1)
    claims.claim_due_jobs(now=now + 61 * SECOND, limit=10)
    job.refresh_from_db()
    assert statuses(job) == [ExecutionStatus.FAILED, ExecutionStatus.FAILED]
    assert job.status == JobStatus.PAUSED and job.pause_kind == PauseKind.FAILURES
    assert job.pause_reason.startswith("paused after 2 failed occurrences in a row; last error: ")
