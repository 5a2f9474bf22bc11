"""A run of a SendEmailTask: who is due, sent over one SMTP connection, recorded in chunks.

The order of a run (seed 000's rules, and what the systems people use today get wrong):

1. Open the run's history row (one per job execution; a retried attempt reuses it). A retried
   attempt first turns the deliveries its dead predecessor left ``sending`` into ``uncertain``:
   the crash window, at most one chunk.
2. Check validity: the project in the state the task requires, someone left to mail.
   Otherwise the run ends ``skipped`` with the reason.
3. Claim a chunk (due participants marked ``sending``; unsubscriptions are re-read each time,
   and again every few seconds while a slow chunk is sent: those are recorded ``skipped``),
   send it message by message over the one connection, record the chunk's outcomes. The resume
   point is the ledger itself: a participant is due until a delivery row says otherwise, so a
   retry resumes after the last recorded chunk and nobody is skipped because a batch was merely
   fetched.
4. Every few seconds, write the live counts and tell the engine the run is alive.

A refused recipient (5xx) is recorded ``failed`` and the batch goes on. A 4xx (throttling,
greylisting) is "try later": the message is tried again after a growing delay, and the whole
run slows down with it. An SMTP server that cannot be reached ends the attempt with an error,
so the job's retry rules apply; the messages of the chunk not yet handed over are released, so
the retry sends them and nobody already mailed is mailed again.
"""

from __future__ import annotations

import logging
import smtplib
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.template import TemplateSyntaxError
from django.utils import timezone

from emailer import conf, ledger, mailers
from emailer.ledger import Claimed, Outcome, Selection
from emailer.messages import build_message
from emailer.models import (
    DeliveryState,
    HistoryStatus,
    SendEmailHistory,
    SendEmailTask,
    UncertainPolicy,
)
from emailer.pacing import Pacer
from emailer.rendering import CompiledTask, compile_task
from emailer.text import one_line
from scheduling.api import PermanentError, RunContext

logger = logging.getLogger("emailer")


class SMTPUnavailable(Exception):
    """The SMTP server cannot be reached; the job's retry rules decide when to try again."""


@dataclass(frozen=True)
class Tuning:
    """The run's knobs, from settings (``EMAILER_*``), read when a run starts.

    ``conf.get`` refuses a value out of its range (the system checks report the same), so a
    misconfigured worker fails its run with the setting's name instead of sending oddly.
    """

    chunk_size: int
    progress_interval: float
    backoff_base: float
    backoff_max: float
    tries: int

    @classmethod
    def from_settings(cls) -> Tuning:
        return cls(
            chunk_size=int(conf.get("CHUNK_SIZE")),
            progress_interval=float(conf.get("PROGRESS_INTERVAL")),
            backoff_base=float(conf.get("BACKOFF_BASE")),
            backoff_max=max(float(conf.get("BACKOFF_MAX")), float(conf.get("BACKOFF_BASE"))),
            tries=int(conf.get("TRIES")),
        )


def selection_for(task: SendEmailTask, occurrence: datetime) -> Selection:
    return Selection(
        task_id=task.pk,
        project_id=task.project_id,
        occurrence=occurrence,
        statuses=list(task.statuses or []),
        once_per_participant=task.once_per_participant,
        resend_uncertain=task.on_uncertain == UncertainPolicy.RESEND,
    )


def why_not_due(task: SendEmailTask, selection: Selection) -> str | None:
    """The reason a run has nothing to do, or None when it has."""
    project = task.project
    if project.state != task.requires_state:
        return (
            f"project {project.name!r} is {project.state}; "
            f"the task requires it to be {task.requires_state}"
        )
    if not ledger.has_due(selection=selection):
        return "nobody left to mail: every participant due has had this mail"
    return None


def open_history(task: SendEmailTask, run: RunContext, *, now: datetime) -> SendEmailHistory:
    """The run's history row: created on the first attempt, reopened by a retry."""
    history, created = SendEmailHistory.objects.get_or_create(
        execution_id=run.execution_id,
        defaults={
            "task": task,
            "job_id": run.job_id,
            "scheduled_batch_start_time": run.scheduled_for,
            "started_at": now,
            "attempts": run.attempt,
            "updated_at": now,
        },
    )
    if not created:
        history.attempts = run.attempt
        history.status = HistoryStatus.RUNNING
        history.finished_at = None
        history.updated_at = now
        history.save(update_fields=["attempts", "status", "finished_at", "updated_at"])
    return history


