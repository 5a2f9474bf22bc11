"""Subscriptions, their orders, their scheduled jobs (seed 002's SUBSCRSCHJOBS) and the test
gateway's own tables.

Every rule a row must satisfy lives here (``clean`` and database constraints), so the admin,
the command line and the services refuse the same input with the same message.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from subscriptions import periods

#: SMALLINT's largest value: the optimistic counter wraps to 1 after it (seed 002, HCL).
OPT_COUNTER_MAX = 32767

#: The highest period number a subscription reaches: period numbers are kept in INTEGER
#: columns (``SubscriptionJob.custom_integer``, ``Order.period_number``,
#: ``SubscriptionItem.applies_from``), whose largest value is 2,147,483,647.
MAX_PERIOD_NUMBER = 2_000_000_000

#: Line and paragraph separators, and the bidirectional embeddings, overrides and isolates that
#: make a name read on screen in another order than it is stored.
_INVISIBLE_CONTROLS = frozenset(
    "\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
#: Unicode categories no name, note or reason holds: control characters (NUL, escape, tab,
#: newline, DEL, the C1 range) and lone surrogates (not text at all: bytes read in the wrong
#: encoding, which no database column can store).
_CONTROL_CATEGORIES = frozenset({"Cc", "Cs"})


def _control_character(value: str) -> tuple[int, str] | None:
    for index, char in enumerate(value):
        if char in _INVISIBLE_CONTROLS or unicodedata.category(char) in _CONTROL_CATEGORIES:
            return index, char
    return None


def validate_plain_text(value: str) -> None:
    """Names and notes are one line of plain text: no control characters.

    A NUL cannot be stored at all (PostgreSQL refuses it), a lone surrogate cannot be encoded,
    and the others (an escape sequence, a newline, a right-to-left override) would break the
    one-line command output and logs, or show an operator something other than what is stored.
    """
    found = _control_character(value or "")
    if found is not None:
        index, char = found
        raise ValidationError(
            f"holds the control character U+{ord(char):04X} at position {index + 1}; names and "
            "notes are one line of plain text"
        )


def one_line(text: str, *, limit: int) -> str:
    """A reason written by the app itself (an exception's message, the gateway's reply) as it
    is stored and shown: one line, control characters dropped, at most ``limit`` characters."""
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if char.isspace() or category == "Cc":
            kept.append(" ")  # a newline, a tab, an escape: a word break at most
        elif char not in _INVISIBLE_CONTROLS and category != "Cs":
            kept.append(char)
    line = " ".join("".join(kept).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class SubscriptionStatus(models.TextChoices):
    ACTIVE = "active", "active"  # renews at every period start
    PAST_DUE = "past_due", "past due"  # a renewal failed and is being retried (Stripe's word)
    PENDING_CANCEL = "pending_cancel", "pending cancel"  # ends at the current period's end
    CANCELLED = "cancelled", "cancelled"  # ended by a cancel; nothing more happens
    EXPIRED = "expired", "expired"  # reached its end date
    NEEDS_ATTENTION = "needs_attention", "needs attention"  # a job failed past its retries


#: Statuses in which a renewal may still create an order.
RENEWABLE = (
    SubscriptionStatus.ACTIVE,
    SubscriptionStatus.PAST_DUE,
    SubscriptionStatus.NEEDS_ATTENTION,
)
#: Statuses a confirmed renewal clears: the subscription is paid up again.
FAILING = (SubscriptionStatus.PAST_DUE, SubscriptionStatus.NEEDS_ATTENTION)
#: Statuses after which nothing happens any more.
ENDED = (SubscriptionStatus.CANCELLED, SubscriptionStatus.EXPIRED)


def _aware(value: datetime | None, field: str, errors: dict[str, str]) -> None:
    if value is not None and timezone.is_naive(value):
        errors[field] = "must carry a time zone offset, such as 2030-01-31T09:00:00Z"


class Subscription(models.Model):
    """A customer's recurring order: items delivered and charged once per period."""

    customer = models.CharField(max_length=100, validators=[validate_plain_text])
    interval = models.CharField(
        "fulfilment interval",
        max_length=64,
        help_text="ISO-8601 duration: P1M (monthly, keeps the anchor day), P1Y, P7D, PT30S.",
    )
    anchor = models.DateTimeField(
        "billing anchor", help_text="Periods are counted from here (normally the start)."
    )
    starts_at = models.DateTimeField("start")
    ends_at = models.DateTimeField("end", null=True, blank=True)
    status = models.CharField(
        max_length=20, choices=SubscriptionStatus.choices, default=SubscriptionStatus.ACTIVE
    )
    attention_reason = models.TextField(
        "last error",
        blank=True,
        default="",
        help_text="Past due or needs attention: the failing renewal's last error, as the "
        "gateway (or whatever failed) said it.",
    )
    cancelled_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=SubscriptionStatus.values),
                name="subscription_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(ends_at__isnull=True) | Q(ends_at__gt=models.F("starts_at")),
                name="subscription_ends_after_start",
            ),
        ]

    def __str__(self) -> str:
        return f"subscription {self.pk} ({self.customer}, every {self.interval})"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        try:
            periods.parse_interval(self.interval, field="interval")
        except periods.PeriodError as exc:
            errors["interval"] = exc.reason
        _aware(self.starts_at, "starts_at", errors)
        _aware(self.ends_at, "ends_at", errors)
        _aware(self.anchor, "anchor", errors)
        if (
            "starts_at" not in errors
            and "ends_at" not in errors
            and self.starts_at
            and self.ends_at
            and self.ends_at <= self.starts_at
        ):
            errors["ends_at"] = (
                f"{self.ends_at.isoformat()} is not after the start {self.starts_at.isoformat()}"
            )
        if self.anchor and self.starts_at and not errors and self.anchor > self.starts_at:
            errors["anchor"] = "must not be after the start"
        if self.anchor and not errors:
            self._check_first_period(errors)
        if (
            self.pk is None
            and "ends_at" not in errors
            and self.ends_at
            and self.created_at
            and self.ends_at <= self.created_at
        ):
            errors["ends_at"] = (
                f"{self.ends_at.isoformat()} has already passed; a subscription must end after"
                " it is created"
            )
        if errors:
            raise ValidationError(errors)

    def _check_first_period(self, errors: dict[str, str]) -> None:
        """The first period must be one the calendar and the columns can hold: it ends before
        the year 9999 is out, and its number fits the period-number columns."""
        try:
            number = self.first_period
            self.period_bounds(number + 1)
        except (OverflowError, ValueError):
            # The interval's fault when even a period starting at creation would not fit.
            try:
                periods.period_bounds(self.created_at or timezone.now(), self.period_interval, 1)
            except (OverflowError, ValueError):
                errors["interval"] = f"{self.interval!r} ends the first period after the year 9999"
            else:
                errors["starts_at"] = (
                    f"{self.starts_at.isoformat()} leaves no whole period of {self.interval} "
                    "before the year 9999 ends"
                )
            return
        if number > MAX_PERIOD_NUMBER:
            errors["starts_at"] = (
                f"{self.starts_at.isoformat()} lies {number:,} periods of {self.interval} "
                f"back; a subscription has at most {MAX_PERIOD_NUMBER:,} periods"
            )

    @property
    def period_interval(self) -> periods.Interval:
        return periods.parse_interval(self.interval)

    def period_bounds(self, number: int) -> tuple[datetime, datetime]:
        return periods.period_bounds(self.anchor, self.period_interval, number)

    @property
    def first_period(self) -> int:
        """The first period charged: the one that contains the start, or, for a start in the
        past, the one that contains the moment the subscription was created. Periods that
        ended before it existed are never charged."""
        moment = max(self.starts_at, self.created_at) if self.created_at else self.starts_at
        return periods.period_containing(self.anchor, self.period_interval, moment)


