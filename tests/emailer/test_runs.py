"""A run of a SendEmailTask, in this process, against PostgreSQL and a real SMTP server.

The runner is called as the engine calls it, with a ``RunContext``; the worker-process
behaviour (retries, a killed worker, two schedules at once) is in ``test_run_processes.py``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from emailer import ledger
from emailer.models import Delivery, Participant, SendEmailHistory
from emailer.sending import SMTPUnavailable, run_send_email_task, selection_for
from emailer.tokens import unsubscribe_url
from scheduling.api import RunContext
from tests.conftest import FIXED_NOW
from tests.emailer.conftest import address

pytestmark = [pytest.mark.django_db, pytest.mark.specification]

executions = itertools.count(1000)


def context(*, attempt: int = 1, execution_id: int | None = None, when=FIXED_NOW,
            on_progress: Callable[[int], None] | None = None) -> RunContext:
    return RunContext(
        execution_id=execution_id or next(executions),
        job_id=None,
        scheduled_for=when,
        attempt=attempt,
        _keep_alive=on_progress or (lambda _id: None),
    )


def states(task: Any) -> dict[str, str]:
    return dict(Delivery.objects.filter(task=task).values_list("email", "state"))


def test_a_run_mails_each_due_participant_once_with_the_headers_mail_providers_expect(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    project = make_project(participants=25)
    task = make_task(project, html_body="<p>Hello {{ participant.name }}</p>")
    result = run_send_email_task(task, context())

    assert result["status"] == "completed" and result["sent"] == 25
    assert set(smtp_settings.recorder.recipients().values()) == {1}
    first = next(r for r in smtp_settings.recorder.received if r.recipient == address(0))
    person = Participant.objects.get(email=address(0))
    message = first.message
    assert message["Subject"] == "Your survey, Person 0"
    assert message["Message-ID"] == (
        f"<emailer.{task.pk}.20300107T090000Z.{person.pk}@mail.example.org>"
    )
    assert message["List-Unsubscribe"].strip().startswith("<https://mail.example.org/emailer/unsub")
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert message.get_body(("html",)).get_content().strip() == "<p>Hello Person 0</p>"
    history = SendEmailHistory.objects.get(task=task)
    assert history.scheduled_batch_start_time == FIXED_NOW
    assert (history.status, history.sent, history.failed, history.uncertain) == (
        "completed", 25, 0, 0,
    )


def test_the_one_click_unsubscribe_headers_reach_the_server_raw_on_every_django(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    """RFC 8058: providers read the link only as it is; an RFC 2047 word hides it from them."""
    project = make_project(participants=1)
    run_send_email_task(make_task(project), context())

    (received,) = smtp_settings.recorder.received
    person = Participant.objects.get(email=address(0))
    headers = received.raw.split(b"\r\n\r\n", 1)[0].replace(b"\r\n", b"\n")
    unfolded = headers.replace(b"\n ", b" ").replace(b"\n\t", b" ").split(b"\n")
    link = next(
        line.split(b":", 1)[1].strip() for line in unfolded if line.startswith(b"List-Unsubscribe:")
    )
    assert link.startswith(b"<https://mail.example.org/emailer/unsubscribe/") and link.endswith(
        b">"
    ), link
    assert b"=?" not in link, "not RFC 2047-encoded"
    assert link.decode().strip("<>") == unsubscribe_url(person.pk)
    assert b"List-Unsubscribe-Post: List-Unsubscribe=One-Click" in unfolded


def test_a_refused_recipient_is_recorded_failed_and_the_batch_goes_on(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    project = make_project(participants=20)
    task = make_task(project)
    smtp_settings.recorder.refuse[address(3)] = "550 5.1.1 No such user"
    run_send_email_task(task, context())

    failed = Delivery.objects.get(task=task, email=address(3))
    assert (failed.state, failed.reply) == ("failed", "550 5.1.1 No such user")
    assert smtp_settings.recorder.count == 19
    history = SendEmailHistory.objects.get(task=task)
    assert (history.status, history.sent, history.failed) == ("completed", 19, 1)


def test_try_later_replies_are_retried_with_backoff_without_failing_the_run(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    project = make_project(participants=12)
    task = make_task(project)
    smtp_settings.recorder.defer[address(2)] = ["451 4.7.1 Greylisted", "451 4.7.1 Greylisted"]
    smtp_settings.recorder.defer[address(5)] = ["421 4.7.0 Too many messages, slow down"]
    run_send_email_task(task, context())

    assert states(task) == {address(i): "sent" for i in range(12)}
    tries = dict(Delivery.objects.filter(task=task).values_list("email", "tries"))
    assert (tries[address(2)], tries[address(5)], tries[address(0)]) == (3, 2, 1)
    assert SendEmailHistory.objects.get(task=task).failed == 0


def test_a_server_that_keeps_saying_later_leaves_the_message_deferred_for_the_next_run(
    smtp_settings: Any, settings: Any, make_project: Any, make_task: Any
) -> None:
    settings.EMAILER_TRIES = 3
    project = make_project(participants=5)
    task = make_task(project)
    smtp_settings.recorder.defer[address(1)] = ["452 4.2.2 Mailbox full"] * 3
    run_send_email_task(task, context())
    assert states(task)[address(1)] == "deferred"
    history = SendEmailHistory.objects.get(task=task)
    assert (history.status, history.sent, history.deferred, history.failed) == (
        "completed", 4, 1, 0,
    )

    run_send_email_task(task, context(when=FIXED_NOW + timedelta(hours=2)))
    assert smtp_settings.recorder.recipients()[address(1)] == 1
    assert smtp_settings.recorder.count == 5


def test_an_unsubscribed_participant_is_never_mailed_even_one_who_unsubscribes_mid_run(
    smtp_settings: Any, settings: Any, make_project: Any, make_task: Any
) -> None:
    settings.EMAILER_PROGRESS_INTERVAL = 0  # report after every chunk: the hook runs mid-run
    project = make_project(participants=40)
    task = make_task(project)
    Participant.objects.filter(email=address(7)).update(unsubscribed_at=timezone.now())

    def unsubscribe_late_participant(_execution_id: int) -> None:
        Participant.objects.filter(email=address(35)).update(unsubscribed_at=timezone.now())

    run_send_email_task(task, context(on_progress=unsubscribe_late_participant))
    received = smtp_settings.recorder.recipients()
    assert address(7) not in received and address(35) not in received
    assert len(received) == 38


def test_a_run_with_nothing_to_do_ends_skipped_with_the_reason(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    draft = make_project("draft-project", participants=3, state="draft")
    task = make_task(draft, name="too-early")
    result = run_send_email_task(task, context())
    assert result["status"] == "skipped"
    assert "is draft; the task requires it to be active" in result["reason"]

    empty = make_project("empty", participants=0)
    task = make_task(empty, name="nobody")
    run_send_email_task(task, context())
    history = SendEmailHistory.objects.get(task=task)
    assert (history.status, history.note) == (
        "skipped", "nobody left to mail: every participant due has had this mail",
    )
    assert smtp_settings.recorder.count == 0


def test_batch_size_caps_each_occurrence_and_the_next_one_continues_where_it_stopped(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    project = make_project(participants=25)
    task = make_task(project, batch_size=10)
    for hours in (0, 2, 4):
        run_send_email_task(task, context(when=FIXED_NOW + timedelta(hours=hours)))
    counts = [h.sent for h in SendEmailHistory.objects.filter(task=task).order_by("id")]
    assert counts == [10, 10, 5]
    assert set(smtp_settings.recorder.recipients().values()) == {1}


def test_a_reminder_task_mails_everyone_due_again_at_each_occurrence_but_once_per_occurrence(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    project = make_project(participants=4)
    Participant.objects.filter(email=address(0)).update(status="completed")
    task = make_task(project, once_per_participant=False, statuses=["invited"])
    run_send_email_task(task, context())
    run_send_email_task(task, context())  # a second schedule, same occurrence
    run_send_email_task(task, context(when=FIXED_NOW + timedelta(days=1)))
    received = smtp_settings.recorder.recipients()
    assert received == {address(1): 2, address(2): 2, address(3): 2}


def test_a_retried_attempt_resumes_after_the_last_recorded_chunk_and_skips_the_uncertain(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    """The crash window: the chunk a dead attempt left ``sending`` becomes ``uncertain``."""
    project = make_project(participants=30)
    task = make_task(project)
    first = context(execution_id=77)
    history = SendEmailHistory.objects.create(
        task=task, execution_id=77, scheduled_batch_start_time=FIXED_NOW,
        started_at=timezone.now(), updated_at=timezone.now(),
    )
    in_flight = ledger.claim_chunk(
        selection=selection_for(task, first.scheduled_for), history_id=history.pk, after=0,
        limit=10, now=timezone.now(),
    )  # the dead attempt claimed these and may have sent any of them

    run_send_email_task(task, context(execution_id=77, attempt=2))
    history.refresh_from_db()
    assert (history.status, history.sent, history.uncertain, history.attempts) == (
        "completed", 20, 10, 2,
    )
    received = smtp_settings.recorder.recipients()
    assert not {c.email for c in in_flight} & set(received)
    assert len(received) == 20


def test_the_resend_policy_sends_uncertain_messages_again_with_the_same_message_id(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    project = make_project(participants=5)
    task = make_task(project, on_uncertain="resend")
    history = SendEmailHistory.objects.create(
        task=task, execution_id=88, scheduled_batch_start_time=FIXED_NOW,
        started_at=timezone.now(), updated_at=timezone.now(),
    )
    ledger.claim_chunk(
        selection=selection_for(task, FIXED_NOW), history_id=history.pk, after=0, limit=2,
        now=timezone.now(),
    )
    run_send_email_task(task, context(execution_id=88, attempt=2))
    assert states(task) == {address(i): "sent" for i in range(5)}
    tries = dict(Delivery.objects.filter(task=task).values_list("email", "tries"))
    assert (tries[address(0)], tries[address(1)], tries[address(4)]) == (2, 2, 1)
    assert smtp_settings.recorder.count == 5


def test_an_unreachable_server_ends_the_attempt_with_an_error_and_releases_the_chunk(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    project = make_project(participants=5)
    task = make_task(project)
    smtp_settings.stop()
    with pytest.raises(SMTPUnavailable, match="cannot reach the SMTP server"):
        run_send_email_task(task, context(execution_id=99))
    assert not Delivery.objects.filter(task=task).exists()
    history = SendEmailHistory.objects.get(execution_id=99)
    assert history.status == "interrupted" and "SMTPUnavailable" in history.note

    smtp_settings.start()
    run_send_email_task(task, context(execution_id=99, attempt=2))
    assert states(task) == {address(i): "sent" for i in range(5)}


@pytest.mark.django_db(transaction=True)
def test_someone_who_unsubscribes_while_a_slow_chunk_is_sent_is_skipped_and_counted(
    smtp_settings: Any, settings: Any, make_project: Any, make_task: Any
) -> None:
    """A rate-limited chunk takes seconds; unsubscriptions are read again while it is sent."""

    settings.EMAILER_PROGRESS_INTERVAL = 0.05
    project = make_project(participants=10)
    task = make_task(project, rate=40)  # one chunk of ten takes a quarter of a second

    def unsubscribe(email: str) -> None:
        Participant.objects.filter(email=email).update(unsubscribed_at=timezone.now())
        connections.close_all()

    def unsubscribe_the_last_after_the_second_message(count: int) -> None:
        if count == 2:  # on the server's event loop, where the ORM may not run: a thread
            worker = threading.Thread(target=unsubscribe, args=(address(9),))
            worker.start()
            worker.join()

    smtp_settings.recorder.after_message = unsubscribe_the_last_after_the_second_message
    run_send_email_task(task, context())
    assert address(9) not in smtp_settings.recorder.recipients()
    skipped = Delivery.objects.get(task=task, email=address(9))
    assert (skipped.state, skipped.reply) == ("skipped", "unsubscribed")
    history = SendEmailHistory.objects.get(task=task)
    assert (history.sent, history.skipped) == (9, 1)
