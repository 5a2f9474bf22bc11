"""The ledger's verbs that every database answers in the same ORM words.

These are compare-and-set writes and row locks the ORM says as well as any hand-written
statement would (one ``UPDATE … WHERE`` each, ``SELECT … FOR UPDATE``), so each engine
inherits them from ``Engine`` instead of writing them again; an engine overrides one only when
its database has a better word for it. The stages decide (which status, which error, how long
until the retry); these write what was decided, under the conditions that make a late or
repeated call change nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Case, Exists, F, OuterRef, Q, Value, When
from django.db.models.expressions import Combinable
from django.db.models.functions import Now

from scheduling.ledger.values import Cancelled, Declared, Started
from scheduling.messages.errors import MAX_ERROR
from scheduling.models import (
    EXECUTION_STARTABLE,
    EXECUTION_UNFINISHED,
    Attempt,
    AttemptOutcome,
    Execution,
    ExecutionStatus,
    Job,
    JobStatus,
    Schedule,
)

#: Attempts whose process died under them unexpectedly: killed, ended by their body, taken by
#: the OOM killer. An ``interrupted`` attempt (the worker shut down under it) is not one.
DIED_OUTCOMES = (AttemptOutcome.ABANDONED,)
#: The longest detail a run's report of failed items keeps.
ITEM_FAILURE_DETAIL_MAX = 2000
#: What an attempt's end writes of its execution (``end_attempt``), besides its result.
_END_FIELDS = (
    "status",
    "retry_count",
    "retry_at",
    "finished_at",
    "last_error",
    "task_unknown_since",
    "updated_at",
)
#: What a job's plan is (``plan_job``): the claim and every re-plan move these together.
_PLAN_FIELDS = ("status", "next_due_at", "next_occurrence_at", "updated_at")
#: What a resume writes of a paused job (``resume_job``), its plan included.
_RESUME_FIELDS = (
    "status",
    "pause_reason",
    "pause_kind",
    "consecutive_failures",
    "next_due_at",
    "next_occurrence_at",
    "updated_at",
)


class SharedVerbs:
    """The ORM verbs every engine inherits (mixed into ``Engine``)."""

    #: The alias of the connection this engine answers for.
    using: str

    # -- the claim's cancellations -------------------------------------------------------------

    def row_locks(
        self, *, skip_locked: bool = False, no_key: bool = False, of: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """The ``select_for_update`` options of a lock, as far as this database can say them
        (SQLite ignores them; PostgreSQL says them all; ``engines.mysql`` leaves out what
        MySQL and MariaDB cannot say)."""
        return {"skip_locked": skip_locked, "no_key": no_key, "of": of}

    def current_runs(self, *, job_ids: Iterable[int]) -> dict[int, int]:
        """The execution each of these jobs holds as current (jobs holding none are absent)."""
        return dict(
            Job.objects.filter(pk__in=list(job_ids), current_execution__isnull=False).values_list(
                "pk", "current_execution_id"
            )
        )

    def cancel_runs(
        self, *, now: datetime, reasons: Mapping[int, str]
    ) -> tuple[list[Cancelled], set[int]]:
        """Cancel the unfinished executions named in ``reasons`` (id: reason), in the caller's
        transaction; those cancelled, and the ids left because another transaction held their
        row (the caller cancels them once its own transaction has committed).

        The claim holds the job's row lock; a worker ending a run locks the execution first
        and the job after it, so the execution rows are taken with ``SKIP LOCKED`` and a busy
        one is never waited for under the job's lock.
        """
        if not reasons:
            return [], set()
        ids = list(reasons)
        locked = list(
            Execution.objects.select_for_update(
                **self.row_locks(skip_locked=True, no_key=True, of=("self",))
            )
            .filter(pk__in=ids)
            .values_list("pk", "task_id", "status")
        )
        seen = {pk for pk, _, _ in locked}
        cancelled = []
        for pk, task_id, status in locked:
            if status not in EXECUTION_UNFINISHED:
                continue
            Execution.objects.filter(pk=pk, status=status).update(
                status=ExecutionStatus.CANCELLED,
                finished_at=now,
                retry_at=None,
                last_error=reasons[pk],
                updated_at=now,
            )
            self.finish_attempt(pk, AttemptOutcome.CANCELLED, reasons[pk], now)
            cancelled.append(Cancelled(pk, str(task_id), status == ExecutionStatus.RUNNING))
        return cancelled, set(ids) - seen

    # -- an attempt's life ------------------------------------------------------------------

    def count_duplicate(self, execution_id: int) -> None:
        """Count a message that found its execution already started or finished."""
        Execution.objects.filter(pk=execution_id).update(duplicates=F("duplicates") + 1)

    def lock_execution(
        self,
        execution_id: int,
        *,
        statuses: Iterable[str],
        attempt: int | None = None,
        stale_before: datetime | Combinable | None = None,
        with_job: bool = False,
        worker: str | None = None,
    ) -> Execution | None:
        """The execution, its row locked until the caller's transaction ends, if it is in one
        of ``statuses`` (and still runs attempt ``attempt``, or an attempt on ``worker``, and
        its heartbeat is older than ``stale_before``, when given); else None."""
        still_stale = Q() if stale_before is None else Q(last_heartbeat_at__lt=stale_before)
        found = Execution.objects.select_for_update(**self.row_locks(of=("self",)))
        if with_job:
            found = found.select_related("job")
        return found.filter(
            self.attempt_running(execution_id, attempt, worker=worker),
            still_stale,
            pk=execution_id,
            status__in=list(statuses),
        ).first()

    def finish_execution(
        self,
        execution: Execution,
        *,
        status: str,
        error: str,
        now: datetime,
        attempt_outcome: str | None = None,
    ) -> None:
        """Write a locked execution's end (``status``, its reason), end its running attempt
        with ``attempt_outcome`` when given, and release its job."""
        execution.status = status
        execution.finished_at = now
        execution.last_error = error
        execution.save(update_fields=["status", "finished_at", "last_error", "updated_at"])
        if attempt_outcome is not None:
            self.finish_attempt(execution.pk, attempt_outcome, error, now)
        self.release_job(execution, now=now)

    def end_attempt(
        self,
        execution: Execution,
        *,
        outcome: str,
        error: str,
        now: datetime,
        result_changed: bool,
    ) -> None:
        """Write what the stage decided of a locked execution after a failed attempt (its
        status, retry and error as set on the object), end the attempt row with ``outcome``
        and ``error``, and release the job when the execution failed."""
        execution.save(update_fields=[*_END_FIELDS, *(["result"] if result_changed else [])])
        self.finish_attempt(execution.pk, outcome, error, now)
        if execution.status == ExecutionStatus.FAILED:
            self.release_job(execution, now=now)

    def await_task(
        self, execution_id: int, *, retry_at: datetime, since: datetime, error: str, now: datetime
    ) -> None:
        """Hand a (locked) execution back to RETRY at ``retry_at`` without spending a retry,
        waiting since ``since`` for a process that knows its task."""
        Execution.objects.filter(pk=execution_id).update(
            status=ExecutionStatus.RETRY,
            retry_at=retry_at,
            task_unknown_since=since,
            last_error=error[:MAX_ERROR],
            updated_at=now,
        )

    def relabel_fenced(self, execution_id: int, *, attempt: int, error: str) -> int:
        """An attempt the reaper gave up (``abandoned``) whose body its worker then stopped
        for its lease: relabelled ``fenced``; how many were (0 or 1)."""
        return Attempt.objects.filter(
            execution_id=execution_id, number=attempt, outcome=AttemptOutcome.ABANDONED
        ).update(outcome=AttemptOutcome.FENCED, error=error[:MAX_ERROR])

    def restore_attempt(
        self, execution_id: int, *, started: Started, worker: str, pid: int
    ) -> bool:
        """Write again, durably, a start the database's crash recovery undid: only while the
        execution is startable and has no attempt numbered as this one; False otherwise."""
        with transaction.atomic(durable=True):
            if Attempt.objects.filter(execution_id=execution_id, number=started.attempt).exists():
                return False
            changed = Execution.objects.filter(
                pk=execution_id, status__in=EXECUTION_STARTABLE
            ).update(
                status=ExecutionStatus.RUNNING,
                started_at=started.started_at,
                finished_at=None,
                last_heartbeat_at=Now(),
                retry_at=None,
                worker=worker,
                updated_at=started.started_at,
            )
            if not changed:
                return False
            Attempt.objects.create(
                execution_id=execution_id,
                scheduled_for=started.scheduled_for,
                number=started.attempt,
                worker=worker,
                pid=pid,
                started_at=started.started_at,
            )
        return True

    def record_adhoc_call(self, *, task: str, task_id: str, now: datetime) -> int:
        """The execution of a schedulable task called outside any job, known by its message's
        id: written QUEUED the first time a worker meets that message, found after; its id."""
        execution, _ = Execution.objects.get_or_create(
            task_id=task_id,
            defaults={
                "task": task,
                "scheduled_for": now,
                "status": ExecutionStatus.QUEUED,
                "queued_at": now,
                "created_at": now,
            },
        )
        return execution.pk

    def save_checkpoint(self, execution_id: int, checkpoint: Any) -> None:
        """A running execution's checkpoint, for its next attempt."""
        Execution.objects.running().filter(pk=execution_id).update(checkpoint=checkpoint)

    def add_item_failures(self, execution_id: int, *, count: int, detail: str) -> None:
        """Add ``count`` failed items to the execution's tally, with the latest detail."""
        Execution.objects.filter(pk=execution_id).update(
            item_failures=F("item_failures") + count,
            item_failure_detail=detail[:ITEM_FAILURE_DETAIL_MAX],
        )

    def expired(self, execution_id: int, now: datetime) -> bool:
        """Whether the execution is still startable but its job's ``expires`` has run out."""
        found = (
            Execution.objects.filter(
                pk=execution_id, status__in=EXECUTION_STARTABLE, job__expires__isnull=False
            )
            .values_list("scheduled_for", "job__expires")
            .first()
        )
        return found is not None and found[0] + timedelta(seconds=found[1]) < now

    def release_job(self, execution: Execution, *, now: datetime) -> None:
        """Let a forbid-overlap job's next occurrence be claimed, and count a completed run."""
        if execution.job_id is None:
            return
        updates: dict[str, Any] = {
            "last_keepalive_at": now,
            "current_execution": Case(
                When(current_execution_id=execution.pk, then=Value(None)),
                default=F("current_execution"),
            ),
        }
        if execution.status == ExecutionStatus.COMPLETED:
            updates["execute_count"] = F("execute_count") + 1
            updates["consecutive_failures"] = 0  # a success ends a run of failures
        Job.objects.filter(pk=execution.job_id).update(**updates)

    def finish_attempt(self, execution_id: int, outcome: str, error: str, now: datetime) -> None:
        """End the running attempt row with ``outcome`` (the error cut to what the column
        holds)."""
        Attempt.objects.filter(execution_id=execution_id, outcome=AttemptOutcome.RUNNING).update(
            outcome=outcome, finished_at=now, error=error[:MAX_ERROR]
        )

    def died_attempts(self, execution_id: int) -> int:
        """How many finished attempts of ``execution_id`` ended with their process dying."""
        return Attempt.objects.filter(execution_id=execution_id, outcome__in=DIED_OUTCOMES).count()

    @staticmethod
    def attempt_running(execution_id: int, attempt: int | None, *, worker: str | None = None) -> Q:
        """Rows whose attempt ``attempt`` is still running (any attempt when None), on
        ``worker`` when given.

        An attempt that the reaper already gave up on may still finish on a worker that was
        only cut off; its late end must not be written over the next attempt's row. A worker's
        main process, which cannot know the attempt number its lost pool process had, names
        itself instead: a worker frozen past its lease and thawed must not end the attempt
        another worker runs now.
        """
        if attempt is None and worker is None:
            return Q()
        running = Attempt.objects.filter(execution_id=execution_id, outcome=AttemptOutcome.RUNNING)
        if attempt is not None:
            running = running.filter(number=attempt)
        if worker is not None:
            running = running.filter(worker=worker)
        return Q(Exists(running))

    # -- publishing bookkeeping ----------------------------------------------------------------

    def lock_republishable(
        self, *, pending_before: datetime, now: datetime, lost: Iterable[int], limit: int
    ) -> list[Execution]:
        """Up to ``limit`` executions whose message must go out (again), with their jobs,
        locked (``SKIP LOCKED``: concurrent schedulers take different rows, and never block
        on a foreign key): PENDING past ``pending_before``, RETRY due by ``now``, and the
        QUEUED ones named ``lost``."""
        due = Q(status=ExecutionStatus.PENDING, queued_at__lt=pending_before) | Q(
            status=ExecutionStatus.RETRY, retry_at__lte=now
        )
        lost = list(lost)
        if lost:
            due |= Q(status=ExecutionStatus.QUEUED, pk__in=lost)
        return list(
            Execution.objects.filter(due)
            .select_for_update(**self.row_locks(skip_locked=True, no_key=True, of=("self",)))
            .select_related("job")[:limit]
        )

    def mark_pending(self, execution_ids: Sequence[int], *, now: datetime) -> None:
        """Locked executions about to be published again: PENDING, sent ``now``."""
        Execution.objects.filter(pk__in=list(execution_ids)).update(
            status=ExecutionStatus.PENDING, queued_at=now, updated_at=now
        )

    def hand_back_queued(self, execution_ids: Iterable[int], *, now: datetime) -> int:
        """QUEUED executions whose message did not reach the broker: PENDING again."""
        return Execution.objects.filter(
            pk__in=list(execution_ids), status=ExecutionStatus.QUEUED
        ).update(status=ExecutionStatus.PENDING, queued_at=now, updated_at=now)

    def requeue_queued(self, *, queued_at: datetime, now: datetime) -> int:
        """Every QUEUED execution PENDING again, as if published at ``queued_at``."""
        return Execution.objects.filter(status=ExecutionStatus.QUEUED).update(
            status=ExecutionStatus.PENDING, queued_at=queued_at, updated_at=now
        )

    # -- liveness ----------------------------------------------------------------------------

    def renew_leases(self, execution_ids: Sequence[int], *, stamp: Any) -> int:
        """Stamp the heartbeat of those of these executions still running, and their jobs'
        keepalive; how many were running."""
        ids = list(execution_ids)
        changed = Execution.objects.running().filter(pk__in=ids).update(last_heartbeat_at=stamp)
        Job.objects.filter(executions__pk__in=ids).update(last_keepalive_at=stamp)
        return changed

    # -- running limits ------------------------------------------------------------------------

    def hold_waiting(self, execution_id: int, *, reason: str, now: datetime) -> bool:
        """A startable execution WAITING for a running slot, with the reason; False if it
        was no longer startable."""
        return bool(
            Execution.objects.filter(pk=execution_id, status__in=EXECUTION_STARTABLE).update(
                status=ExecutionStatus.WAITING, last_error=reason, retry_at=None, updated_at=now
            )
        )

    def lock_waiting(self, *, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` WAITING executions, oldest first, locked (``SKIP LOCKED``), each
        with what its release decides by: its job's limit, owner and overlap."""
        return list(
            Execution.objects.filter(status=ExecutionStatus.WAITING)
            .select_for_update(**self.row_locks(skip_locked=True, of=("self",)))
            .order_by("scheduled_for", "pk")
            .values(
                "pk",
                "job_id",
                "job__max_running",
                "job__owner_id",
                "job__owner__username",
                "job__overlap",
                "job__current_execution_id",
            )[:limit]
        )

    def release_waiting(self, execution_ids: Sequence[int], *, now: datetime) -> None:
        """Locked WAITING executions released: PENDING, for the scheduler to publish."""
        Execution.objects.filter(pk__in=list(execution_ids), status=ExecutionStatus.WAITING).update(
            status=ExecutionStatus.PENDING, queued_at=now, last_error="", updated_at=now
        )

    def take_turn(self, job_id: int, *, execution_id: int) -> bool:
        """Make ``execution_id`` its job's current execution if the job holds none."""
        return bool(
            Job.objects.filter(pk=job_id, current_execution__isnull=True).update(
                current_execution_id=execution_id
            )
        )

    # -- a job's failures ----------------------------------------------------------------------

    def count_failure(self, job_id: int) -> bool:
        """One more failed occurrence on the job's tally; False if the job is gone."""
        return bool(
            Job.objects.filter(pk=job_id).update(consecutive_failures=F("consecutive_failures") + 1)
        )

    def pause_job(self, job_id: int, *, reason: str, kind: str, now: datetime) -> bool:
        """Pause an active job (for ``kind``: a person's, its failures); False if it was not
        active."""
        return bool(
            Job.objects.filter(pk=job_id, status=JobStatus.ACTIVE).update(
                status=JobStatus.PAUSED, pause_reason=reason, pause_kind=kind, updated_at=now
            )
        )

    def lock_job(
        self, job_id: int, *, status: str | None = None, with_schedule: bool = False
    ) -> Job | None:
        """The job, its row locked until the caller's transaction ends (if it is in
        ``status``, when given); else None."""
        found = Job.objects.select_for_update()
        if with_schedule:
            found = found.select_related("schedule")
        if status is not None:
            found = found.filter(status=status)
        return found.filter(pk=job_id).first()

    # -- a job's plan, definition and declaration ----------------------------------------------

    def insert_job(self, job: Job) -> None:
        """Write a new, validated job (its schedule saved first); its plan follows, once the
        row has the id its jitter is drawn from (``plan_job``)."""
        job.save(force_insert=True)

    def plan_job(self, job: Job) -> None:
        """Write the plan the stage made for a job it holds (locked, or made in this
        transaction): its status, next due time and next occurrence, as set on the object."""
        job.save(update_fields=list(_PLAN_FIELDS))

    def resume_job(self, job: Job) -> None:
        """Write a locked paused job's resume as the stage set it on the object: its status,
        its pause's reason and kind, its failures in a row, and its plan."""
        job.save(update_fields=list(_RESUME_FIELDS))

    def change_job(self, job: Job, *, fields: Sequence[str]) -> None:
        """Write ``fields`` of a validated job as set on the object, and only those: the
        scheduler and workers own its other columns (next due time, current execution,
        counters) and may have moved them meanwhile."""
        job.save(update_fields=list(fields))

    def remove_job(self, job: Job) -> None:
        """Delete a job and, by cascade, its executions and attempts; its audit trail stays,
        the rows' link to it emptied."""
        job.delete()

    def mark_declared(self, job_id: int, declared: Declared) -> None:
        """Write on the job where the code declares it (``Declared``)."""
        Job.objects.filter(pk=job_id).update(
            declared_in=declared.origin,
            declared_key=declared.key,
            declared_fingerprint=declared.fingerprint,
            declared_release=declared.release,
            declared_task=declared.task,
        )

    def forget_declaration(self, job_id: int) -> None:
        """A job whose declaration is gone from the code: its fingerprint emptied, so it is a
        person's job again (its origin and key stay, for its history)."""
        Job.objects.filter(pk=job_id).update(declared_fingerprint="")

    def lock_schedule(self, schedule_id: int) -> Schedule:
        """The schedule, its row locked until the caller's transaction ends
        (``Schedule.DoesNotExist`` when it is gone)."""
        return Schedule.objects.select_for_update().get(pk=schedule_id)

    def save_schedule(self, schedule: Schedule) -> None:
        """Write a validated schedule: a new one, or new timing of one (the caller plans its
        jobs again in the same transaction)."""
        schedule.save()

    def drop_unused_schedule(self, schedule_id: int) -> bool:
        """Delete the schedule if no job uses it; whether it was deleted."""
        unused = Schedule.objects.filter(pk=schedule_id).exclude(
            Exists(Job.objects.filter(schedule=OuterRef("pk")))
        )
        return bool(unused.delete()[0])

    # -- a job's extra runs ----------------------------------------------------------------------

    def add_occurrence(self, job: Job, *, scheduled_for: datetime, now: datetime) -> Execution:
        """One extra occurrence of ``job`` at ``scheduled_for``, PENDING as if claimed."""
        return Execution.objects.create(
            job=job,
            task=job.task,
            scheduled_for=scheduled_for,
            status=ExecutionStatus.PENDING,
            queued_at=now,
        )

    def retry_failed_execution(self, execution_id: int, *, now: datetime) -> bool:
        """A FAILED execution of a job back to RETRY, due ``now``; False if it was not."""
        return bool(
            Execution.objects.filter(
                pk=execution_id, status=ExecutionStatus.FAILED, job__isnull=False
            ).update(status=ExecutionStatus.RETRY, retry_at=now, finished_at=None, updated_at=now)
        )

    # -- retention ---------------------------------------------------------------------------

    def delete_history(self, execution_ids: Sequence[int]) -> tuple[int, int]:
        """Delete these executions and their attempts in one transaction; (executions,
        attempts) deleted."""
        with transaction.atomic(using=self.using):
            attempts = Attempt.objects.filter(execution_id__in=execution_ids).delete()[0]
            deleted = Execution.objects.filter(pk__in=execution_ids).delete()[1]
        return deleted.get(Execution._meta.label, 0), attempts

    def remove_jobs(self, job_ids: Sequence[int]) -> tuple[int, int]:
        """Delete the jobs, their executions and attempts, and their schedules no other job
        uses, in one transaction; (executions, attempts) deleted."""
        with transaction.atomic(using=self.using):
            schedules = list(
                Job.objects.filter(pk__in=job_ids).values_list("schedule_id", flat=True)
            )
            attempts = Attempt.objects.filter(execution__job_id__in=job_ids).delete()[0]
            executions = Execution.objects.filter(job_id__in=job_ids).delete()[0]
            Job.objects.filter(pk__in=job_ids).delete()
            Schedule.objects.filter(pk__in=schedules).exclude(
                Exists(Job.objects.filter(schedule=OuterRef("pk")))
            ).delete()
        return executions, attempts

    # -- backfills and reads -----------------------------------------------------------------

    def held_instants(self, *, job_id: int, instants: Sequence[datetime]) -> set[datetime]:
        """The occurrences among ``instants`` that already have an execution of the job."""
        if not instants:
            return set()
        return set(
            Execution.objects.filter(job_id=job_id, scheduled_for__in=list(instants)).values_list(
                "scheduled_for", flat=True
            )
        )

    def job_names(self, ids: Sequence[int]) -> dict[int, str]:
        """The name of each job of ``ids`` that exists."""
        if not ids:
            return {}
        return dict(Job.objects.filter(pk__in=ids).values_list("pk", "name"))
