"""One owner's or one job's runs cannot take every worker slot.

A job due every second with a long body and overlap allowed once took both worker processes,
and another owner's run-now waited in the broker behind it. A job may cap its running
executions (``max_running``; ``jobs add --max-running``, the admin) and the site may cap each
owner's (``SCHEDULING_OWNER_MAX_RUNNING``, with per-user exceptions). The ledger keeps the
limit for every worker at once, where an execution starts; an occurrence over it waits in the
ledger (status ``waiting``, with the reason), holds no worker slot, and runs once a slot is
free, oldest first. Nothing is lost.
"""

from __future__ import annotations

import io
import itertools
import json
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.db.models import F
from django.test import Client
from django.utils import timezone

from scheduling import api
from scheduling.models import Execution, ExecutionStatus, Job
from scheduling.stages import attempts, claims, limits
from tests.conftest import Processes, database_engine, scheduler_command, wait_for
from tests.factories import create_job
from tests.scheduling.test_admin_jobs import form_data
from tests.scheduling.test_worker_lifecycle import SLOW, start_worker

pytestmark = pytest.mark.specification

NOOP = "scheduling.diagnostics.noop"
db = pytest.mark.django_db


def occurrences(job: Job, count: int) -> list[Execution]:
    """``count`` queued occurrences of ``job``, a second apart, as the claim leaves them."""
    now = timezone.now()
    return [
        Execution.objects.create(
            job=job, task=job.task, scheduled_for=now - timedelta(seconds=count - i),
            status=ExecutionStatus.QUEUED, queued_at=now,
        )
        for i in range(count)
    ]


def start(execution: Execution, worker: str = "w1@host") -> attempts.Started | None:
    return attempts.start_execution(
        execution_id=execution.pk, worker=worker, pid=1, now=timezone.now()
    )


def status(execution: Execution) -> str:
    return str(Execution.objects.get(pk=execution.pk).status)


# --- the start ------------------------------------------------------------------------------


@db
def test_a_start_over_the_job_s_limit_waits_in_the_ledger_with_the_reason(make_job: Any) -> None:
    job = make_job(overlap="allow", max_running=2)
    first, second, third = occurrences(job, 3)
    assert start(first) is not None and start(second) is not None
    assert start(third) is None
    held = Execution.objects.get(pk=third.pk)
    assert held.status == ExecutionStatus.WAITING
    assert held.last_error == f"waiting: job {job.name!r} has 2 of 2 running (max_running)"
    assert not held.attempts.exists() and held.duplicates == 0


@db
def test_a_start_over_the_owner_s_limit_waits_whatever_the_job(
    make_job: Any, settings: Any, django_user_model: Any
) -> None:
    settings.SCHEDULING_OWNER_MAX_RUNNING = 1
    busy, other = make_job(name="busy"), make_job(name="other")
    assert start(occurrences(busy, 1)[0]) is not None
    (blocked,) = occurrences(other, 1)
    assert start(blocked) is None
    owner = busy.owner.username
    assert Execution.objects.get(pk=blocked.pk).last_error == (
        f"waiting: owner {owner!r} has 1 of 1 running (SCHEDULING_OWNER_MAX_RUNNING)"
    )
    someone_else = make_job(name="theirs", owner=django_user_model.objects.create(username="bo"))
    assert start(occurrences(someone_else, 1)[0]) is not None, "another owner has room"


@db
def test_an_owner_s_override_lifts_or_tightens_the_default(
    make_job: Any, settings: Any, django_user_model: Any
) -> None:
    settings.SCHEDULING_OWNER_MAX_RUNNING = 1
    vip = django_user_model.objects.create(username="vip")
    settings.SCHEDULING_OWNER_MAX_RUNNING_OVERRIDES = {"vip": 0}
    runs = occurrences(make_job(name="many", owner=vip, overlap="allow"), 3)
    assert all(start(run) is not None for run in runs), "0: no limit for vip"
    assert limits.owner_limit("vip") is None and limits.owner_limit("anyone") == 1


