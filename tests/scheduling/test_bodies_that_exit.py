"""A body that ends its process is bounded: it fails, and the worker goes on.

``SystemExit`` and ``KeyboardInterrupt`` raised by a body (``sys.exit()`` too) fail the attempt
like any error: the class path and the traceback are recorded, the job's retries apply, and
then the execution is FAILED; neither a prefork pool process nor a ``solo`` worker ends under
it. A body that ends its process anyway (``os._exit``, a signal, the OOM killer) is retried
until its process has died under it ``SCHEDULING_MAX_INTERRUPTIONS`` times, then fails naming
the cause; it is never published again without end. A shutdown of the worker under a run never
counts there. Django's Tasks framework sees a run whose
body raised ``SystemExit`` as FAILED, the exception's class in ``errors[0]`` (Django's own
``test_catches_exception``). The worker's own shutdown is still a shutdown: a pool process
signalled under a body hands the run back (``test_worker_crashes``).
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import datetime, timedelta
from typing import Any

import pytest
from billiard import common as billiard_common
from celery.exceptions import WorkerShutdown, WorkerTerminate

from scheduling import checks
from scheduling.models import Execution, ExecutionStatus, Job, JobStatus
from scheduling.stages import attempts, liveness
from scheduling.worker.taskbase import schedulable_task, worker_is_exiting
from tests.conftest import Processes, celery_worker_command, wait_for
from tests.scheduling.test_worker_lifecycle import (
    SLOW,
    due_job,
    finished,
    retry_env,
    wait_ready,
)

try:  # Django 6
    from django.tasks import TaskResultStatus, task
except ImportError:  # Django 5.2 with the backport
    from django_tasks import TaskResultStatus, task


# --- bodies for these tests only (workers load this module with -I) ------------------------


@schedulable_task(name="tests.exits.system_exit")
def raise_system_exit(code: int = 3) -> None:
    raise SystemExit(code)


@schedulable_task(name="tests.exits.keyboard_interrupt")
def raise_keyboard_interrupt() -> None:
    raise KeyboardInterrupt


@schedulable_task(name="tests.exits.sys_exit")
def call_sys_exit() -> None:
    sys.exit()


@schedulable_task(name="tests.exits.os_exit")
def call_os_exit(code: int = 7) -> None:
    os._exit(code)


@task
def django_task_exits() -> None:
    raise SystemExit("a Django task asked to exit")


def worker(processes: Processes, env: dict[str, str], name: str, pool: str = "prefork") -> Any:
    command = [*celery_worker_command(name=name, concurrency=1, pool=pool), "-I", __name__]
    return processes.start(command, env=env, name=name)


def scheduler(processes: Processes, env: dict[str, str]) -> Any:
    """``runscheduler`` in a process that knows these tasks (it checks a job's target)."""
    code = (
        "import django; django.setup();"
        f"import {__name__};"
        "from django.core.management import call_command; call_command('runscheduler')"
    )
    return processes.start([sys.executable, "-c", code], env=env, name="scheduler")


def failed_executions(*jobs: Job) -> Any:
    def check() -> list[Execution] | None:
        found = [finished(job, ExecutionStatus.FAILED)() for job in jobs]
        return found if all(found) else None

    return check


# --- on real workers --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_body_raising_system_exit_or_keyboard_interrupt_fails_its_attempts_like_any_error(
    owner: Any, processes: Processes, process_env: dict[str, str]
) -> None:
    env = retry_env(process_env)
    jobs = [
        due_job(owner, "system-exit", "tests.exits.system_exit", max_retries=1),
        due_job(owner, "keyboard-interrupt", "tests.exits.keyboard_interrupt", max_retries=1),
        due_job(owner, "sys-exit", "tests.exits.sys_exit", max_retries=1),
    ]
    prefork = worker(processes, env, "exits")
    scheduler(processes, env)
    wait_ready(processes, prefork)

    executions = wait_for(failed_executions(*jobs), timeout=SLOW, message="each job fails")

    assert prefork.poll() is None, processes.log_of(prefork)
    raised = ["builtins.SystemExit", "builtins.KeyboardInterrupt", "builtins.SystemExit"]
    bodies = ["raise_system_exit", "raise_keyboard_interrupt", "call_sys_exit"]
    pids = set()
    for execution, kind, body in zip(executions, raised, bodies, strict=True):
        assert execution.retry_count == 1, "retried as the job says, then failed"
        tries = list(execution.attempts.order_by("number"))
        assert [a.outcome for a in tries] == ["failed", "failed"]
        for attempt in tries:
            assert attempt.error.startswith(f"{kind} raised by the task body"), attempt.error
            assert body in attempt.error, "the traceback is kept"
            pids.add(attempt.pid)
    assert len(pids) == 1, "the one pool process lived through every one of them"
    assert "WorkerLostError" not in processes.log_of(prefork)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_solo_worker_goes_on_serving_after_a_body_raises_system_exit(
    owner: Any, processes: Processes, process_env: dict[str, str]
) -> None:
    env = retry_env(process_env)
    exits = due_job(owner, "exits", "tests.exits.system_exit", max_retries=0)
    solo = worker(processes, env, "solo", pool="solo")
    scheduler(processes, env)
    wait_ready(processes, solo)
    wait_for(finished(exits, ExecutionStatus.FAILED), timeout=SLOW, message="the body fails")
    after = due_job(owner, "after", "scheduling.diagnostics.noop")

    wait_for(finished(after), timeout=SLOW, message="the next job runs on the same worker")
    assert solo.poll() is None, processes.log_of(solo)
    (attempt,) = Execution.objects.get(job=exits).attempts.all()
    assert attempt.outcome == "failed" and "builtins.SystemExit" in attempt.error
    os.kill(solo.pid, signal.SIGTERM)  # the worker's own shutdown still shuts it down
    assert solo.wait(timeout=SLOW) == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_body_that_ends_its_process_fails_after_max_interruptions_naming_the_cause(
    owner: Any, processes: Processes, process_env: dict[str, str]
) -> None:
    """``os._exit(7)`` in a pool process: three lost processes, then FAILED; retries left over
    (ten) do not bring it back."""
    env = retry_env(process_env, MAX_INTERRUPTIONS="3")
    job = due_job(owner, "os-exit", "tests.exits.os_exit", max_retries=10)
    prefork = worker(processes, env, "ends")
    scheduler(processes, env)
    wait_ready(processes, prefork)

    execution = wait_for(finished(job, ExecutionStatus.FAILED), timeout=SLOW,
                         message="the execution fails")  # fmt: skip

    assert prefork.poll() is None, processes.log_of(prefork)
    tries = list(execution.attempts.order_by("number"))
    assert [a.outcome for a in tries] == ["abandoned"] * 3
    assert execution.last_error.startswith(
        "the worker process died under it 3 times (SCHEDULING_MAX_INTERRUPTIONS is 3); last: "
        "abandoned: the pool process running it died (WorkerLostError: Worker exited "
        "prematurely: exitcode 7"
    ), execution.last_error
    assert len({a.pid for a in tries}) == 3, "each attempt ended its own pool process"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_django_task_raising_system_exit_ends_failed_with_its_exception_class(
    processes: Processes, process_env: dict[str, str], publish_under_prefix: str
) -> None:
    prefork = worker(processes, process_env, "django-exits")
    wait_ready(processes, prefork)
    result = django_task_exits.enqueue()

    def ended() -> Any:
        found = django_task_exits.get_result(result.id)
        return found if found.status == TaskResultStatus.FAILED else None

    done = wait_for(ended, timeout=SLOW, message="the run ends")
    [error] = done.errors
    assert error.exception_class is SystemExit
    assert error.exception_class_path == "builtins.SystemExit"
    assert "a Django task asked to exit" in error.traceback
    assert prefork.poll() is None, processes.log_of(prefork)


