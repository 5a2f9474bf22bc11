"""The emailer's tables: projects, their participants, the mail tasks and what each run did.

``SendEmailTask`` and ``SendEmailHistory`` keep seed 000's names on purpose: the first is a
*task table* (jobs point at its rows and run them), the second holds one row per run with the
occurrence's original due time. ``Delivery`` is the per-participant ledger the seed lacks: one
row per (task, occurrence, participant), so nobody is mailed twice for one occurrence and
nobody is silently left out.
"""

from __future__ import annotations

import math
from email.utils import parseaddr
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, validate_email
from django.db import models
from django.db.models import Q

from emailer.mailers import name_error
from emailer.rendering import SAMPLE_CONTEXT, template_errors, worst_cases
from emailer.text import control_character_error
from emailer.tokens import unsubscribe_url
from scheduling.api import instant


class ProjectState(models.TextChoices):
    DRAFT = "draft"  # being prepared; tasks that require "active" skip their runs
    ACTIVE = "active"  # open: participants are being mailed
    CLOSED = "closed"  # finished; kept for its history


class ParticipantStatus(models.TextChoices):
    INVITED = "invited"  # on the list, has not begun
    STARTED = "started"  # has begun, not finished
    COMPLETED = "completed"  # done; usually no longer mailed


class UncertainPolicy(models.TextChoices):
    SKIP = "skip"  # a message that may have gone out is not sent again: nobody gets two
    RESEND = "resend"  # it is sent again: nobody is left out, at the risk of a duplicate


class HistoryStatus(models.TextChoices):
    RUNNING = "running"  # sending now (or its worker died; see updated_at)
    COMPLETED = "completed"  # every due participant in the batch was handled
    SKIPPED = "skipped"  # nothing to do: the reason is in ``note``
    INTERRUPTED = "interrupted"  # the attempt stopped on an error; the job's retry resumes it


class DeliveryState(models.TextChoices):
    SENDING = "sending"  # claimed by a run, being handed to the SMTP server
    SENT = "sent"  # the server accepted it (250)
    FAILED = "failed"  # refused for good (5xx); ``reply`` holds the server's answer
    DEFERRED = "deferred"  # refused for now (4xx) after every try; due again next occurrence
    SKIPPED = "skipped"  # not sent on purpose (unsubscribed before its turn)
    UNCERTAIN = "uncertain"  # a crash left it "sending": it may or may not have gone out


#: States that count as "this participant has had this task's mail" for a one-time task.
DELIVERED_STATES = (DeliveryState.SENDING, DeliveryState.SENT, DeliveryState.FAILED)


#: The range of a task's rate limit other than 0 (no limit), in messages per second.
SLOWEST_RATE = 0.01
FASTEST_RATE = 100_000


class Project(models.Model):
    """A mailing audience and its state; deleting it deletes its tasks, jobs and history."""

    name = models.CharField(max_length=200, unique=True)
    state = models.CharField(
        max_length=10, choices=ProjectState.choices, default=ProjectState.DRAFT
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=ProjectState.values), name="emailer_project_state_valid"
            )
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors = text_errors(self, one_line=("name",))
        if errors:
            raise ValidationError(errors)