#: The most items one line may carry each period: far beyond any order, far inside the column.
MAX_QUANTITY = 1_000_000
#: The most one period of a subscription may cost (the sum of its items), and so the most one
#: item may come to: far beyond any order, far inside the amount columns (decimal(20,5), below
#: 10^15), so that no sum of items overflows an order or a charge.
MAX_PERIOD_AMOUNT = Decimal(1_000_000_000)
#: The most items a subscription has (items are added, never removed).
MAX_ITEMS = 100


class SubscriptionItem(models.Model):
    """One line of a subscription: what is delivered every period, and at what unit price,
    from period ``applies_from`` on.

    An item added to a live subscription applies from its next period
    (``services.next_period_for_changes``), so a period already begun, ordered or charged
    keeps the items it was priced with.
    """

    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="items")
    sku = models.CharField("item (SKU)", max_length=64, validators=[validate_plain_text])
    quantity = models.IntegerField()
    unit_price = models.DecimalField(max_digits=20, decimal_places=5)
    applies_from = models.IntegerField(
        "applies from period",
        default=0,
        help_text="The first period this item is delivered and charged in. An item added to a "
        "live subscription applies from its next period; orders already placed never change.",
    )

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(quantity__gt=0), name="item_quantity_positive"),
            models.CheckConstraint(
                condition=Q(unit_price__gte=0), name="item_unit_price_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(applies_from__gte=0), name="item_applies_from_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.quantity} x {self.sku} at {self.unit_price}"

    def in_force(self, number: int) -> bool:
        """Whether this item is part of period ``number``."""
        return self.applies_from <= number

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.quantity is not None and self.quantity <= 0:
            errors["quantity"] = f"{self.quantity} is not a positive number of items"
        elif self.quantity is not None and self.quantity > MAX_QUANTITY:
            errors["quantity"] = f"{self.quantity} is more than {MAX_QUANTITY:,} items"
        if self.unit_price is not None and self.unit_price < 0:
            errors["unit_price"] = f"{self.unit_price} is negative"
        elif (
            not errors
            and self.quantity is not None
            and self.unit_price is not None
            and self.amount > MAX_PERIOD_AMOUNT
        ):
            errors["unit_price"] = (
                f"{self.quantity} x {self.unit_price} comes to {self.amount} a period; one "
                f"period costs at most {MAX_PERIOD_AMOUNT:,}"
            )
        if errors:
            raise ValidationError(errors)

    @property
    def amount(self) -> Decimal:
        return self.unit_price * self.quantity


