"""The audit trail of jobs: one row per change, who made it, from where, each field from and to.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils.timezone import now as current_time

from scheduling.models.jobs import Job
from scheduling.timing import readable


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
    ``scheduling.stages`` (``jobs``, ``edits``, ``controls``, ``removals``, ``backfill``) in
    the same transaction as the change (its definition, its state, and what a person or code
    did to its executions: run now, cancel, retry, backfill), so the admin, the command line
    and ``scheduling.api`` are covered by one writer, and by the engine when a job pauses
    itself after failures.
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