# --- the rule, on the ledger ------------------------------------------------------------------


@pytest.fixture
def running(make_job: Any, now: datetime) -> Execution:
    job = make_job(max_retries=10)
    execution = Execution.objects.create(job=job, task=job.task, scheduled_for=now)
    attempts.start_execution(execution_id=execution.pk, worker="w1", pid=1, now=now)
    return execution


@pytest.mark.django_db
def test_shutdowns_beyond_the_limit_spend_no_retry_and_leave_the_run_due_again(
    running: Execution, now: datetime, settings: Any
) -> None:
    """A long run that rolling deploys interrupt more often than the limit still runs again:
    the limit bounds processes that died under a run, not shutdowns of the worker."""
    settings.SCHEDULING_MAX_INTERRUPTIONS = 3
    running.job.pause_after_failures = 1
    running.job.save(update_fields=["pause_after_failures"])
    for number in range(1, 6):
        assert attempts.interrupt_execution(execution_id=running.pk, now=now)
        running.refresh_from_db()
        assert (running.status, running.retry_count) == (ExecutionStatus.RETRY, 0)
        assert running.retry_at == now, "due again at once"
        attempts.start_execution(execution_id=running.pk, worker="w1", pid=number + 1, now=now)

    assert [a.outcome for a in running.attempts.order_by("number")][:5] == ["interrupted"] * 5
    running.job.refresh_from_db()
    assert running.job.consecutive_failures == 0, "a shutdown is not the job's failure"
    assert running.job.status == JobStatus.ACTIVE


