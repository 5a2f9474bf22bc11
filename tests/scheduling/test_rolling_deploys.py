"""Rolling deploys: an occurrence whose task a process does not know waits for one that does.

The previous release's scheduler, publisher and workers run beside the new release's for a
while; only the new one knows a task it declares. Nothing of such a task is failed or lost:
the old scheduler leaves the job unclaimed (marked, looked at again only now and then), an old
publisher or worker hands the execution back, the wait is shown on ``/health/``, the
dashboard and ``manage.py check``, and only past ``SCHEDULING_UNKNOWN_TASK_GRACE`` does the
occurrence fail, naming the task. The last specification runs two real releases side by side:
schedulers and workers whose Celery apps differ by one task (``tests.settings_new_release``).
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from scheduling.checks import check_awaiting_tasks
from scheduling.models import Execution, ExecutionStatus, Job
from scheduling.stages import attempts, claims, publishing
from scheduling.web import overview
from tests.conftest import ROOT, Processes, celery_worker_command, scheduler_command, wait_for
from tests.factories import create_job
from tests.scheduling.new_release_tasks import NEW_TASK

SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
NOOP = "scheduling.diagnostics.noop"
#: A task no release declares: this process does not know it, as an old release would not.
UNDECLARED = "tests.never_declared.task"
MakeJob = Callable[..., Job]


@pytest.fixture
def default_knobs(settings: Any) -> Any:
    """The documented defaults, whatever the environment says."""
    for name in [n for n in dir(django_settings) if n.startswith("SCHEDULING")]:
        delattr(settings, name)
    return settings


def undeclared_job(make_job: MakeJob, **options: Any) -> Job:
    """A job of a task this process does not know (changed behind the model, as a row the
    new release wrote looks to the old one)."""
    job = make_job(**options)
    Job.objects.filter(pk=job.pk).update(task=UNDECLARED)
    return Job.objects.get(pk=job.pk)


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


# --- the scheduler of a release that does not know the task -----------------------------------


@pytest.mark.django_db
def test_a_job_of_an_unknown_task_is_left_unclaimed_and_marked_not_failed(
    make_job: MakeJob, now: datetime, default_knobs: Any
) -> None:
    waiting = undeclared_job(make_job, every="PT1M")
    known = make_job(every="PT1M")

    claim = claims.claim_due_jobs(now=now, limit=100)

    assert [bell.task for bell in claim.bells] == [NOOP]
    assert not Execution.objects.filter(job=waiting).exists()
    row = fresh(waiting)
    assert row.task_unknown_since == now
    assert row.next_occurrence_at == now, "the occurrence it owes is kept"
    assert row.next_due_at == now + SECOND, "looked at again a moment later"
    assert fresh(known).task_unknown_since is None


@pytest.mark.django_db
def test_the_old_scheduler_looks_again_only_now_and_then(
    make_job: MakeJob, now: datetime, default_knobs: Any
) -> None:
    """The claim's cost follows the due jobs: a waiting job is not due again until its
    next look, and the looks grow apart (up to a minute) while it waits."""
    waiting = undeclared_job(make_job, every="PT1M")
    looks = []
    at = now
    for _ in range(12):
        assert claims.claim_due_jobs(now=at, limit=100).jobs == 1
        assert claims.claim_due_jobs(now=at, limit=100).jobs == 0, "not due until its next look"
        at = fresh(waiting).next_due_at
        looks.append(at)
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(looks)]
    assert gaps == sorted(gaps) and gaps[-1] == 60
    assert fresh(waiting).task_unknown_since == now
    assert not Execution.objects.filter(job=waiting).exists()


@pytest.mark.django_db
def test_past_the_grace_the_occurrence_fails_naming_the_task(
    make_job: MakeJob, now: datetime, default_knobs: Any
) -> None:
    default_knobs.SCHEDULING_UNKNOWN_TASK_GRACE = 5
    waiting = undeclared_job(make_job, every="PT1M")
    claims.claim_due_jobs(now=now, limit=100)
    claims.claim_due_jobs(now=now + 4 * SECOND, limit=100)
    assert not Execution.objects.filter(job=waiting).exists(), "within the grace: still waits"

    claims.claim_due_jobs(now=now + 5 * SECOND, limit=100)

    failed = Execution.objects.get(job=waiting)
    assert failed.status == ExecutionStatus.FAILED
    assert failed.scheduled_for == now, "the occurrence it owed, not a later one"
    assert f"task: {UNDECLARED!r} is not a registered Celery task" in failed.last_error
    assert (
        f"no process that knows {UNDECLARED!r} took this occurrence within "
        "SCHEDULING_UNKNOWN_TASK_GRACE (5 s)" in failed.last_error
    )
    row = fresh(waiting)
    assert row.task_unknown_since is None and row.next_occurrence_at == now + MINUTE


@pytest.mark.django_db
def test_a_scheduler_that_knows_the_task_claims_the_occurrence_and_clears_the_mark(
    make_job: MakeJob, now: datetime, default_knobs: Any
) -> None:
    job = make_job(every="PT1M")
    Job.objects.filter(pk=job.pk).update(task=UNDECLARED)
    claims.claim_due_jobs(now=now, limit=100)  # the old side: left, marked
    Job.objects.filter(pk=job.pk).update(task=NOOP)  # the new side knows it

    bells = claims.claim_due_jobs(now=now + 2 * SECOND, limit=100).bells

    assert [(b.task, Execution.objects.get(pk=b.execution_id).scheduled_for) for b in bells] == [
        (NOOP, now)
    ]
    assert fresh(job).task_unknown_since is None
    assert fresh(job).next_occurrence_at == now + MINUTE


@pytest.mark.django_db
def test_celery_s_own_tasks_are_refused_at_once_not_awaited(
    make_job: MakeJob, now: datetime, default_knobs: Any
) -> None:
    job = make_job(every="PT1M")
    Job.objects.filter(pk=job.pk).update(task="celery.backend_cleanup")
    claims.claim_due_jobs(now=now, limit=100)
    assert Execution.objects.get(job=job).status == ExecutionStatus.FAILED


# --- a publisher or worker of a release that does not know the task ---------------------------


def queued_execution(make_job: MakeJob, now: datetime) -> Execution:
    job = make_job(every="PT1H")
    claims.claim_due_jobs(now=now, limit=100)
    execution = Execution.objects.get(job=job)
    publishing.mark_queued(execution_ids=[execution.pk], now=now)
    return execution


@pytest.mark.django_db
def test_a_worker_that_does_not_know_the_task_hands_the_execution_back(
    make_job: MakeJob, now: datetime, default_knobs: Any
) -> None:
    default_knobs.SCHEDULING_UNKNOWN_TASK_GRACE = 30
    execution = queued_execution(make_job, now)

    status = attempts.await_known_task(
        execution_id=execution.pk, target=NOOP, now=now, who="worker old@host"
    )

    row = Execution.objects.get(pk=execution.pk)
    assert status == row.status == ExecutionStatus.RETRY
    assert row.retry_count == 0, "no retry is spent"
    assert row.retry_at == now + SECOND and row.task_unknown_since == now
    assert row.last_error.startswith(f"waiting for a process that knows task {NOOP!r}")
    # Reported again later (another old worker took the republished message): still waiting,
    # since the first time; past the grace, failed for good, naming the task.
    attempts.await_known_task(
        execution_id=execution.pk, target=NOOP, now=now + 10 * SECOND, who="w"
    )
    row = Execution.objects.get(pk=execution.pk)
    assert row.status == ExecutionStatus.RETRY and row.task_unknown_since == now
    assert row.retry_at == now + 20 * SECOND
    attempts.await_known_task(
        execution_id=execution.pk, target=NOOP, now=now + 30 * SECOND, who="w"
    )
    row = Execution.objects.get(pk=execution.pk)
    assert row.status == ExecutionStatus.FAILED
    assert f"no process that knows {NOOP!r} took this occurrence" in row.last_error


@pytest.mark.django_db
def test_a_publisher_that_does_not_know_the_task_hands_the_execution_back_unsent(
    make_job: MakeJob, now: datetime, default_knobs: Any
) -> None:
    execution = queued_execution(make_job, now)
    Execution.objects.filter(pk=execution.pk).update(
        task=UNDECLARED, status=ExecutionStatus.RETRY, retry_at=now
    )

    bells = publishing.reclaim_for_publish(now=now + SECOND, limit=100)

    assert bells == []
    row = Execution.objects.get(pk=execution.pk)
    assert row.status == ExecutionStatus.RETRY and row.retry_count == 0
    assert row.task_unknown_since == now + SECOND


@pytest.mark.django_db
def test_the_wait_is_counted_for_health_the_dashboard_and_check(
    make_job: MakeJob, now: datetime, default_knobs: Any, admin_client: Any
) -> None:
    for _ in range(2):
        undeclared_job(make_job, every="PT1M")
    claims.claim_due_jobs(now=now, limit=100)

    (found,) = overview.awaiting_tasks()
    assert (found.task, found.jobs, found.executions, found.known_here) == (
        UNDECLARED,
        2,
        0,
        False,
    )
    unknown = admin_client.get("/health/").json()["checks"]["unknown_tasks"]
    assert unknown["ok"] is True, "a warning, never a failure"
    assert "2 occurrence(s) of task" in unknown["warning"]
    [entry] = unknown["awaiting"]
    assert (entry["task"], entry["jobs"]) == (UNDECLARED, 2)
    page = admin_client.get("/dashboard/").content.decode()
    assert f"2 occurrence(s) of task &#x27;{UNDECLARED}&#x27; wait" in page
    [warning] = check_awaiting_tasks()
    assert warning.id == "scheduling.W011"
    assert f"2 occurrence(s) of task {UNDECLARED!r} wait for a process that knows it" in (
        warning.msg
    )


# --- two releases side by side ----------------------------------------------------------------


def body_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def worker(processes: Processes, env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
    child = processes.start(celery_worker_command(name=name, concurrency=1), env=env, name=name)
    wait_for(
        lambda: "worker.ready" in processes.log_of(child) or child.poll() is not None,
        timeout=60,
        message=f"{name} is ready",
    )
    assert child.poll() is None, processes.log_of(child)
    return child


def stop(processes: Processes, child: subprocess.Popen[bytes]) -> None:
    processes.kill(child, signal.SIGTERM)
    child.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_old_and_new_releases_side_by_side_run_every_occurrence_exactly_once(
    processes: Processes,
    process_env: dict[str, str],
    owner: Any,
    admin_client: Any,
    tmp_path: Path,
) -> None:
    body_log = tmp_path / "bodies.log"
    old_env = {
        **process_env,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DUECOURSE_TEST_BODY_LOG": str(body_log),
        "SCHEDULING_UNKNOWN_TASK_GRACE": "600",
        "SCHEDULING_QUEUE_IDLE_WARN": "0",
    }
    new_env = {**old_env, "DJANGO_SETTINGS_MODULE": "tests.settings_new_release"}
    at = timezone.now()
    labels = [f"new-{i}" for i in range(3)]
    fresh_jobs = [
        create_job(owner=owner, name=label, task=NEW_TASK, args=[label], at=at, now=at)
        for label in labels
    ]
    common = create_job(owner=owner, name="common", task=NOOP, at=at, now=at)

    def statuses(jobs: list[Job]) -> Counter[str]:
        return Counter(Execution.objects.filter(job__in=jobs).values_list("status", flat=True))

    def nothing_failed() -> None:
        assert not Execution.objects.filter(status=ExecutionStatus.FAILED).exists(), list(
            Execution.objects.values_list("task", "status", "last_error")
        )

    # 1. Only the old release runs: the common job runs; the new task's jobs wait, marked.
    old_worker = worker(processes, old_env, "old")
    old_scheduler = processes.start(scheduler_command(), env=old_env, name="old-scheduler")
    wait_for(
        lambda: statuses([common]) == {ExecutionStatus.COMPLETED: 1},
        timeout=60,
        message="the common job runs on the old release",
    )
    wait_for(
        lambda: all(fresh(job).task_unknown_since for job in fresh_jobs),
        timeout=30,
        message="the old scheduler leaves the new task's jobs, marked",
    )
    assert statuses(fresh_jobs) == {}
    nothing_failed()
    health = admin_client.get("/health/").json()
    [waiting] = health["checks"]["unknown_tasks"]["awaiting"]
    assert (waiting["task"], waiting["jobs"]) == (NEW_TASK, 3)
    check = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=old_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = check.stdout + check.stderr
    assert "scheduling.W011" in said and f"3 occurrence(s) of task {NEW_TASK!r}" in said, said
    assert "this process does not know it" in said

    # 2. The new release's scheduler replaces the old one while only old workers run: they
    #    do not know the task, and hand each execution back instead of failing it.
    stop(processes, old_scheduler)
    processes.start(scheduler_command(), env=new_env, name="new-scheduler")
    wait_for(
        lambda: Execution.objects.filter(
            job__in=fresh_jobs, status=ExecutionStatus.RETRY, task_unknown_since__isnull=False
        ).exists(),
        timeout=90,
        message="an old worker hands an execution of the new task back",
    )
    nothing_failed()
    assert body_lines(body_log) == []
    assert all(fresh(job).task_unknown_since is None for job in fresh_jobs)

    # 3. The new release's worker replaces the old one: every occurrence runs, once.
    stop(processes, old_worker)
    worker(processes, new_env, "new")
    wait_for(
        lambda: statuses(fresh_jobs) == {ExecutionStatus.COMPLETED: 3},
        timeout=120,
        message="every occurrence of the new task completes on the new release",
    )
    assert sorted(body_lines(body_log)) == [f"greet {label}" for label in labels]
    assert statuses([common]) == {ExecutionStatus.COMPLETED: 1}
    nothing_failed()
    health = admin_client.get("/health/").json()
    assert health["checks"]["unknown_tasks"]["awaiting"] == []
    connection.close()