def write_counts(
    history: SendEmailHistory,
    counts: dict[str, int],
    *,
    now: datetime,
    status: str | None = None,
    note: str | None = None,
) -> None:
    fields: dict[str, Any] = {
        "sent": counts.get(DeliveryState.SENT, 0),
        "failed": counts.get(DeliveryState.FAILED, 0),
        "deferred": counts.get(DeliveryState.DEFERRED, 0),
        "skipped": counts.get(DeliveryState.SKIPPED, 0),
        "uncertain": counts.get(DeliveryState.UNCERTAIN, 0),
        "updated_at": now,
    }
    if status is not None:
        fields["status"] = status
        if status != HistoryStatus.RUNNING:
            fields["finished_at"] = now
    if note is not None:
        fields["note"] = one_line(note, limit=500)  # an error's words may span lines
    SendEmailHistory.objects.filter(pk=history.pk).update(**fields)
    for name, value in fields.items():
        setattr(history, name, value)


def report_failures(run: RunContext, counts: dict[str, int]) -> None:
    """Tell the engine about the run's failed and uncertain deliveries: they count as failures
    on the dashboard, in ``/metrics`` and in ``manage.py executions``, though the run completed.
    Called once, when the run completes (its counts cover every attempt)."""
    failed = counts.get(DeliveryState.FAILED, 0)
    uncertain = counts.get(DeliveryState.UNCERTAIN, 0)
    if failed + uncertain:
        run.report_failures(
            failed + uncertain, f"{failed} failed and {uncertain} uncertain deliveries"
        )


@transaction.atomic
def fold_idle_run(history: SendEmailHistory) -> bool:
    """Summarise a run that did nothing into the task's previous row when that row, too, is
    runs that did nothing for the same reason: its count goes up, its last time moves to this
    run's, and this run's own row goes. True when it was folded.

    A task whose audience is exhausted then keeps one row ("skipped, 1,440 runs, from … to
    …") instead of gaining one a minute for ever.
    """
    previous = (
        SendEmailHistory.objects.select_for_update()
        .filter(
            task_id=history.task_id,
            scheduled_batch_start_time__lt=history.scheduled_batch_start_time,
        )
        .exclude(pk=history.pk)
        .order_by("-scheduled_batch_start_time", "-id")
        .first()
    )
    if (
        previous is None
        or previous.status != HistoryStatus.SKIPPED
        or previous.note != history.note
    ):
        return False
    SendEmailHistory.objects.filter(pk=previous.pk).update(
        runs=F("runs") + history.runs,
        last_batch_start_time=history.scheduled_batch_start_time,
        finished_at=history.finished_at,
        updated_at=history.updated_at,
    )
    SendEmailHistory.objects.filter(pk=history.pk, sent=0, failed=0, uncertain=0).delete()
    return True


