"""Subscription jobs (seed 002's SUBSCRSCHJOBS), their steps, statuses and optimistic
counter, and the due batches the engine runs them in.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from scheduling.api import instant
from subscriptions.models.subscription import Subscription
from subscriptions.models.validation import check_aware, validate_plain_text

#: SMALLINT's largest value: the optimistic counter wraps to 1 after it (seed 002, HCL).
OPT_COUNTER_MAX = 32767


class JobAction(models.TextChoices):
    CREATE_CHILD_ORDER = "CreateChildOrder", "CreateChildOrder"  # renew: order + charge
    CANCEL = "Cancel", "Cancel"  # end a subscription that is pending cancel
    EXPIRE = "Expire", "Expire"  # end a subscription at its end date


class JobStep(models.TextChoices):
    """What ``SubscriptionJob.parameter`` holds: the last step of the job that succeeded.

    A CreateChildOrder moves through the four renewal steps in order (``RENEWAL_STEPS``); a
    retried attempt resumes after the last one. A Cancel or Expire that ran says ``done``; a
    job stopped before it ran (a cancel reached it) says ``cancelled``.
    """

    NONE = "", "not started"  # nothing done yet
    PRICE = "price", "priced"  # the period's amount is known
    CREATE_ORDER = "create_order", "order created"  # the period's order exists, pending payment
    CHARGE = "charge", "charged"  # the gateway took the money; the reference is in field 3
    CONFIRM = "confirm", "confirmed"  # the order is confirmed and the next job placed
    DONE = "done", "done"  # a Cancel or an Expire ended its subscription
    CANCELLED = "cancelled", "cancelled"  # stopped by a cancel before it ran


#: A renewal's steps, in order.
RENEWAL_STEPS = (JobStep.PRICE, JobStep.CREATE_ORDER, JobStep.CHARGE, JobStep.CONFIRM)


def step_done(parameter: str, step: JobStep) -> bool:
    """Whether a job whose last successful step is ``parameter`` has done ``step``."""
    return parameter in RENEWAL_STEPS and RENEWAL_STEPS.index(
        JobStep(parameter)
    ) >= RENEWAL_STEPS.index(step)


#: What an operator may edit on a subscription job, by action: the admin's job page offers
#: these fields and no others, and ``services.edit_job`` refuses any other.
#:
#: Nothing on a renewal (CreateChildOrder): its step (``parameter``) says whether the money
#: was taken, field 1 which period is ordered and charged, field 3 which charge confirms the
#: order, field 2 is a copy of the amount. Each is the run's own record, and money depends on
#: each; what an operator does to a renewal is *Retry now*, or cancelling its subscription.
#: On a Cancel or an Expire, fields 1 and 3 are the seed's customizable columns, which no code
#: here reads: a number and a note for the operator's own use.
OPERATOR_FIELDS: dict[str, tuple[str, ...]] = {
    JobAction.CREATE_CHILD_ORDER: (),
    JobAction.CANCEL: ("custom_integer", "custom_text"),
    JobAction.EXPIRE: ("custom_integer", "custom_text"),
}


class NeedsOperator(Exception):
    """A failure no retry can mend: the job fails at once (status 2) and its subscription
    needs attention, with the reason."""


class UnhandledAction(NeedsOperator):
    """A subscription job whose action no code runs: refused, never guessed at."""


class SubscriptionJobStatus(models.IntegerChoices):
    """The seed's status codes (1 is unused there and here)."""

    ACTIVE = 0, "active"  # waiting for its action date
    FAILED = 2, "failed"  # retries spent, or refused for good; an operator looks at it
    COMPLETED = 3, "completed"  # done, or cancelled (``parameter`` says "cancelled")
    RETRY = 4, "retry"  # an attempt failed; the next one is scheduled
    PROCESSING = 5, "processing"  # an attempt is running


#: Jobs that have not run yet or will run again: what a cancel stops.
JOB_PENDING = (SubscriptionJobStatus.ACTIVE, SubscriptionJobStatus.RETRY)
#: Jobs a runner may take.
JOB_RUNNABLE = (
    SubscriptionJobStatus.ACTIVE,
    SubscriptionJobStatus.RETRY,
    SubscriptionJobStatus.PROCESSING,
)


class StaleJob(Exception):
    """A subscription job changed since it was read (its optimistic counter moved on)."""


def next_counter(value: int) -> int:
    """The counter after ``value``: +1, wrapping from SMALLINT's maximum back to 1."""
    return 1 if value >= OPT_COUNTER_MAX else value + 1


class DueBatch(models.Model):
    """The subscription jobs of one block of subscriptions that fall due at one instant.

    The engine runs batches, not single subscription jobs: every batch has one one-off engine
    job at ``due_at`` (``subscriptions.scheduled``), whose execution runs all the batch's
    jobs with a few set-based statements. A block is ``subscription id // batch size``
    (``SUBSCRIPTIONS_BATCH_SIZE``), so a batch never holds more than one block's worth of
    subscriptions, and a thousand subscriptions renewing at one instant make a handful of
    batches that workers take side by side. A batch is open until its run finds nothing
    left to do and closes it; a job placed at that instant afterwards opens a new one.
    """

    due_at = models.DateTimeField()
    block = models.IntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "due batch"
        verbose_name_plural = "due batches"
        constraints = [
            models.UniqueConstraint(
                fields=["due_at", "block"],
                condition=Q(closed_at__isnull=True),
                name="duebatch_one_open_per_instant_and_block",
            ),
        ]

    def __str__(self) -> str:
        return f"batch {self.pk} due {instant(self.due_at)} (block {self.block})"


