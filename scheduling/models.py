"""The ledger: schedules, jobs, executions and their attempts.

Every occurrence of a job is an Execution row, unique on ``(job, scheduled_for)``; the broker
only carries doorbells that point at these rows. State changes are compare-and-set updates in
``scheduling.services``; the models hold the shapes, the rules of valid input (``clean``) and the
indexes, each of which names the query that needs it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, MinValueValidator
from django.db import models
from django.db.models import Max, Q
from django.utils.timezone import now as current_time

from scheduling import conf
from scheduling.ids import uuid7
from scheduling.rules import validation
from scheduling.rules.arguments import ArgumentsField
from scheduling.timing import calendars, readable, schedules
from scheduling.timing.calendars import MAX_TEXT as CALENDAR_MAX_TEXT
from scheduling.timing.schedules import Backlog, FiringRule, Misfire, ScheduleError


def _timing_error(exc: ScheduleError) -> ValidationError:
    return ValidationError({exc.field: exc.reason})


class Schedule(models.Model):
    """*When*: an interval, a cron expression or a calendar in a zone, or one instant; shared by
    many jobs.

    A schedule has an owner, as a job has: the user whose job made it (the system owner for
    jobs made from code). Staff users who are not superusers see, share, retime and delete
    only their own (``scheduling.web.admin``); a job whose timing is edited while its schedule is
    shared, or owned by someone else, gets a copy of its own (``jobs.edit_job``).
    """

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="owned_schedules"
    )
    name = models.CharField(max_length=200, blank=True, help_text="Optional label for reuse.")
    interval = models.CharField(
        max_length=64, blank=True, help_text="ISO-8601 duration such as PT3H (exact elapsed time)."
    )
    cron = models.CharField(
        max_length=200, blank=True, help_text="Five-field cron expression, in the zone below."
    )
    rrule = models.TextField(
        blank=True,
        validators=[MaxLengthValidator(CALENDAR_MAX_TEXT)],
        help_text="A calendar in the zone below: an RRULE line such as "
        '"FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9", RDATE lines to add dates and EXDATE lines to '
        "drop them (RFC 5545).",
    )
    timezone = models.CharField(
        max_length=64, default="UTC", help_text="IANA zone for cron and calendars."
    )
    run_at = models.DateTimeField(null=True, blank=True, help_text="A single instant (one-off).")
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=current_time, editable=False)

    #: Not stored. Whether a one-off already past may be saved (it runs at once), and the
    #: sentence a refusal ends with: set by the door that saves it (``jobs add --allow-past``,
    #: ``Once(at, allow_past=True)``, the job form's hint); ``validation.past_run_at_error``.
    allow_past = False
    past_hint = validation.PAST_RUN_AT_HINT
    #: The ``run_at`` this row held when read (None for a new row): the rule applies to a
    #: new or changed instant only, so an old one-off stays saveable for other edits.
    saved_run_at: datetime | None = None

    class Meta:
        constraints = [
            models.CheckConstraint(
                name="schedule_exactly_one_kind",
                condition=(
                    Q(~Q(interval=""), cron="", rrule="", run_at__isnull=True)
                    | Q(~Q(cron=""), interval="", rrule="", run_at__isnull=True)
                    | Q(~Q(rrule=""), interval="", cron="", run_at__isnull=True)
                    | Q(interval="", cron="", rrule="", run_at__isnull=False)
                ),
            ),
            models.CheckConstraint(
                name="schedule_end_after_start",
                condition=Q(starts_at__isnull=True)
                | Q(ends_at__isnull=True)
                | Q(ends_at__gt=models.F("starts_at")),
            ),
        ]

    def __str__(self) -> str:
        return self.name or self.describe()

    def save(self, *args: Any, **kwargs: Any) -> None:
        super().save(*args, **kwargs)
        self.saved_run_at = self.run_at

    @classmethod
    def from_db(cls, db: Any, field_names: Any, values: Any, **kwargs: Any) -> Schedule:
        instance = super().from_db(db, field_names, values, **kwargs)
        instance.saved_run_at = instance.__dict__.get("run_at")
        return instance

    def describe(self) -> str:
        if self.interval:
            text = readable.describe_interval(self.interval)
        elif self.cron:
            text = f"cron {self.cron!r} ({self.timezone})"
        elif self.rrule:
            text = f"calendar {' '.join(self.rrule.split())!r} ({self.timezone})"
        else:
            text = f"once at {readable.instant(self.run_at)}" if self.run_at else "once"
        return text

    @property
    def kind(self) -> str:
        if self.rrule:
            return "calendar"
        return "interval" if self.interval else "cron" if self.cron else "once"

    def timing(self) -> FiringRule:
        """The pure view of this schedule; raises ScheduleError naming the bad field."""
        return schedules.timing_from(
            self.interval,
            self.cron,
            self.timezone,
            self.run_at,
            self.starts_at,
            self.ends_at,
            rrule=self.rrule,
            budget=conf.timing_budget(),
        )

    def clean(self) -> None:
        """The schedule's own rules, held against the jitter of every job already on it."""
        errors: dict[str, str] = {}
        if self.name and (found := validation.control_character(self.name)) is not None:
            errors["name"] = f"holds a control character ({found}); a name is one line of text"
        largest = timedelta(0)
        if self.pk is not None:
            largest = self.jobs.aggregate(largest=Max("jitter"))["largest"] or timedelta(0)
        try:
            self.check_timing(jitter=largest)
        except ValidationError as exc:
            errors.update({field: " ".join(found) for field, found in exc.message_dict.items()})
        if errors:
            raise ValidationError(errors)

    def check_timing(self, *, jitter: timedelta) -> None:
        """Raise ValidationError naming the field when this timing cannot be saved for a job
        with ``jitter`` (``schedules.check_savable``)."""
        self.interval = (self.interval or "").strip()
        self.cron = " ".join((self.cron or "").split())
        # Times given in UTC or with TZID are stored as wall times of the job's zone.
        self.rrule = calendars.normalise(self.rrule or "", zone=self.timezone or "UTC")
        try:
            schedules.check_savable(
                self.interval,
                self.cron,
                self.timezone,
                self.run_at,
                self.starts_at,
                self.ends_at,
                now=current_time(),
                jitter=jitter,
                rrule=self.rrule,
                budget=conf.timing_budget(),
            )
        except ScheduleError as exc:
            raise _timing_error(exc) from None
        passed = validation.past_run_at_error(
            self.run_at, now=current_time(), previous=self.saved_run_at, allow_past=self.allow_past
        )
        if passed is not None:
            raise ValidationError({"run_at": f"{passed}; {self.past_hint}"})