def run_send_email_task(task: SendEmailTask, run: RunContext) -> dict[str, Any]:
    """Run one attempt of one occurrence of ``task`` (the task table's runner)."""
    now = timezone.now()
    tuning = Tuning.from_settings()
    selection = selection_for(task, run.scheduled_for)
    history = open_history(task, run, now=now)
    recovered = ledger.recover_run(history_id=history.pk, now=now) if run.attempt > 1 else 0
    if recovered:
        logger.warning(
            "emailer.uncertain task=%s history=%s count=%s policy=%s",
            task.pk, history.pk, recovered, task.on_uncertain,
        )
    counts = Counter(ledger.count_run(history_id=history.pk))
    reason = why_not_due(task, selection)
    if reason is not None:
        status = HistoryStatus.COMPLETED if sum(counts.values()) else HistoryStatus.SKIPPED
        write_counts(history, counts, now=timezone.now(), status=status, note=reason)
        if status == HistoryStatus.COMPLETED:
            report_failures(run, counts)
        else:
            fold_idle_run(history)
        logger.info("emailer.skipped task=%s history=%s reason=%s", task.pk, history.pk, reason)
        return {"status": status, "reason": reason, **counts}
    # The checks the admin makes on save, made again: a row written behind its back, limits
    # lowered or a mailer removed since, fails the run here with the reason, before anyone is
    # claimed.
    problems = {**task.check_templates(), **task.check_mailer()}
    note = "; ".join(f"{field}: {reason}" for field, reason in problems.items())
    compiled: CompiledTask | None = None
    if not note:
        try:
            compiled = compile_task(
                subject=task.subject, body=task.body, html_body=task.html_body
            )
        except TemplateSyntaxError as exc:
            note = str(exc)
    if compiled is None:
        write_counts(history, counts, now=timezone.now(), status=HistoryStatus.INTERRUPTED,
                     note=note)
        raise PermanentError(one_line(note, limit=500)) from None
    sender = Sender(task=task, run=run, history=history, compiled=compiled, tuning=tuning)
    try:
        sender.send(selection, counts)
    except BaseException as exc:
        note = f"{type(exc).__name__}: {exc}"
        write_counts(
            history,
            ledger.count_run(history_id=history.pk),
            now=timezone.now(),
            status=HistoryStatus.INTERRUPTED,
            note=note,
        )
        logger.warning("emailer.interrupted task=%s history=%s error=%s", task.pk, history.pk,
                       note)
        raise
    final = ledger.count_run(history_id=history.pk)
    write_counts(history, final, now=timezone.now(), status=HistoryStatus.COMPLETED, note="")
    report_failures(run, final)
    logger.info("emailer.completed task=%s history=%s counts=%s", task.pk, history.pk, final)
    return {"status": HistoryStatus.COMPLETED.value, **final}