@pytest.mark.django_db
def test_processes_that_died_fail_the_execution_at_the_limit(
    running: Execution, now: datetime, settings: Any
) -> None:
    """Shutdowns in between do not count; the third attempt reaped from a dead process does."""
    settings.SCHEDULING_MAX_INTERRUPTIONS = 3
    at = now
    for number in range(1, 6):
        at += timedelta(seconds=1)
        if number % 2:  # attempts 1, 3 and 5 lose their process; 2 and 4 are shut down
            assert liveness.reap_execution(execution_id=running.pk, now=at, stale_after=0.5)
        else:
            assert attempts.interrupt_execution(execution_id=running.pk, now=at)
        running.refresh_from_db()
        if number < 5:
            assert running.status == ExecutionStatus.RETRY, number
            attempts.start_execution(execution_id=running.pk, worker="w1", pid=number + 1, now=at)

    assert running.status == ExecutionStatus.FAILED and running.retry_at is None
    assert running.last_error.startswith(
        "the worker process died under it 3 times (SCHEDULING_MAX_INTERRUPTIONS is 3); last: "
    )
    assert [a.outcome for a in running.attempts.order_by("number")] == [
        "abandoned", "interrupted", "abandoned", "interrupted", "abandoned"
    ]  # fmt: skip
    assert running.retry_count == 2, "the two earlier reaped attempts spent retries"
    running.job.refresh_from_db()
    assert running.job.current_execution_id is None, "the job is released"
    assert running.job.consecutive_failures == 1


@pytest.mark.parametrize("value", [0, -1, 2.5, "many", True])
def test_max_interruptions_must_be_a_positive_whole_number(settings: Any, value: Any) -> None:
    settings.SCHEDULING_MAX_INTERRUPTIONS = value
    [message] = checks.check_settings()
    assert message.id == "scheduling.E008"
    assert message.msg.startswith(f"SCHEDULING_MAX_INTERRUPTIONS = {value!r} ")


def test_the_worker_s_own_shutdown_is_let_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """What Celery raises to stop a ``solo`` worker, and billiard's SIGTERM handler in a pool
    process, end the process as before; the same exceptions raised by a body do not."""
    monkeypatch.setattr(signal, "getsignal", lambda signum: signal.SIG_IGN)
    assert worker_is_exiting(WorkerShutdown(0)) and worker_is_exiting(WorkerTerminate(1))
    assert not worker_is_exiting(SystemExit(3)) and not worker_is_exiting(KeyboardInterrupt())
    monkeypatch.setattr(billiard_common, "_should_have_exited", [True])
    assert worker_is_exiting(SystemExit(-15)), "billiard's handler fired in this process"
    monkeypatch.setattr(billiard_common, "_should_have_exited", [False])
    monkeypatch.setattr(signal, "getsignal", lambda signum: signal.default_int_handler)
    assert worker_is_exiting(KeyboardInterrupt()), "Python's own Ctrl+C handler is in place"