class JobStatus(models.TextChoices):
    ACTIVE = "active"  # claimed whenever next_due_at has passed
    PAUSED = "paused"  # never claimed; resume re-plans from its misfire policy
    COMPLETED = "completed"  # its schedule is over (one-off done, or past its end)


class PauseKind(models.TextChoices):
    NONE = ""  # not paused, or paused by the claim for a row it could not plan
    MANUAL = "manual"  # a person (admin, command line) or code (scheduling.api) paused it
    FAILURES = "failures"  # paused itself after pause_after_failures failed occurrences in a row


class Overlap(models.TextChoices):
    FORBID = "forbid"  # the next occurrence waits until the current execution finishes
    ALLOW = "allow"  # occurrences run side by side
    BUFFER_ONE = "buffer_one"  # after the run, the latest occurrence due meanwhile runs
    BUFFER_ALL = "buffer_all"  # after the run, every occurrence due meanwhile runs, in order
    CANCEL_OTHER = "cancel_other"  # the next occurrence cancels the run still in flight


#: Policies under which a claimed job holds its run as ``current_execution`` (every one but
#: ``allow``): the release of that run lets the job be claimed again.
OVERLAP_HOLDS = (Overlap.FORBID, Overlap.BUFFER_ONE, Overlap.BUFFER_ALL, Overlap.CANCEL_OTHER)

#: What a claim does with the occurrences that came due while the job waited, per policy
#: (``schedules.Backlog``; docs/scheduling.md, *Overlap and misfire*).
OVERLAP_BACKLOG = {
    Overlap.FORBID: Backlog.MISFIRE,
    Overlap.ALLOW: Backlog.MISFIRE,
    Overlap.BUFFER_ONE: Backlog.LATEST,
    Overlap.BUFFER_ALL: Backlog.ALL,
    Overlap.CANCEL_OTHER: Backlog.LATEST,
}


def job_due_index() -> Q:
    """The rows of ``job_due_idx``: active jobs not waiting on a run, or whose run the next
    occurrence cancels (``cancel_other``). Every read that scans the index names this."""
    return Q(status="active") & (
        Q(current_execution__isnull=True) | Q(overlap=Overlap.CANCEL_OTHER.value)
    )


