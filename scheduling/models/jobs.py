"""Jobs: a task, its arguments and policies on a schedule, with the states a job can be in, its
overlap policies, the declarations in code it may come from, and the index the claim reads.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.validators import MaxLengthValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.timezone import now as current_time

from scheduling.models.checks import OneQueryChecks
from scheduling.models.schedules import Schedule
from scheduling.rules import validation
from scheduling.rules.arguments import ArgumentsField
from scheduling.timing.schedules import Backlog, Misfire


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


class Job(OneQueryChecks, models.Model):
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
            # reconciliation.reconcile: "the jobs the code declares"; partial, so it holds
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