class Sender:
    """One attempt's sending loop: one connection, one pacer, chunk after chunk."""

    def __init__(
        self,
        *,
        task: SendEmailTask,
        run: RunContext,
        history: SendEmailHistory,
        compiled: CompiledTask,
        tuning: Tuning,
    ) -> None:
        self.task = task
        self.run = run
        self.history = history
        self.compiled = compiled
        self.tuning = tuning
        self.from_email = task.from_email or settings.DEFAULT_FROM_EMAIL
        self.project_name = task.project.name
        self.pacer = Pacer(
            rate=task.rate, backoff_base=tuning.backoff_base, backoff_max=tuning.backoff_max
        )
        self.backend: Any = mailers.connection(task.mailer)

    def send(self, selection: Selection, counts: Counter[str]) -> None:
        """Claim, send and record chunk after chunk until the batch is done or nobody is due.

        A chunk's outcomes are written in the same transaction that claims the next chunk: two
        statements, one commit (one flush to disk) per chunk. Still only the chunk in flight is
        ever left ``sending``.
        """
        remaining = self.task.batch_size - sum(counts.values())
        after = 0
        last_report = time.monotonic()
        done: list[Outcome] = []
        try:
            while True:
                with transaction.atomic():
                    if done:
                        ledger.record_chunk(
                            history_id=self.history.pk, outcomes=done, now=timezone.now()
                        )
                        counts.update(o.state for o in done)
                        done = []
                    chunk = (
                        ledger.claim_chunk(
                            selection=selection,
                            history_id=self.history.pk,
                            after=after,
                            limit=min(self.tuning.chunk_size, remaining),
                            now=timezone.now(),
                        )
                        if remaining > 0
                        else []
                    )
                if time.monotonic() - last_report >= self.tuning.progress_interval:
                    write_counts(self.history, counts, now=timezone.now())
                    self.run.progress()
                    last_report = time.monotonic()
                if not chunk:
                    # Empty: done, or a concurrent run of this occurrence took the people we
                    # picked. Its rows are committed now, so the next claim looks past them.
                    if remaining > 0 and ledger.has_due(selection=selection, after=after):
                        continue
                    break
                after = chunk[-1].participant_id
                remaining -= len(chunk)
                done = self.send_chunk(chunk)
        finally:
            self.backend.close()

    def send_chunk(self, chunk: list[Claimed]) -> list[Outcome]:
        """Send each claimed message; on an error that ends the attempt, record what is known.

        The messages already answered are recorded, the one being handed over when the
        connection broke during DATA is ``uncertain``, and the rest are released.
        """
        outcomes: list[Outcome] = []
        checked = time.monotonic()
        gone: set[int] = set()
        try:
            for i, claimed in enumerate(chunk):
                if time.monotonic() - checked >= self.tuning.progress_interval:
                    # A slow (rate-limited or throttled) chunk: read unsubscriptions again.
                    gone |= ledger.unsubscribed_among([c.participant_id for c in chunk[i:]])
                    checked = time.monotonic()
                if claimed.participant_id in gone:
                    outcomes.append(
                        Outcome(claimed.delivery_id, DeliveryState.SKIPPED, "unsubscribed")
                    )
                    continue
                outcomes.append(self.send_one(claimed))
        except BaseException as exc:
            done = {o.delivery_id for o in outcomes}
            if isinstance(exc, _AmbiguousLoss):
                outcomes.append(
                    Outcome(exc.delivery_id, DeliveryState.UNCERTAIN, exc.reply, exc.tries)
                )
                done.add(exc.delivery_id)
            ledger.record_chunk(
                history_id=self.history.pk, outcomes=outcomes, now=timezone.now()
            )
            ledger.release(
                history_id=self.history.pk,
                delivery_ids=[c.delivery_id for c in chunk if c.delivery_id not in done],
            )
            if isinstance(exc, _AmbiguousLoss):
                raise SMTPUnavailable(exc.reply) from exc.__cause__
            raise
        return outcomes

    def send_one(self, claimed: Claimed) -> Outcome:
        participant = {
            "id": claimed.participant_id,
            "email": claimed.email,
            "name": claimed.name,
            "status": claimed.status,
        }
        try:
            message = build_message(
                compiled=self.compiled,
                task_id=self.task.pk,
                occurrence=self.run.scheduled_for,
                from_email=self.from_email,
                project_name=self.project_name,
                participant=participant,
            )
        except Exception as exc:  # a template that fails on this participant's data only
            return Outcome(claimed.delivery_id, DeliveryState.FAILED, f"render error: {exc}")
        tries = claimed.tries - 1
        reconnected = False
        while True:
            tries += 1
            self.pacer.wait()
            self.connect()
            try:
                self.backend.send_messages([message])
            except smtplib.SMTPRecipientsRefused as exc:
                code, reply = _first_reply(exc.recipients)
            except smtplib.SMTPResponseException as exc:
                code, reply = exc.smtp_code, _text(exc.smtp_error)
            except (smtplib.SMTPServerDisconnected, OSError) as exc:
                self.backend.close()
                if _during_data(exc):
                    raise _AmbiguousLoss(
                        claimed.delivery_id, f"connection lost during DATA: {exc}", tries
                    ) from exc
                if reconnected:
                    raise SMTPUnavailable(f"connection lost: {exc}") from exc
                reconnected = True  # the server dropped an idle connection: once more
                tries -= 1
                continue
            else:
                self.pacer.accepted()
                return Outcome(claimed.delivery_id, DeliveryState.SENT, "", tries)
            if code == 421:
                self.backend.close()  # the server closed the connection after saying so
            text = f"{code} {reply}".strip()
            if 400 <= code < 500:
                if tries < self.tuning.tries:
                    self.pacer.try_later()
                    continue
                return Outcome(claimed.delivery_id, DeliveryState.DEFERRED, text, tries)
            return Outcome(claimed.delivery_id, DeliveryState.FAILED, text, tries)

    def connect(self) -> None:
        """Open the connection if it is not open; a failure here sent nothing."""
        if getattr(self.backend, "connection", None) is not None:
            return
        try:
            self.backend.open()
        except (smtplib.SMTPException, OSError) as exc:
            self.backend.close()
            raise SMTPUnavailable(f"cannot reach the SMTP server: {exc}") from exc


class _AmbiguousLoss(Exception):
    def __init__(self, delivery_id: int, reply: str, tries: int) -> None:
        super().__init__(reply)
        self.delivery_id = delivery_id
        self.reply = reply
        self.tries = tries


def _first_reply(recipients: dict[str, Any]) -> tuple[int, str]:
    for code, reply in recipients.values():
        return int(code), _text(reply)
    return 0, ""


def _text(reply: Any) -> str:
    return reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)


def _during_data(exc: BaseException) -> bool:
    """Whether the connection broke inside ``smtplib.SMTP.data``: the one ambiguous moment.

    Before DATA (MAIL FROM, RCPT TO) the server cannot have accepted the message, so the message
    is simply not sent and may be tried again; after the final dot it may have been.
    """
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "data" and code.co_filename.endswith("smtplib.py"):
            return True
        tb = tb.tb_next
    return False