#: A job's policies: how it runs, not what or when. The job form edits them, the audit trail
#: follows them.
JOB_POLICY_FIELDS = (
    "misfire",
    "overlap",
    "jitter",
    "timeout",
    "max_retries",
    "max_running",
    "retry_backoff",
    "retry_backoff_max",
    "expires",
    "queue",
    "priority",
    "pause_after_failures",
)


class DeclaredIn(models.TextChoices):
    """Where the code declares a job (``scheduling.stages.declarations``); "" for none."""

    NONE = "", "not declared"  # made in the admin, the command line or the API
    BEAT_SCHEDULE = "beat_schedule", "beat_schedule"  # Celery's app.conf.beat_schedule
    SCHEDULING_JOBS = "SCHEDULING_JOBS", "SCHEDULING_JOBS"  # the Django setting


class DeclarationSet(models.Model):
    """One set of declarations a process of the project carried, known by its fingerprint.

    ``sequence`` orders the sets: a set gets the next number when the ledger first sees it,
    and again when ``manage.py jobs sync`` applies it by hand. A scheduler applies its set at
    start only when no applied set has a higher number (docs/operations.md, *Rolling deploys*).
    """

    fingerprint = models.CharField(max_length=64, unique=True)
    sequence = models.PositiveBigIntegerField()
    entries = models.PositiveIntegerField(default=0, help_text="How many entries it declares.")
    first_seen_at = models.DateTimeField(default=current_time)
    applied_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"declarations #{self.sequence} ({self.fingerprint[:12]})"