class SubscriptionJob(models.Model):
    """Seed 002's SUBSCRSCHJOBS: one scheduled action of one subscription.

    Every update is conditional on the optimistic counter that was read, and increments it
    (``save`` and ``change`` below); a write that lost the race raises ``StaleJob`` instead of
    overwriting what another process wrote.
    """

    scheduled_id = models.BigAutoField("scheduled id", primary_key=True)
    action_date = models.DateTimeField()
    subscription = models.ForeignKey(
        Subscription, on_delete=models.CASCADE, related_name="jobs", db_index=False
    )
    action = models.CharField(max_length=32, choices=JobAction.choices)
    time_placed = models.DateTimeField(default=timezone.now)
    last_update = models.DateTimeField(default=timezone.now)
    status = models.IntegerField(
        choices=SubscriptionJobStatus.choices, default=SubscriptionJobStatus.ACTIVE
    )
    parameter = models.CharField(
        max_length=254,
        blank=True,
        default="",
        help_text="The last successful step of a multi-step run (JobStep); a retry resumes "
        "after it.",
    )
    custom_integer = models.IntegerField(
        "field 1 (integer)",
        null=True,
        blank=True,
        help_text="CreateChildOrder: the period number (not editable); otherwise an operator's "
        "number.",
    )
    custom_decimal = models.DecimalField(
        "field 2 (decimal)",
        max_digits=20,
        decimal_places=5,
        null=True,
        blank=True,
        help_text="CreateChildOrder: a copy of the period's order amount, for the record. The "
        "charge takes the order's own amount, never this field.",
    )
    custom_text = models.CharField(
        "field 3 (text)",
        max_length=254,
        blank=True,
        default="",
        validators=[validate_plain_text],
        help_text="CreateChildOrder: the gateway's charge reference (not editable); "
        "otherwise an operator's note.",
    )
    retry_count = models.IntegerField(default=0)
    last_error = models.TextField(
        blank=True,
        default="",
        help_text="Why its last failed attempt failed (a decline: the gateway's reply). Not "
        "one of the seed's columns.",
    )
    opt_counter = models.SmallIntegerField("optimistic counter", default=0)
    batch = models.ForeignKey(
        DueBatch,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="jobs",
        help_text="The batch whose engine job runs this job at its action date.",
    )

    class Meta:
        indexes = [
            # The seed's I0001371: a subscription's jobs (cancel, expire, show, the admin inline).
            models.Index(fields=["subscription"], name="subscrschjobs_i0001371"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=SubscriptionJobStatus.values),
                name="subscriptionjob_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(action__in=JobAction.values), name="subscriptionjob_action_valid"
            ),
            models.CheckConstraint(
                condition=Q(opt_counter__gte=0), name="subscriptionjob_opt_counter_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.scheduled_id} of subscription {self.subscription_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Insert as usual; update only through ``change``, conditional on the counter."""
        if self._state.adding:
            super().save(*args, **kwargs)
            return
        names = kwargs.get("update_fields") or [
            f.attname
            for f in self._meta.concrete_fields
            if not f.primary_key and f.attname not in ("opt_counter", "last_update")
        ]
        self.change(now=timezone.now(), **{name: getattr(self, name) for name in names})

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.retry_count is not None and self.retry_count < 0:
            errors["retry_count"] = f"{self.retry_count} is negative"
        check_aware(self.action_date, "action_date", errors)
        if errors:
            raise ValidationError(errors)

    def operator_fields(self) -> tuple[str, ...]:
        """The fields an operator may edit on this job (``OPERATOR_FIELDS``)."""
        return OPERATOR_FIELDS.get(self.action, ())

    def change(self, *, now: datetime, **values: Any) -> SubscriptionJob:
        """``UPDATE … SET …, opt_counter = next WHERE scheduled_id = ? AND opt_counter = read``.

        Raises ``StaleJob`` when someone else updated the row since this copy was read.
        """
        values.pop("opt_counter", None)
        read = self.opt_counter
        counter = next_counter(read)
        changed = SubscriptionJob.objects.filter(pk=self.pk, opt_counter=read).update(
            opt_counter=counter, last_update=now, **values
        )
        if not changed:
            current = (
                SubscriptionJob.objects.filter(pk=self.pk)
                .values("opt_counter", "last_update")
                .first()
            )
            if current is None:
                raise StaleJob(f"subscription job {self.pk} no longer exists")
            found_counter, changed_at = current["opt_counter"], current["last_update"]
            raise StaleJob(
                f"subscription job {self.pk} was changed at {instant(changed_at)} since it "
                f"was read (optimistic counter {read}, now {found_counter}); reload and try again"
            )
        for name, value in values.items():
            setattr(self, name, value)
        self.opt_counter = counter
        self.last_update = now
        return self
