"""Runs on real ``celery worker`` processes and the scheduler, PostgreSQL, Redis and aiosmtpd.

What only real processes can show: a worker killed with SIGKILL mid-batch, two schedules that
fire the same task at the same moment, an SMTP server that goes away (the job's retry rules
take over), an occurrence too old to start, and a template rewritten behind the admin's back
to cost more than a render may. In each, nobody is mailed twice for one occurrence, nobody is
left out without a record saying so, and the worker goes on.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from emailer import services
from emailer.models import Delivery, SendEmailHistory, SendEmailTask
from scheduling.api import Once, executions
from tests.conftest import SHORT_LEASE, free_port, scheduler_command, wait_for
from tests.emailer.smtp import SMTPServer
from tests.scheduling.test_worker_lifecycle import SLOW, launch_worker, start_worker, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHUNK = 10


@pytest.fixture
def server() -> Iterator[SMTPServer]:
    smtp = SMTPServer(free_port())
    smtp.recorder.parse = False
    yield smtp
    smtp.stop()


@pytest.fixture
def env(process_env: dict[str, str], server: SMTPServer) -> dict[str, str]:
    return {
        **process_env,
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(server.port),
        "EMAIL_TIMEOUT": "5",
        "EMAILER_CHUNK_SIZE": str(CHUNK),
        "EMAILER_PROGRESS_INTERVAL": "0.5",
        "SITE_URL": "https://mail.example.org",
        # A job scheduled while the scheduler runs goes out within 0.2 s, not a second.
        "SCHEDULING_MAX_SLEEP": "0.2",
    }


def deliveries_by_state(task: Any) -> Counter[str]:
    return Counter(Delivery.objects.filter(task=task).values_list("state", flat=True))


def finished_history(task: Any, count: int = 1) -> Any:
    def check() -> list[SendEmailHistory] | None:
        done = list(SendEmailHistory.objects.filter(task=task, status="completed"))
        return done if len(done) >= count else None

    return check


def assert_nobody_mailed_twice(server: SMTPServer, task: Any) -> None:
    received = server.recorder.recipients()
    assert max(received.values(), default=1) == 1, received.most_common(3)
    per_person = Counter(Delivery.objects.filter(task=task).values_list("participant", flat=True))
    assert max(per_person.values()) == 1
    sent = set(Delivery.objects.filter(task=task, state="sent").values_list("email", flat=True))
    assert sent <= set(received), "every delivery recorded sent reached the server"


def test_a_worker_killed_mid_batch_is_resumed_after_the_last_recorded_chunk(
    processes: Any, env: dict[str, str], server: SMTPServer, make_project: Any, make_task: Any
) -> None:
    """The retry waits for the killed run's lease to run out: 4 s (``SHORT_LEASE``)."""
    env = {**env, **SHORT_LEASE}
    server.start()
    project = make_project(participants=300)
    # Three seconds of sending: the kill, once 60 are recorded sent, has two seconds to spare.
    task = make_task(project, rate=100)
    services.schedule_task(task=task, timing=Once(at=timezone.now()))
    processes.start(scheduler_command(), env=env, name="scheduler")
    victim = start_worker(processes, env, "victim")
    wait_for(
        lambda: Delivery.objects.filter(task=task, state="sent").count() >= 60,
        timeout=SLOW,
        message="the batch is well under way",
    )
    processes.kill(victim)  # SIGKILL to the worker's whole process group
    victim.wait(timeout=10)
    start_worker(processes, env, "survivor")

    (history,) = wait_for(finished_history(task), timeout=SLOW, message="the retry completes")
    states = deliveries_by_state(task)
    assert states["sent"] + states["uncertain"] == 300 and states["failed"] == 0
    assert states["uncertain"] <= CHUNK, "at most the chunk in flight is uncertain"
    assert (history.sent, history.uncertain) == (states["sent"], states["uncertain"])
    assert history.attempts == 2
    assert history.scheduled_batch_start_time == executions(history.job_id)[0].scheduled_for
    assert_nobody_mailed_twice(server, task)
    assert server.recorder.count >= 300 - CHUNK