class Job(models.Model):
    """*What + when*: a schedule joined to a target, with its next due time and policies.

    The target is either a registered schedulable Celery task (``task`` with JSON ``args`` and
    ``kwargs``) or a row of a registered task table (``task_table`` + ``task_row_id``), which the
    ``scheduling.run_task_row`` task runs.
    """

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="scheduled_jobs",
        db_index=False,  # the unique (owner, name) index serves owner lookups
    )
    name = models.CharField(max_length=200)
    schedule = models.ForeignKey(Schedule, on_delete=models.PROTECT, related_name="jobs")
    task = models.CharField(max_length=200, help_text="Registered schedulable Celery task name.")
    args = ArgumentsField(default=list, blank=True)
    kwargs = ArgumentsField(default=dict, blank=True)
    task_table = models.CharField(
        max_length=200, blank=True, help_text="app_label.Model of a task table row, if any."
    )
    task_row_id = models.BigIntegerField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.ACTIVE)
    next_due_at = models.DateTimeField(
        null=True, blank=True, help_text="When the next occurrence is dispatched (with jitter)."
    )
    next_occurrence_at = models.DateTimeField(
        null=True, blank=True, help_text="Nominal time of the next occurrence (without jitter)."
    )
    current_execution = models.ForeignKey(
        "Execution",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="With any overlap but allow, the unfinished execution the next occurrence "
        "waits for (or, with cancel_other, cancels).",
    )
    execute_count = models.PositiveIntegerField(default=0)
    last_keepalive_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True, validators=[MaxLengthValidator(500)])
    misfire = models.CharField(
        max_length=16,
        choices=[(m.value, m.value.replace("_", " ")) for m in Misfire],
        default=Misfire.CATCH_UP.value,
    )
    overlap = models.CharField(max_length=16, choices=Overlap.choices, default=Overlap.FORBID)
    jitter = models.DurationField(default=timedelta(0))
    timeout = models.PositiveIntegerField(
        default=300, validators=[MinValueValidator(1)], help_text="Seconds per attempt."
    )
    max_retries = models.PositiveIntegerField(default=3, help_text="Retries after the first try.")
    max_running = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Most of this job's executions running at once, across all workers (empty: "
        "no limit). One over it waits in the ledger until one of them ends.",
    )
    retry_backoff = models.FloatField(
        null=True, blank=True, help_text="First retry delay in seconds (default from settings)."
    )
    retry_backoff_max = models.FloatField(
        null=True, blank=True, help_text="Longest retry delay in seconds (default from settings)."
    )
    queue = models.CharField(max_length=200, default="celery")
    priority = models.PositiveSmallIntegerField(null=True, blank=True)
    expires = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Seconds after its due time past which an occurrence is skipped, not run late.",
    )
    pause_reason = models.CharField(max_length=500, blank=True, default="", db_default="")
    pause_after_failures = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Pause the job after this many failed occurrences in a row (empty: never).",
    )
    consecutive_failures = models.PositiveIntegerField(
        default=0,
        db_default=0,
        editable=False,
        help_text="Failed occurrences in a row since the last success or resume; when they "
        'reach "pause after failures", the job pauses itself.',
    )
    pause_kind = models.CharField(
        max_length=16,
        choices=PauseKind.choices,
        blank=True,
        default=PauseKind.NONE,
        db_default=PauseKind.NONE,
        editable=False,
        help_text="Who paused it: a person or code (manual), or its own failures.",
    )
    task_unknown_since = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="Since when its due occurrence waits for a scheduler that knows its task "
        "(a rolling deploy); it fails after SCHEDULING_UNKNOWN_TASK_GRACE.",
    )
    #: Declared in code: where, under which key, the entry's fingerprint ("" once the entry
    #: is gone from the code: the job is paused and a person's again), and the sequence of
    #: the declaration set that last wrote it (``scheduling.stages.declarations``).
    declared_in = models.CharField(
        max_length=16, choices=DeclaredIn.choices, blank=True, default="", db_default=""
    )
    declared_key = models.CharField(max_length=200, blank=True, default="", db_default="")
    declared_fingerprint = models.CharField(max_length=64, blank=True, default="", db_default="")
    declared_release = models.PositiveBigIntegerField(null=True, blank=True)
    #: A Celery task that is not schedulable, which a declared job runs through
    #: ``scheduling.run_celery_task`` (its ``task``); "" otherwise.
    declared_task = models.CharField(max_length=200, blank=True, default="", db_default="")
    created_at = models.DateTimeField(default=current_time, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="job_name_unique_per_owner"),
            models.CheckConstraint(
                name="job_declared_in_valid", condition=Q(declared_in__in=DeclaredIn.values)
            ),
            models.CheckConstraint(
                name="job_pause_kind_valid", condition=Q(pause_kind__in=PauseKind.values)
            ),
            models.CheckConstraint(
                name="job_status_valid", condition=Q(status__in=JobStatus.values)
            ),
            models.CheckConstraint(
                name="job_misfire_valid", condition=Q(misfire__in=[m.value for m in Misfire])
            ),
            models.CheckConstraint(
                name="job_overlap_valid", condition=Q(overlap__in=Overlap.values)
            ),
            models.CheckConstraint(
                name="job_task_row_complete",
                condition=Q(task_table="", task_row_id__isnull=True)
                | Q(~Q(task_table=""), task_row_id__isnull=False),
            ),
            models.CheckConstraint(
                name="job_jitter_not_negative", condition=Q(jitter__gte=timedelta(0))
            ),
        ]
        indexes = [
            # claim_due_jobs: "active jobs not waiting on an execution, due by now, oldest first".
            # Paused, completed and busy jobs are not in the index, so a tick's cost follows the
            # number of due jobs, never the number of jobs. A cancel_other job stays in it while
            # its run is in flight: its next occurrence is due work (it cancels that run), and
            # it is reached only once next_due_at has passed.
            models.Index(fields=["next_due_at"], name="job_due_idx", condition=job_due_index()),
            # overview.paused_after_failures: "jobs that paused themselves after failures";
            # partial, so it holds only those rows.
            models.Index(
                fields=["updated_at"],
                name="job_paused_failures_idx",
                condition=Q(status="paused", pause_kind="failures"),
            ),
            # overview.awaiting_tasks: "jobs whose occurrence waits for a process that knows
            # its task"; partial, so it is empty but during a rolling deploy.
            models.Index(
                fields=["task"],
                name="job_task_unknown_idx",
                condition=Q(task_unknown_since__isnull=False),
            ),
            # declarations.reconcile: "the jobs the code declares"; partial, so it holds
            # only those rows.
            models.Index(
                fields=["declared_in", "declared_key"],
                name="job_declared_idx",
                condition=~Q(declared_in=""),
            ),
        ]

    def __str__(self) -> str:
        # Its name in words where a page read it (``selectors.titled``), else its name.
        return self.__dict__.get("title") or self.name

    @property
    def targets_task_row(self) -> bool:
        return bool(self.task_table)

    @property
    def declared(self) -> bool:
        """Whether the code owns this job's definition now (declared, its entry still there)."""
        return bool(self.declared_in and self.declared_fingerprint)

    @property
    def declaration(self) -> str:
        """Where the code declares it: ``SCHEDULING_JOBS['nightly']``, or ""."""
        return f"{self.declared_in}[{self.declared_key!r}]" if self.declared_in else ""

    @property
    def shown_task(self) -> str:
        """The task as a person reads it: a plain Celery task the code declares by its own
        name, with the runner it goes through."""
        if self.declared_task:
            return f"{self.declared_task} (plain Celery task, run through {self.task})"
        return self.task

    def clean(self) -> None:
        validation.validate_job(self)