class Participant(models.Model):
    """Someone a project may mail; ``unsubscribed_at`` set means never again."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="participants")
    email = models.EmailField(max_length=254)
    name = models.CharField(max_length=200, blank=True)
    status = models.CharField(
        max_length=10, choices=ParticipantStatus.choices, default=ParticipantStatus.INVITED
    )
    unsubscribed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "id"]
        constraints = [
            # Import is idempotent by address; addresses are stored lower-cased.
            models.UniqueConstraint(fields=["project", "email"], name="emailer_participant_email"),
            models.CheckConstraint(
                condition=Q(status__in=ParticipantStatus.values),
                name="emailer_participant_status_valid",
            ),
        ]
        indexes = [
            # claim_chunk: the next due participants of a project in id order (keyset); the
            # status is a filter, so the scan stops after a chunk whatever statuses are mailed.
            models.Index(
                fields=["project", "id"],
                condition=Q(unsubscribed_at__isnull=True),
                name="emailer_participant_due",
            )
        ]

    def __str__(self) -> str:
        return self.email

    @property
    def unsubscribed(self) -> bool:
        return self.unsubscribed_at is not None

    def clean(self) -> None:
        self.email = (self.email or "").strip().lower()
        errors = text_errors(self, one_line=("email", "name"))
        if errors:
            raise ValidationError(errors)


class SendEmailTask(models.Model):
    """Seed 000's task table: a mail to a project's participants, run by one or more jobs.

    Subject and bodies are Django templates rendered per participant; they are compiled when
    the task is saved, so a typo is refused at the desk, not discovered by the 3 a.m. run.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tasks")
    name = models.CharField(max_length=200, unique=True)
    from_email = models.CharField(
        max_length=254, blank=True, help_text="Sender; empty means DEFAULT_FROM_EMAIL."
    )
    mailer = models.CharField(
        max_length=100,
        blank=True,
        help_text="The mailer to send through, by its MAILERS name (Django 6.1); empty means "
        "the project's default mail configuration.",
    )
    subject = models.CharField(max_length=998, help_text="Django template, one line.")
    body = models.TextField(help_text="Plain-text Django template.")
    html_body = models.TextField(blank=True, help_text="Optional HTML Django template.")
    statuses = models.JSONField(
        default=list,
        blank=True,
        help_text="Participant statuses to mail, such as [\"invited\"]; empty means all.",
    )
    requires_state = models.CharField(
        max_length=10,
        choices=ProjectState.choices,
        default=ProjectState.ACTIVE,
        help_text="The project state a run requires; otherwise the run is skipped.",
    )
    batch_size = models.PositiveIntegerField(
        default=10_000,
        validators=[MinValueValidator(1)],
        help_text="At most this many messages per occurrence.",
    )
    rate = models.FloatField(
        default=0,
        validators=[MinValueValidator(0)],
        help_text="Messages per second at most; 0 means as fast as the server takes them.",
    )
    once_per_participant = models.BooleanField(
        default=True,
        help_text=(
            "Mail each participant once (a campaign sent in batches); off, every occurrence "
            "mails everyone due again (a reminder)."
        ),
    )
    on_uncertain = models.CharField(
        max_length=10,
        choices=UncertainPolicy.choices,
        default=UncertainPolicy.SKIP,
        help_text="After a crash, send the messages that may have gone out again or not.",
    )
    note = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(batch_size__gte=1), name="emailer_task_batch"),
            models.CheckConstraint(condition=Q(rate__gte=0), name="emailer_task_rate"),
            models.CheckConstraint(
                condition=Q(on_uncertain__in=UncertainPolicy.values),
                name="emailer_task_on_uncertain_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def check_templates(self) -> dict[str, str]:
        """Each template that does not compile, or exceeds the render limits for the sample
        participant or the longest values a participant may have, and why (by field). The
        save refuses them; a run starts only without any."""
        return template_errors(
            subject=self.subject,
            body=self.body,
            html_body=self.html_body,
            samples=template_samples(),
        )

    def check_mailer(self) -> dict[str, str]:
        """The mailer field, if this project cannot send through the mailer it names, and why.
        The save refuses it; a run checks again, since the project's MAILERS may change."""
        problem = name_error(self.mailer or "")
        return {"mailer": problem} if problem else {}

    def clean(self) -> None:
        self.from_email = (self.from_email or "").strip()
        self.mailer = (self.mailer or "").strip()
        errors: dict[str, Any] = text_errors(
            self,
            one_line=("name", "from_email", "mailer", "note", "subject"),
            multiline=("body", "html_body"),
        )
        if "mailer" not in errors:
            errors.update(self.check_mailer())
        templates = self.check_templates()
        errors.update({k: v for k, v in templates.items() if k not in errors})
        sender = "" if "from_email" in errors else sender_error(self.from_email)
        if sender:
            errors["from_email"] = sender
        if isinstance(self.rate, int | float) and not math.isfinite(self.rate):
            errors["rate"] = (
                f"{self.rate!r} is not a number of messages per second; 0 means no limit"
            )
        elif isinstance(self.rate, int | float) and self.rate and not (
            SLOWEST_RATE <= self.rate <= FASTEST_RATE
        ):
            # A rate of 1e-300 would make the run wait for ever after its first message.
            errors["rate"] = (
                f"{self.rate:g} messages per second; give 0 (no limit) or from {SLOWEST_RATE:g} "
                f"(one message every {1 / SLOWEST_RATE:g} s) to {FASTEST_RATE:,}"
            )
        if not isinstance(self.statuses, list) or any(
            s not in ParticipantStatus.values for s in self.statuses
        ):
            errors["statuses"] = (
                f"{self.statuses!r} is not a list of statuses from "
                f"{', '.join(ParticipantStatus.values)}"
            )
        if errors:
            raise ValidationError(errors)


def template_samples() -> list[dict[str, Any]]:
    """What a task's templates are checked with: the sample participant, then the longest
    name, address and project name the tables hold, for every status, and the longest
    unsubscribe link a participant id can give."""
    try:
        link = unsubscribe_url(2**63 - 1)
    except Exception:  # the emailer's URLs not included yet (checks say so): the sample's
        link = SAMPLE_CONTEXT["unsubscribe_url"]
    return [
        SAMPLE_CONTEXT,
        *worst_cases(
            name_length=Participant._meta.get_field("name").max_length or 0,
            email_length=Participant._meta.get_field("email").max_length or 0,
            project_length=Project._meta.get_field("name").max_length or 0,
            statuses=ParticipantStatus.values,
            unsubscribe_url=link,
        ),
    ]


def text_errors(
    row: models.Model, *, one_line: tuple[str, ...] = (), multiline: tuple[str, ...] = ()
) -> dict[str, str]:
    """Each typed field of ``row`` that holds a control character, and why (``emailer.text``):
    the fields in ``one_line`` are one line, those in ``multiline`` may hold line breaks and
    tabs."""
    errors: dict[str, str] = {}
    for fields, lines in ((one_line, False), (multiline, True)):
        for name in fields:
            problem = control_character_error(str(getattr(row, name) or ""), multiline=lines)
            if problem:
                errors[name] = problem
    return errors


def sender_error(value: str) -> str:
    """Why ``value`` cannot be a From header, or "": one address, bare or ``Name <address>``."""
    if not value:
        return ""
    if "\n" in value or "\r" in value:
        return "must be one line"
    _, address = parseaddr(value)
    try:
        validate_email(address)
    except ValidationError:
        address = ""
    if not address or not (value == address or value.endswith(f"<{address}>")):
        return (
            f"{value!r} is not an email address; give one such as survey@example.org "
            "or Survey Team <survey@example.org>"
        )
    return ""


class SendEmailHistory(models.Model):
    """Seed 000's SendEmailHistory: one row per run (one job execution) of a task.

    ``scheduled_batch_start_time`` is the occurrence's original due time, the same on every
    attempt; the counts are live while the run sends (refreshed every few seconds).
    Consecutive runs that did nothing for the same reason share one row (``runs``, up to
    ``last_batch_start_time``), so a task whose audience is exhausted does not add a row a
    minute for ever.
    """

    task = models.ForeignKey(SendEmailTask, on_delete=models.CASCADE, related_name="history")
    execution_id = models.BigIntegerField(unique=True, help_text="The job execution (run).")
    job_id = models.BigIntegerField(null=True, blank=True)
    scheduled_batch_start_time = models.DateTimeField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(
        max_length=12, choices=HistoryStatus.choices, default=HistoryStatus.RUNNING
    )
    attempts = models.PositiveIntegerField(default=1)
    sent = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    deferred = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    uncertain = models.PositiveIntegerField(default=0)
    note = models.CharField(max_length=500, blank=True)
    runs = models.PositiveIntegerField(
        default=1,
        db_default=1,
        help_text="Consecutive runs this row stands for: runs of a task that did nothing (the "
        "same reason) are summarised in one row, from its start time to the last one's.",
    )
    last_batch_start_time = models.DateTimeField(
        null=True,
        blank=True,
        help_text="With several runs: the due time of the latest of them.",
    )
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["-scheduled_batch_start_time", "-id"]
        verbose_name = "send email history"
        verbose_name_plural = "send email history"
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=HistoryStatus.values), name="emailer_history_status_valid"
            )
        ]
        indexes = [
            # emailer history --task: a task's runs, newest first.
            models.Index(fields=["task", "-scheduled_batch_start_time"], name="emailer_hist_task"),
            # emailer history --jsonl (selectors.export_history): every task's runs by due
            # time, a page at a time from the last one read.
            models.Index(fields=["scheduled_batch_start_time", "id"], name="emailer_hist_due"),
        ]

    def __str__(self) -> str:
        return f"{self.task} @ {instant(self.scheduled_batch_start_time)}"


