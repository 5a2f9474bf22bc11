"""Executions and their attempts: every occurrence of a job is an Execution row, unique on
``(job, scheduled_for)``, with its states in named groups and the named querysets the
scheduler's scans use (``startable``, ``stale``, ``lost``); every try at it an Attempt row.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import Q
from django.utils.timezone import now as current_time

from scheduling.ids import uuid7
from scheduling.models.jobs import Job
from scheduling.timing import readable


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