class ExecutionStatus(models.TextChoices):
    PENDING = "pending"  # claimed; its message is not yet known to be published
    QUEUED = "queued"  # its message was published; waiting for a worker
    RUNNING = "running"  # a worker started it and keeps its heartbeat fresh
    RETRY = "retry"  # an attempt failed; re-published once retry_at passes
    COMPLETED = "completed"  # an attempt succeeded
    FAILED = "failed"  # retries spent, a permanent error, or nothing to run
    SKIPPED = "skipped"  # missed occurrences dropped by the skip misfire policy
    SUPERSEDED = "superseded"  # came due during a run; a later occurrence ran in its place
    CANCELLED = "cancelled"  # stopped before it finished: by a person, or by a newer occurrence
    WAITING = "waiting"  # its job or owner had its limit of running executions; released later


EXECUTION_STARTABLE = (ExecutionStatus.PENDING, ExecutionStatus.QUEUED, ExecutionStatus.RETRY)
EXECUTION_UNFINISHED = (*EXECUTION_STARTABLE, ExecutionStatus.WAITING, ExecutionStatus.RUNNING)
EXECUTION_FINISHED = (
    ExecutionStatus.COMPLETED,
    ExecutionStatus.FAILED,
    ExecutionStatus.SKIPPED,
    ExecutionStatus.SUPERSEDED,
    ExecutionStatus.CANCELLED,
)


class ExecutionQuerySet(models.QuerySet["Execution"]):
    """The states the engine asks about again and again, by name."""

    def startable(self) -> ExecutionQuerySet:
        """Waiting for a worker: PENDING, QUEUED, or RETRY (a retry starts once it is due)."""
        return self.filter(status__in=EXECUTION_STARTABLE)

    def unfinished(self) -> ExecutionQuerySet:
        """Not yet finished: startable, WAITING for a running slot, or RUNNING."""
        return self.filter(status__in=EXECUTION_UNFINISHED)

    def finished(self) -> ExecutionQuerySet:
        """COMPLETED, FAILED, SKIPPED, SUPERSEDED or CANCELLED: history, never written again
        by a worker."""
        return self.filter(status__in=EXECUTION_FINISHED)

    def running(self) -> ExecutionQuerySet:
        return self.filter(status=ExecutionStatus.RUNNING)

    def stale(self, cutoff: Any) -> ExecutionQuerySet:
        """RUNNING with no heartbeat since ``cutoff`` (a time, or an expression of the
        database's clock): the runs the reaper takes back."""
        return self.filter(status=ExecutionStatus.RUNNING, last_heartbeat_at__lt=cutoff)

    def lost(self, queued_before: datetime) -> ExecutionQuerySet:
        """QUEUED since before ``queued_before``: the messages that may be lost, which the
        republish rule weighs against the evidence (``publishing.find_lost_messages``)."""
        return self.filter(status=ExecutionStatus.QUEUED, queued_at__lt=queued_before)