class Delivery(models.Model):
    """One participant's message for one occurrence of one task, and what became of it."""

    task = models.ForeignKey(SendEmailTask, on_delete=models.CASCADE, related_name="deliveries")
    occurrence = models.DateTimeField(help_text="The occurrence's original due time.")
    # The ledger is what a run reads to know who has had a task's mail: a participant deleted
    # and imported again, or a history row deleted, must not take their deliveries with them
    # (the next run would mail those people again). RESTRICT refuses those deletes alone and
    # still lets a task or a project go whole, with its ledger.
    participant = models.ForeignKey(
        Participant, on_delete=models.RESTRICT, related_name="deliveries"
    )
    history = models.ForeignKey(
        SendEmailHistory, on_delete=models.RESTRICT, related_name="deliveries"
    )
    email = models.EmailField(max_length=254, help_text="The address the message went to.")
    state = models.CharField(max_length=10, choices=DeliveryState.choices)
    reply = models.CharField(max_length=500, blank=True, help_text="The SMTP server's answer.")
    tries = models.PositiveSmallIntegerField(default=1)
    claimed_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "deliveries"
        ordering = ["-claimed_at", "-id"]
        constraints = [
            # The promise: one message per participant per occurrence. Column order lets the
            # same index answer claim_chunk's "has this participant had this task's mail".
            models.UniqueConstraint(
                fields=["task", "participant", "occurrence"], name="emailer_delivery_once"
            ),
            models.CheckConstraint(
                condition=Q(state__in=DeliveryState.values), name="emailer_delivery_state_valid"
            ),
        ]
        indexes = [
            # record_chunk, recover_run and the final counts: a run's deliveries by state.
            models.Index(fields=["history", "state"], name="emailer_delivery_run"),
            # emailer deliveries --jsonl (selectors.export_deliveries): a task's deliveries by
            # occurrence, a page at a time from the last one read.
            models.Index(fields=["task", "occurrence", "id"], name="emailer_delivery_due"),
        ]

    def __str__(self) -> str:
        return f"{self.email} {self.state}"