class OrderStatus(models.TextChoices):
    PLACED = "placed", "placed"  # the parent order: what the customer subscribed to
    PENDING = "pending", "pending payment"  # a child order created, not yet paid
    CONFIRMED = "confirmed", "confirmed"  # a child order paid and confirmed


class Order(models.Model):
    """The parent order of a subscription, or a child order for one period.

    ``(subscription, period_start)`` is unique: a second order for one period cannot exist,
    whatever the code does. A child order that is never paid (its job failed or was
    cancelled) is deleted, so "an order for this period" always means one that was paid or
    is being paid.
    """

    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="orders")
    parent = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="children"
    )
    period_number = models.IntegerField(null=True, blank=True)
    period_start = models.DateTimeField(null=True, blank=True)
    period_end = models.DateTimeField(null=True, blank=True)
    amount = models.DecimalField(max_digits=20, decimal_places=5)
    status = models.CharField(max_length=20, choices=OrderStatus.choices)
    charge_reference = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    confirmed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["subscription", "period_start"], name="order_one_per_period"
            ),
            models.UniqueConstraint(
                fields=["subscription"],
                condition=Q(parent__isnull=True),
                name="order_one_parent_per_subscription",
            ),
            models.CheckConstraint(
                condition=Q(status__in=OrderStatus.values), name="order_status_valid"
            ),
        ]

    def __str__(self) -> str:
        if self.parent_id is None:
            return f"parent order {self.pk}"
        return f"order {self.pk} for period {self.period_number}"