class Execution(models.Model):
    """One occurrence of a job and its history: at most one per ``(job, scheduled_for)``.

    ``job`` is empty only for ad-hoc calls of schedulable tasks (recorded when
    ``SCHEDULING_RECORD_ADHOC`` is on).
    """

    job = models.ForeignKey(
        Job,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="executions",
        db_index=False,  # the unique (job, scheduled_for) index serves job lookups
    )
    task = models.CharField(max_length=200, help_text="Celery task name at dispatch.")
    scheduled_for = models.DateTimeField(help_text="Nominal due time of the occurrence.")
    status = models.CharField(
        max_length=16, choices=ExecutionStatus.choices, default=ExecutionStatus.PENDING
    )
    retry_count = models.PositiveIntegerField(default=0)
    # Time-ordered (UUIDv7): new rows land on the index's right edge, not at a random leaf of
    # a long history (docs/architecture.md, *Writes that stay cheap on a long history*). Unique
    # by its making; an index, not a constraint, since a constraint on the partitioned history
    # must hold the partition key (``scheduling.ledger.partitions``).
    task_id = models.UUIDField(default=uuid7, db_index=True, editable=False)
    worker = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(default=current_time)
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    retry_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    task_unknown_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Since when it waits for a worker (or publisher) that knows its task; it "
        "fails after SCHEDULING_UNKNOWN_TASK_GRACE.",
    )
    checkpoint = models.JSONField(null=True, blank=True)
    duplicates = models.PositiveIntegerField(
        default=0, help_text="Extra messages for this execution, acknowledged and ignored."
    )
    call = models.JSONField(
        null=True,
        blank=True,
        help_text="A run enqueued through Django's Tasks framework: its arguments, queue, "
        "priority, backend and retries (a job's executions take these from the job).",
    )
    result = models.JSONField(
        null=True,
        blank=True,
        help_text="Django task runs: what the task returned and the errors it raised.",
    )
    item_failures = models.PositiveIntegerField(
        "failed items",
        default=0,
        db_default=0,
        help_text="Single items that failed inside the run, as the run itself reported them: "
        "a renewal declined, a message not delivered.",
    )
    item_failure_detail = models.TextField(
        "failed items: detail",
        blank=True,
        default="",
        db_default="",
        help_text="What the runner said about the failed items in its latest report.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects = ExecutionQuerySet.as_manager()

    class Meta:
        constraints = [
            # Also the index of the history per job, newest first (`executions --job`,
            # `jobs show`, the admin), read backwards.
            models.UniqueConstraint(
                fields=["job", "scheduled_for"], name="execution_one_per_occurrence"
            ),
            models.CheckConstraint(
                name="execution_status_valid", condition=Q(status__in=ExecutionStatus.values)
            ),
        ]
        indexes = [
            # republish_pending / republish_queued: "unpublished or long-queued executions".
            models.Index(
                fields=["status", "queued_at"],
                name="execution_waiting_idx",
                condition=Q(status__in=["pending", "queued"]),
            ),
            # limits.release_waiting: "executions waiting for a running slot, oldest first".
            models.Index(
                fields=["scheduled_for"],
                name="execution_held_idx",
                condition=Q(status="waiting"),
            ),
            # waiting.full_jobs and the claim's lock_due statement: "how many executions of this job
            # wait for a running slot" (SCHEDULING_MAX_WAITING_PER_JOB); partial, so it holds
            # only waiting rows and is empty while no limit is reached.
            models.Index(
                fields=["job"],
                name="execution_job_waiting_idx",
                condition=Q(status="waiting"),
            ),
            # republish_due_retries: "executions in retry whose retry_at has passed".
            models.Index(
                fields=["retry_at"], name="execution_retry_idx", condition=Q(status="retry")
            ),
            # reap_stale_executions: "running executions whose heartbeat is older than X".
            models.Index(
                fields=["last_heartbeat_at"],
                name="execution_running_idx",
                condition=Q(status="running"),
            ),
            # overview.executions_per_hour and overview.lag_percentiles: "executions due in
            # the last 24 h, by hour and status" and "their start minus due time"; the included
            # columns after the first let both read the index alone, never the table.
            models.Index(
                fields=["scheduled_for", "status", "started_at"], name="execution_recent_idx"
            ),
            # overview.recent_failures: "executions that failed in the last 24 h"; partial, so
            # it holds only failed rows and costs nothing when executions succeed.
            models.Index(
                fields=["finished_at"], name="execution_failed_idx", condition=Q(status="failed")
            ),
            # overview.item_failures: "runs due in the last 24 h that reported failed items";
            # partial, so it holds only those rows, and it carries their counts, so the sum
            # reads the index alone, never the table.
            models.Index(
                fields=["scheduled_for", "item_failures"],
                name="execution_item_failures_idx",
                condition=Q(item_failures__gt=0),
            ),
            # overview.recent_by_status(enqueued_only=True) (/metrics): "runs enqueued
            # through Django's Tasks framework, due in the last hour, by status"; partial, so
            # a job's executions (no call) never enter it, and it holds the status, so the
            # count reads the index alone.
            models.Index(
                fields=["scheduled_for", "status"],
                name="execution_task_runs_idx",
                condition=Q(call__isnull=False),
            ),
            # overview.awaiting_tasks: "executions handed back for a process that knows their
            # task"; partial, so it is empty but during a rolling deploy.
            models.Index(
                fields=["task"],
                name="execution_task_unknown_idx",
                condition=Q(task_unknown_since__isnull=False, status="retry"),
            ),
        ]
        ordering = ["-scheduled_for", "-id"]

    def __str__(self) -> str:
        # Named as a page named it (``selectors.titled``), else by its job or task.
        named = self.__dict__.get("title") or (str(self.job) if self.job_id else self.task)
        return f"{named} @ {readable.instant(self.scheduled_for)}"


class AttemptOutcome(models.TextChoices):
    RUNNING = "running"  # still going (or its worker died and the reaper has not seen it yet)
    COMPLETED = "completed"  # returned normally
    FAILED = "failed"  # raised an error
    TIMEOUT = "timeout"  # exceeded the job's timeout
    ABANDONED = "abandoned"  # its worker died; found by a stale heartbeat or a lost worker
    INTERRUPTED = "interrupted"  # the worker shut down under it; retried at once
    FENCED = "fenced"  # its worker could not renew the lease, so it stopped the body; retried
    CANCELLED = "cancelled"  # revoked


class Attempt(models.Model):
    """One try at an execution: who ran it, when it ended and how (the retry history)."""

    execution = models.ForeignKey(
        Execution,
        on_delete=models.CASCADE,
        related_name="attempts",
        db_index=False,  # the unique (execution, number) index serves execution lookups
    )
    number = models.PositiveIntegerField(help_text="1 for the first try.")
    scheduled_for = models.DateTimeField(
        help_text="The execution's, copied: the key both tables are partitioned by, so an "
        "attempt sits in the same period as its execution."
    )
    worker = models.CharField(max_length=255, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(
        max_length=16, choices=AttemptOutcome.choices, default=AttemptOutcome.RUNNING
    )
    error = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["execution", "number"], name="attempt_number_unique"),
        ]
        ordering = ["execution", "number"]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.execution_id}: {self.outcome}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """The execution's ``scheduled_for`` is copied in when not given: it is the key the
        attempt is stored under beside its execution (``ledger.partitions``)."""
        if self.scheduled_for is None:
            self.scheduled_for = self.execution.scheduled_for
        super().save(*args, **kwargs)

    def as_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "worker": self.worker,
            "pid": self.pid,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "outcome": self.outcome,
            "error": self.error,
        }