@db
def test_jobs_without_limits_start_as_before(make_job: Any) -> None:
    runs = occurrences(make_job(overlap="allow"), 5)
    assert all(start(run) is not None for run in runs)
    assert not Execution.objects.filter(status=ExecutionStatus.WAITING).exists()


# --- the release ----------------------------------------------------------------------------


@db
def test_waiting_runs_are_released_oldest_first_as_slots_free(make_job: Any) -> None:
    job = make_job(overlap="allow", max_running=2)
    runs = occurrences(job, 5)
    for run in runs:
        start(run)
    assert [status(run) for run in runs] == ["running"] * 2 + ["waiting"] * 3
    assert limits.release_waiting(now=timezone.now(), limit=100) == [], "no room yet"

    attempts.complete_execution(execution_id=runs[0].pk, now=timezone.now())
    released = limits.release_waiting(now=timezone.now(), limit=100)
    assert released == [runs[2].pk], "the oldest, and only as many as there is room"
    assert status(runs[2]) == "pending" and Execution.objects.get(pk=runs[2].pk).last_error == ""
    assert limits.release_waiting(now=timezone.now(), limit=100) == [], "room is taken"


@db
def test_a_waiting_run_of_a_forbid_job_keeps_the_next_occurrence_back(
    make_job: Any, now: Any, settings: Any
) -> None:
    settings.SCHEDULING_OWNER_MAX_RUNNING = 1
    make_job(name="busy", overlap="allow")
    busy = Job.objects.get(name="busy")
    start(occurrences(busy, 1)[0])
    waiting_job = make_job(name="patient", every="PT1M")
    claims.claim_due_jobs(now=now, limit=10)
    (first,) = Execution.objects.filter(job=waiting_job)
    assert start(first) is None and status(first) == "waiting"
    claims.claim_due_jobs(now=now + timedelta(minutes=5), limit=10)
    assert Execution.objects.filter(job=waiting_job).count() == 1, "no occurrence beside it"


@pytest.mark.skipif(
    database_engine() == "sqlite",
    reason="threads share SQLite's in-memory test database without its file locks",
)
@pytest.mark.django_db(transaction=True)
def test_a_start_that_waited_for_the_slot_starts_after_the_run_that_freed_it(
    make_job: Any,
) -> None:
    """A start's time is when it got its slot, not when its message came.

    The worker takes the start's ``now`` when the message comes; a completion of the job's
    running run is meanwhile in its transaction, holding what the start must lock (on MySQL
    and MariaDB the job's row, which the completion writes). The start waits for it, finds
    the slot free, and must not record a start earlier than the finish that freed the slot:
    "never two at once" is read from those two times.
    """
    job = make_job(overlap="allow", max_running=1)
    running, waiting = occurrences(job, 2)
    assert start(running) is not None
    came = timezone.now()  # the second message comes while the first run ends
    completing = threading.Event()

    def complete_slowly() -> None:
        try:
            with transaction.atomic():
                Job.objects.filter(pk=job.pk).update(execute_count=F("execute_count") + 1)
                Execution.objects.filter(pk=running.pk).update(
                    status=ExecutionStatus.COMPLETED, finished_at=timezone.now()
                )
                completing.set()
                time.sleep(1)  # the scenario: a completion still in its transaction
        finally:
            connection.close()

    ending = threading.Thread(target=complete_slowly)
    ending.start()
    assert completing.wait(timeout=SLOW)
    started = attempts.start_execution(execution_id=waiting.pk, worker="w2@host", pid=2, now=came)
    ending.join(timeout=SLOW)
    if started is not None:
        finished = Execution.objects.get(pk=running.pk).finished_at
        assert started.started_at >= finished, "two runs of a max_running=1 job at once"


@db
def test_a_waiting_run_can_be_cancelled(make_job: Any) -> None:
    job = make_job(overlap="allow", max_running=1)
    running, held = occurrences(job, 2)
    start(running)
    start(held)
    assert api.cancel(job.pk) == 2
    assert status(held) == "cancelled"


# --- every door -----------------------------------------------------------------------------