def test_two_schedules_firing_the_same_task_at_the_same_moment_mail_each_person_once(
    processes: Any, env: dict[str, str], server: SMTPServer, make_project: Any, make_task: Any
) -> None:
    server.start()
    project = make_project(participants=200)
    task = make_task(project, rate=100)
    moment = timezone.now().replace(microsecond=0)
    first = services.schedule_task(task=task, timing=Once(at=moment), name="morning")
    second = services.schedule_task(task=task, timing=Once(at=moment), name="also-morning")
    workers = [launch_worker(processes, env, name) for name in ("left", "right")]
    wait_ready(processes, *workers)
    processes.start(scheduler_command(), env=env, name="scheduler")

    runs = wait_for(finished_history(task, 2), timeout=SLOW, message="both runs complete")
    assert {r.job_id for r in runs} == {first.id, second.id}
    assert {r.scheduled_batch_start_time for r in runs} == {moment}
    assert sum(r.sent for r in runs) == 200
    assert all(r.sent for r in runs), "the two runs really shared the batch"
    assert deliveries_by_state(task) == {"sent": 200}
    assert_nobody_mailed_twice(server, task)
    assert server.recorder.count == 200


def test_an_unreachable_server_makes_the_job_retry_and_nobody_mailed_is_mailed_again(
    processes: Any, env: dict[str, str], server: SMTPServer, make_project: Any, make_task: Any
) -> None:
    """The server takes 15 messages and goes away; it comes back after an attempt has failed."""
    server.start()
    gone = threading.Event()

    def go_away_after_fifteen(count: int) -> None:
        if count == 15 and not gone.is_set():
            gone.set()
            threading.Thread(target=server.stop).start()

    server.recorder.after_message = go_away_after_fifteen
    project = make_project(participants=40)
    task = make_task(project, rate=40)
    job = services.schedule_task(
        task=task, timing=Once(at=timezone.now()), max_retries=20
    )
    processes.start(scheduler_command(), env=env, name="scheduler")
    start_worker(processes, env, "only")

    def failing_while_away() -> SendEmailHistory | None:
        history = SendEmailHistory.objects.filter(task=task, status="interrupted").first()
        retried = any(e.retry_count >= 2 for e in executions(job.id))
        return history if history is not None and retried else None

    interrupted = wait_for(
        failing_while_away, timeout=SLOW, message="attempts fail while the server is away"
    )
    assert "SMTPUnavailable" in interrupted.note
    server.recorder.after_message = None
    server.start()

    (history,) = wait_for(finished_history(task), timeout=SLOW, message="a retry completes")
    states = deliveries_by_state(task)
    assert states["sent"] + states["uncertain"] == 40 and states["uncertain"] <= 1
    assert history.attempts >= 3
    assert_nobody_mailed_twice(server, task)


def test_an_occurrence_too_old_to_start_is_skipped_with_the_reason_and_mails_nobody(
    processes: Any, env: dict[str, str], server: SMTPServer, make_project: Any, make_task: Any
) -> None:
    server.start()
    task = make_task(make_project(participants=5))
    job = services.schedule_task(
        task=task,
        timing=Once(at=timezone.now() - timedelta(hours=2), allow_past=True),
        expires=3600,
    )
    processes.start(scheduler_command(), env=env, name="scheduler")
    start_worker(processes, env, "late")
    (execution,) = wait_for(
        lambda: executions(job.id, status="skipped"), timeout=SLOW, message="it is skipped"
    )
    assert execution.last_error.startswith("expired: would have started 72")
    assert "the job's expires is 3600s" in execution.last_error
    assert not SendEmailHistory.objects.exists() and not Delivery.objects.exists()
    assert server.recorder.count == 0


def test_a_template_rewritten_to_cost_too_much_fails_its_job_and_the_worker_runs_on(
    processes: Any, env: dict[str, str], server: SMTPServer, make_project: Any, make_task: Any
) -> None:
    """Three nested loops over a name: eight million rounds, 4 s or more per message, were it
    rendered; the run refuses it at once and the same worker sends the next task's mail."""
    server.start()
    project = make_project(participants=5)
    rewritten = make_task(project, name="rewritten")
    nested = "{% for a in participant.name %}" * 3 + "." + "{% endfor %}" * 3
    SendEmailTask.objects.filter(pk=rewritten.pk).update(body=nested)
    job = services.schedule_task(task=rewritten, timing=Once(at=timezone.now()), max_retries=3)
    processes.start(scheduler_command(), env=env, name="scheduler")
    worker = start_worker(processes, env, "only")

    (failed,) = wait_for(
        lambda: executions(job.id, status="failed"), timeout=SLOW, message="the run fails"
    )
    assert failed.attempts == 1, "a retry cannot fix a template: no retries"
    assert "body: template error: line 1: {% for %} loops nested 3 deep" in failed.last_error
    assert not Delivery.objects.filter(task=rewritten).exists()

    fine = make_task(project, name="fine")
    services.schedule_task(task=fine, timing=Once(at=timezone.now()))
    (history,) = wait_for(finished_history(fine), timeout=SLOW, message="the next task is sent")
    assert history.sent == 5 and server.recorder.count == 5
    assert worker.poll() is None, "the worker is still running"
