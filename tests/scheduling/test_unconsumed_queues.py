"""A queue no worker consumes is a warning in ``/health/``, the dashboard and ``manage.py check``.

Its executions wait for ever while the database, the broker and the scheduler are fine, so
nothing else goes red. The evidence is the ledger's own (docs/operations.md, *Queues without a
consumer*): executions of the queue have waited, published and not started, for longer than
``SCHEDULING_QUEUE_IDLE_WARN``, nothing of the queue runs now, and nothing of it started in
that time. A queue whose workers are only busy is not named, however long its backlog.

A specification on a fixed clock, with the workers played by the verbs they call; the last
test runs a real worker that consumes ``celery`` only, and a job on ``reports``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from scheduling import api, checks
from scheduling.models import Execution, ExecutionStatus, Job
from scheduling.stages import attempts, claims, publishing
from scheduling.web import overview
from tests.conftest import Processes, celery_worker_command, wait_for

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)
IDLE = 5 * MINUTE  # SCHEDULING_QUEUE_IDLE_WARN's default
MakeJob = Callable[..., Job]


@pytest.fixture(autouse=True)
def default_idle_warn(settings: Any) -> None:
    settings.SCHEDULING_QUEUE_IDLE_WARN = IDLE.total_seconds()


def queued(make_job: MakeJob, now: datetime, *, queue: str, name: str) -> int:
    """A job on ``queue`` claimed at ``now``, its message published at once."""
    job = make_job(name=name, queue=queue, every="PT1H", now=now)
    claims.claim_due_jobs(now=now, limit=100)
    execution_id = Execution.objects.get(job=job).pk
    publishing.mark_queued(execution_ids=[execution_id], now=now)
    return execution_id


def started(execution_id: int, at: datetime) -> None:
    assert attempts.start_execution(execution_id=execution_id, worker="w1", pid=1, now=at)


def named(at: datetime, **options: Any) -> list[str]:
    return [found.queue for found in overview.unconsumed_queues(now=at, **options)]


def test_a_queue_whose_work_waits_with_nothing_started_is_named(
    make_job: MakeJob, now: datetime
) -> None:
    queued(make_job, now, queue="reports", name="nightly-report")
    assert named(now + IDLE - MINUTE) == []  # not long enough yet
    [found] = overview.unconsumed_queues(now=now + IDLE + MINUTE)
    assert (found.queue, found.waiting, found.since, found.jobs) == (
        "reports",
        1,
        now,
        ["nightly-report"],
    )
    assert "no worker seems to consume it" in found.describe(now + IDLE + MINUTE)


def test_a_row_published_again_keeps_the_start_of_its_wait(
    make_job: MakeJob, now: datetime
) -> None:
    """The scheduler publishes a stalled row again after REQUEUE_AFTER; the wait goes on."""
    execution_id = queued(make_job, now, queue="reports", name="nightly-report")
    publishing.mark_queued(execution_ids=[execution_id], now=now + 10 * MINUTE)
    Execution.objects.filter(pk=execution_id).update(queued_at=now + 10 * MINUTE)
    assert named(now + 11 * MINUTE) == ["reports"]


def test_a_busy_queue_is_not_named_however_long_its_backlog(
    make_job: MakeJob, now: datetime
) -> None:
    first, second, _third = (
        queued(make_job, now, queue="reports", name=f"report-{i}") for i in range(3)
    )
    started(first, now + MINUTE)  # a long task holds the queue's only worker
    assert named(now + 30 * MINUTE) == []  # something of the queue is running
    attempts.complete_execution(execution_id=first, now=now + 29 * MINUTE)
    started(second, now + 29 * MINUTE)
    attempts.complete_execution(execution_id=second, now=now + 30 * MINUTE)
    # The third still waits and nothing runs, but the queue started work four minutes ago.
    assert named(now + 33 * MINUTE) == []
    # Nothing started for longer than the setting while work waits: the queue went quiet.
    assert named(now + 35 * MINUTE) == ["reports"]


def test_other_queues_moving_do_not_hide_a_queue_that_does_not(
    make_job: MakeJob, now: datetime
) -> None:
    queued(make_job, now, queue="reports", name="nightly-report")
    moving = queued(make_job, now, queue="celery", name="cleanup")
    started(moving, now + 9 * MINUTE)
    assert named(now + 10 * MINUTE) == ["reports"]


def test_the_warning_is_off_at_zero(make_job: MakeJob, now: datetime, settings: Any) -> None:
    queued(make_job, now, queue="reports", name="nightly-report")
    settings.SCHEDULING_QUEUE_IDLE_WARN = 0
    assert named(now + 60 * MINUTE) == []


def test_a_staff_user_is_told_only_of_their_own_jobs(
    make_job: MakeJob, now: datetime, owner: Any, django_user_model: Any
) -> None:
    queued(make_job, now, queue="reports", name="nightly-report")
    other = django_user_model.objects.create(username="other")
    assert named(now + IDLE + MINUTE, owner_id=owner.pk) == ["reports"]
    assert named(now + IDLE + MINUTE, owner_id=other.pk) == []


# --- where it shows ------------------------------------------------------------------------------


@pytest.fixture
def stalled(make_job: MakeJob) -> int:
    """A job on ``reports`` whose execution has waited an hour, on the real clock."""
    return queued(make_job, timezone.now() - 60 * MINUTE, queue="reports", name="nightly-report")


def test_health_says_warn_with_http_200_and_names_the_queue_to_who_may_see(
    stalled: int, admin_client: Client, client: Client, settings: Any
) -> None:
    detailed = admin_client.get("/health/")
    assert detailed.status_code in (200, 503)  # 503 only if another component is down here
    queues = detailed.json()["checks"]["queues"]
    assert queues["ok"] is True
    assert [q["queue"] for q in queues["unconsumed"]] == ["reports"]
    assert "nightly-report" in queues["warning"]
    plain = client.get("/health/").json()["checks"]["queues"]
    assert plain == {"ok": True, "warn": True}


def test_health_status_is_warn_when_only_a_queue_is_unconsumed(stalled: int) -> None:
    from scheduling.web import health

    checks = {
        "database": {"ok": True},
        "queues": health.check_queues(timezone.now()),
    }
    assert health.verdict(checks) == "warn"
    assert health.verdict({**checks, "database": {"ok": False}}) == "fail"


def test_the_dashboard_shows_the_queue_and_its_jobs(stalled: int, admin_client: Client) -> None:
    page = admin_client.get("/dashboard/").content.decode()
    assert 'id="panel-queues"' in page
    assert "reports" in page and "nightly-report" in page


def test_manage_py_check_warns_naming_the_queue_and_its_jobs(stalled: int) -> None:
    [message] = checks.check_unconsumed_queues()
    assert message.id == "scheduling.W009" and message.obj == "reports"
    assert "nightly-report" in message.msg and "-Q reports" in (message.hint or "")
    out = StringIO()
    call_command("check", stdout=out, stderr=out)  # a warning: check still succeeds
    assert "scheduling.W009" in out.getvalue()


def test_a_staff_user_without_the_queues_jobs_sees_no_panel(
    stalled: int, django_user_model: Any
) -> None:
    vera = django_user_model.objects.create_user("vera", password="pw", is_staff=True)
    vera.user_permissions.set(
        Permission.objects.filter(codename__in=["view_job", "view_execution"])
    )
    client = Client()
    client.force_login(vera)
    assert 'id="panel-queues"' not in client.get("/dashboard/").content.decode()


# --- a real worker that consumes celery only -------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_job_on_a_queue_no_worker_consumes_is_named_while_the_others_run(
    processes: Processes,
    process_env: dict[str, str],
    owner: Any,
    settings: Any,
    publish_under_prefix: str,
) -> None:
    settings.SCHEDULING_QUEUE_IDLE_WARN = 3
    env = {**process_env, "SCHEDULING_QUEUE_IDLE_WARN": "3"}
    processes.start(celery_worker_command(name="w-celery", queues="celery"), env=env, name="w")
    consumed = api.schedule_task(
        "scheduling.diagnostics.noop", timing=api.Every("PT1H"), name="consumed"
    )
    forgotten = api.schedule_task(
        "scheduling.diagnostics.noop",
        timing=api.Every("PT1H"),
        name="forgotten",
        policies=api.Policies(queue="reports"),
    )
    for job in (consumed, forgotten):
        api.run_now(job)
    wait_for(
        lambda: Execution.objects.filter(
            job_id=consumed.id, status=ExecutionStatus.COMPLETED
        ).exists(),
        timeout=60,
        message="the job on celery ran",
    )
    found = wait_for(
        lambda: overview.unconsumed_queues(now=timezone.now()),
        timeout=30,
        message="the queue nobody consumes is named",
    )
    assert [(q.queue, q.jobs) for q in found] == [("reports", ["forgotten"])]
    assert set(Execution.objects.filter(job_id=forgotten.id).values_list("status", flat=True)) == {
        ExecutionStatus.QUEUED
    }