@db
def test_the_command_line_sets_shows_and_removes_the_limit(owner: Any) -> None:
    call_command("jobs", "add", "capped", "--task", NOOP, "--every", "PT1M", "--overlap",
                 "allow", "--max-running", "2", "--owner", owner.username)  # fmt: skip
    out = io.StringIO()
    call_command("jobs", "show", "capped", "--json", stdout=out)
    assert json.loads(out.getvalue())["max_running"] == 2
    call_command("jobs", "edit", "capped", "--max-running", "0")
    assert Job.objects.get(name="capped").max_running is None
    with pytest.raises(CommandError, match=r"--max-running: '-1' is not a whole number from 0 to"):
        call_command("jobs", "edit", "capped", "--max-running", "-1")


@db
def test_the_admin_sets_the_limit_and_refuses_zero(admin_client: Client, admin_user: Any) -> None:
    mine = {"owner": admin_user.pk, "overlap": "allow"}
    response = admin_client.post("/admin/scheduling/job/add/", form_data(max_running="0", **mine))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["max_running"]
    response = admin_client.post("/admin/scheduling/job/add/", form_data(max_running="3", **mine))
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Job.objects.get(name="report").max_running == 3


@db
def test_the_dashboard_and_metrics_show_what_waits(admin_client: Client, make_job: Any) -> None:
    job = make_job(overlap="allow", max_running=1)
    for run in occurrences(job, 2):
        start(run)
    page = admin_client.get("/dashboard/").content.decode()
    assert 'id="panel-waiting"' in page and "1 of 1 running (max_running)" in page
    metrics = admin_client.get("/metrics").content.decode()
    assert 'duecourse_executions_unfinished{status="waiting"} 1.0' in metrics


# --- on real workers ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.mariadb_faults
@pytest.mark.django_db(transaction=True)
def test_a_long_job_due_every_second_leaves_room_for_another_owner_and_loses_nothing(
    owner: Any,
    django_user_model: Any,
    processes: Processes,
    process_env: dict[str, str],
    publish_under_prefix: str,
) -> None:
    greedy = create_job(owner=owner, name="greedy", task="scheduling.diagnostics.sleep",
                             kwargs={"seconds": 3}, every="PT1S", overlap="allow",
                             max_running=1, now=timezone.now())  # fmt: skip
    other = create_job(owner=django_user_model.objects.create(username="other"),
                            name="quick", task=NOOP, every="P1D",
                            now=timezone.now() + timedelta(days=1))  # fmt: skip
    env = {**process_env, "SCHEDULING_MAX_SLEEP": "0.2"}
    start_worker(processes, env, "pool", concurrency=2)
    scheduler = processes.start(scheduler_command(), env=env, name="scheduler")

    def greedy_runs() -> Any:
        return Execution.objects.filter(job=greedy)

    wait_for(lambda: greedy_runs().filter(status=ExecutionStatus.WAITING).count() >= 3,
             timeout=SLOW, message="occurrences over the limit wait in the ledger")  # fmt: skip
    asked = timezone.now()
    quick = api.run_now(other.pk)
    done = wait_for(
        lambda: Execution.objects.filter(pk=quick, status=ExecutionStatus.COMPLETED).first(),
        timeout=SLOW, message="the other owner's run-now runs beside the long job",
    )  # fmt: skip
    assert (done.started_at - asked) < timedelta(seconds=3), "it did not wait for a 3 s body"

    Job.objects.filter(pk=greedy.pk).update(status="paused")
    wait_for(lambda: not greedy_runs().exclude(status=ExecutionStatus.COMPLETED).exists(),
             timeout=4 * SLOW, message="every waiting occurrence runs in the end")  # fmt: skip
    assert scheduler.poll() is None
    runs = list(greedy_runs().order_by("started_at"))
    due = sorted(run.scheduled_for for run in runs)
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(due)), "none lost"
    assert all(run.attempts.count() == 1 for run in runs), "none run twice"
    for before, after in itertools.pairwise(runs):
        assert before.finished_at <= after.started_at, "never two of them at once"
    # The first start is a race between messages; every start after it was a release.
    released = [run.scheduled_for for run in runs[1:]]
    assert released == sorted(released), "released oldest first"
