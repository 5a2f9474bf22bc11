"""What the engine counts about itself for operators: each scheduler's state, the broker messages
a worker dropped, and the dashboard chart's settled hours.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils.timezone import now as current_time

from scheduling.timing import readable


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