class OrderLine(models.Model):
    """One item of an order as it was priced: written with the order and never changed, so an
    order keeps what it charged whatever happens to the subscription's items later. The
    order's ``amount`` is the sum of its lines."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="lines")
    sku = models.CharField("item (SKU)", max_length=64)
    quantity = models.IntegerField()
    unit_price = models.DecimalField(max_digits=20, decimal_places=5)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(quantity__gt=0), name="orderline_quantity_positive"),
            models.CheckConstraint(
                condition=Q(unit_price__gte=0), name="orderline_unit_price_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.quantity} x {self.sku} at {self.unit_price}"

    @property
    def amount(self) -> Decimal:
        return self.unit_price * self.quantity


class SkippedPeriods(models.Model):
    """Periods of a subscription that got no order and no charge because they started while
    it was failing (past due, or needing attention): written when its renewal is paid at last
    and it resumes with the first period that starts after that (``services.place_next``).

    A failing subscription does not accumulate periods, so paying up never brings a burst of
    catch-up charges (docs/subscriptions.md, *Past due: no catch-up*).
    """

    subscription = models.ForeignKey(
        Subscription, on_delete=models.CASCADE, related_name="skipped_periods"
    )
    first_period = models.IntegerField()
    last_period = models.IntegerField()
    starts_at = models.DateTimeField(help_text="The first skipped period's start.")
    ends_at = models.DateTimeField(help_text="The last skipped period's end.")
    reason = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "skipped periods"
        verbose_name_plural = "skipped periods"
        constraints = [
            models.CheckConstraint(
                condition=Q(last_period__gte=models.F("first_period")),
                name="skippedperiods_last_not_before_first",
            ),
        ]

    def __str__(self) -> str:
        return f"periods {self.first_period}-{self.last_period} skipped"


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
        return f"batch {self.pk} due {self.due_at.isoformat()} (block {self.block})"


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
        _aware(self.action_date, "action_date", errors)
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
                .values_list("opt_counter", "last_update")
                .first()
            )
            if current is None:
                raise StaleJob(f"subscription job {self.pk} no longer exists")
            raise StaleJob(
                f"subscription job {self.pk} was changed at {current[1].isoformat()} since it "
                f"was read (optimistic counter {read}, now {current[0]}); reload and try again"
            )
        for name, value in values.items():
            setattr(self, name, value)
        self.opt_counter = counter
        self.last_update = now
        return self


class GatewayCharge(models.Model):
    """The test gateway's own record of every charge it accepted (its "bank statement")."""

    reference = models.CharField(max_length=64, unique=True)
    idempotency_key = models.CharField(max_length=255, unique=True)
    customer = models.CharField(max_length=100)
    amount = models.DecimalField(max_digits=20, decimal_places=5)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"charge {self.reference} {self.amount} ({self.customer})"


class GatewayDecline(models.Model):
    """The test gateway's record of every charge it declined, by idempotency key: what its
    ``find_charge`` answers for a key that has no accepted charge (a real gateway keeps the
    same, as a failed payment)."""

    idempotency_key = models.CharField(max_length=255)
    customer = models.CharField(max_length=100)
    amount = models.DecimalField(max_digits=20, decimal_places=5)
    reason = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # find_charge: the latest decline of a key that has no accepted charge.
            models.Index(fields=["idempotency_key", "-created_at"], name="gatewaydecline_key"),
        ]

    def __str__(self) -> str:
        return f"decline {self.amount} ({self.customer}): {self.reason}"


#: The most calls the test gateway can be told to decline or fail in a row.
MAX_SCRIPTED = 10_000


class GatewayScript(models.Model):
    """What the test gateway does to one customer's next calls: decline N, or fail N."""

    customer = models.CharField(max_length=100, unique=True, validators=[validate_plain_text])
    declines_left = models.IntegerField(default=0)
    errors_left = models.IntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(declines_left__gte=0) & Q(errors_left__gte=0),
                name="gatewayscript_counts_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.customer}: decline {self.declines_left}, error {self.errors_left}"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        for field in ("declines_left", "errors_left"):
            value = getattr(self, field)
            if value is None:
                continue
            if value < 0:
                errors[field] = f"{value} is negative"
            elif value > MAX_SCRIPTED:
                errors[field] = f"{value} is more than {MAX_SCRIPTED:,} calls"
        if errors:
            raise ValidationError(errors)