class SchedulerState(models.Model):
    """What each scheduler process last said about itself, for ``/health/`` and ``/metrics``.

    The scheduler is a process of its own; the web process learns that it is alive only from
    this row, written by ``scheduling.stages.ticks.record_tick`` at most once every few seconds so
    that an idle tick stays one query. Counters are totals since that process started.
    """

    name = models.CharField(max_length=255, unique=True, help_text="host:pid, or a set name.")
    last_tick_at = models.DateTimeField()
    last_tick_seconds = models.FloatField(
        default=0.0, help_text="Longest tick since the previous write, in seconds."
    )
    ticks_total = models.PositiveBigIntegerField(default=0)
    claimed_total = models.PositiveBigIntegerField(default=0)
    republished_total = models.PositiveBigIntegerField(default=0)
    reaped_total = models.PositiveBigIntegerField(default=0)
    started_at = models.DateTimeField()

    class Meta:
        indexes = [
            # ticks.last_tick: "the most recent tick of any scheduler".
            models.Index(fields=["last_tick_at"], name="scheduler_last_tick_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} @ {readable.instant(self.last_tick_at)}"


class DropKind(models.TextChoices):
    CONTENT_TYPE = "content_type"  # a content type the worker does not accept, or none
    UNDECODABLE = "undecodable"  # a body its content type's decoder cannot read
    MALFORMED = "malformed"  # not a task message's shape (args not a list, kwargs not a map)
    TOO_DEEP = "too_deep"  # headers, properties or body nested past what a worker hands over
    TOO_LARGE = "too_large"  # a ledger task's body larger than the argument limits allow
    ARGUMENTS = "arguments"  # a ledger task's args or kwargs over SCHEDULING_ARGS_MAX_*
    REJECTED = "rejected"  # refused by Celery itself (no task named, an invalid request)


class MessageDrops(models.Model):
    """Broker messages a worker acknowledged without running them, counted by worker and kind.

    ``scheduling.worker.guard`` checks every message before it reaches a pool process; one it
    cannot run is acknowledged (redelivered, it would only kill the next worker), logged as
    ``message.dropped`` with its reason, its execution failed where it names one, and counted
    here (``scheduling.stages.drops``), one row per worker and kind, so a flood of them costs
    no more rows. ``/metrics`` reports the totals (``duecourse_worker_messages_dropped_total``).
    """

    worker = models.CharField(max_length=255, help_text="The worker's name (name@host).")
    kind = models.CharField(max_length=16, choices=DropKind.choices)
    dropped_total = models.PositiveBigIntegerField(default=0)
    last_dropped_at = models.DateTimeField()
    last_reason = models.TextField(blank=True, help_text="Why the latest one was dropped.")

    class Meta:
        verbose_name_plural = "message drops"
        constraints = [
            # drops.record_drop: "this worker's row of this kind", found and counted.
            models.UniqueConstraint(fields=["worker", "kind"], name="message_drops_one_per_kind"),
            models.CheckConstraint(
                name="message_drops_kind_valid", condition=Q(kind__in=DropKind.values)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.worker}: {self.dropped_total} {self.kind}"


class SettledHour(models.Model):
    """The executions due in one hour that has settled, counted once by job owner and status.

    The dashboard's hourly chart covers a day: at a million executions a day, counting it
    anew on a page after a start reads a million index entries (most not in memory). An hour
    an hour past its end rarely changes any more, so it is counted once, by the scheduler as
    it settles (or by the first page that lacks it), and kept here for every web process and
    every restart (``scheduling.stages.hours``); a page counts only the latest hours itself.
    """

    hour = models.DateTimeField(unique=True, help_text="The hour's start.")
    counts = models.JSONField(
        help_text='Executions due in the hour by job owner ("none": no owner, or a Django '
        'task run) and status: {"7": {"completed": 40, "failed": 1}}.'
    )
    counted_at = models.DateTimeField(default=current_time)

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:%M}"


class ChangeSource(models.TextChoices):
    ADMIN = "admin"  # the admin's forms and actions, by the signed-in user
    COMMAND = "command"  # manage.py: the process's operating-system account (and --by's user)
    API = "api"  # scheduling.api, called by code (a domain app)
    SYSTEM = "system"  # the engine itself (a job that paused itself after failures)
    CODE = "code"  # schedules declared in code, reconciled (jobs sync, a scheduler's start)


class JobChangeAction(models.TextChoices):
    CREATED = "created"  # the job was made; its changes hold the initial values
    CHANGED = "changed"  # fields were edited (timing, target, policies, owner, name)
    PAUSED = "paused"  # it stopped firing (by a person, code, or its own failures)
    RESUMED = "resumed"  # it was made active again
    REMOVED = "removed"  # it was deleted; the trail stays, its job link emptied
    REPLANNED = "replanned"  # its schedule was edited elsewhere (the Schedules page): moved
    RAN_NOW = "run_now"  # one extra occurrence was made to run now
    CANCELLED = "cancelled"  # an unfinished execution of it was cancelled by a person or code
    RETRIED = "retried"  # a failed execution of it was given one more attempt
    BACKFILLED = "backfilled"  # past occurrences of a range were made for it


class JobChange(models.Model):
    """One change of a job's definition or state, by whom, from where, field by field.

    The audit trail (``scheduling.stages.audit``): written by the job verbs of
    ``scheduling.stages.jobs`` and ``scheduling.stages.backfill`` in the same transaction as
    the change (its definition, its state, and what a person or code did to its executions:
    run now, cancel, retry, backfill), so the admin, the command line and ``scheduling.api``
    are covered by one writer, and by the engine when a job pauses itself after failures.
    ``changes`` maps each field to ``{"from": …, "to": …}``
    in JSON (each value bounded in size). A removed job's rows stay, with ``job`` emptied and
    its name kept in ``job_name``; the trail is pruned by its own retention
    (``SCHEDULING_AUDIT_RETENTION``), never by the executions'.
    """

    job = models.ForeignKey(
        Job,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="changes",
        db_index=False,  # the (job, at) index serves job lookups
    )
    job_name = models.CharField(max_length=200, help_text="The job's name at the change.")
    at = models.DateTimeField(default=current_time)
    who = models.CharField(
        max_length=150,
        help_text="A username; on the command line the process's OS account, or "
        '"USER (os: ACCOUNT)" with --by; or system.',
    )
    source = models.CharField(max_length=16, choices=ChangeSource.choices)
    action = models.CharField(max_length=16, choices=JobChangeAction.choices)
    changes = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                name="job_change_source_valid", condition=Q(source__in=ChangeSource.values)
            ),
            models.CheckConstraint(
                name="job_change_action_valid", condition=Q(action__in=JobChangeAction.values)
            ),
        ]
        indexes = [
            # audit.trail: "a job's changes, newest first" (jobs history, the admin's page).
            models.Index(fields=["job", "-at", "-id"], name="job_change_job_idx"),
            # audit.prune_trail: "changes older than the retention, oldest first".
            models.Index(fields=["at"], name="job_change_at_idx"),
        ]
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.job_name} {self.action} by {self.who} @ {readable.instant(self.at)}"
