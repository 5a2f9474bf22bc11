"""The ORM engine: the ledger's verbs in the ORM's words, for a database without the
PostgreSQL engine's statements.

Each verb writes the same rows under the same conditions as its statement in
``engines/sql/postgresql/``, in more round trips: SQLite (``engines.sqlite``) takes them as
they are, and a MySQL/MariaDB engine would too, overriding only what its database says
otherwise (the claim's lock, the advisory locks). The locks and the declarations' lock are left
to each database's engine: how one writer waits for another is the database's own matter.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.models import Q, TextField
from django.db.models.functions import Cast, Now
from django.utils.dateparse import parse_datetime

from scheduling import ledger
from scheduling.ids import uuid7
from scheduling.ledger import named
from scheduling.ledger.engine import Engine
from scheduling.ledger.values import DUE_FIELDS, Completed, Probe, Started
from scheduling.models import (
    EXECUTION_STARTABLE,
    Attempt,
    AttemptOutcome,
    Execution,
    ExecutionStatus,
    Job,
    job_due_index,
)

STATEMENTS = named.load("scheduling.ledger.engines", "sql/orm/reads.sql", form="shared")

#: The due fields but the arguments, which ``lock_due`` reads as text.
_ROW_FIELDS = tuple(name for name in DUE_FIELDS if name not in ("args", "kwargs"))
#: Startable now: waiting for a worker, or a retry whose time has come.
_STARTABLE_NOW = Q(status__in=EXECUTION_STARTABLE) & ~Q(status=ExecutionStatus.RETRY)
#: Rows per ``bulk_update``. Each statement sets every field through a ``CASE`` with one
#: branch per row, which SQLite evaluates row by row: a statement's cost grows with the
#: square of its rows (a claim of 10,000 jobs in one statement took minutes; in batches of
#: 500, about a second).
_UPDATE_BATCH = 500


class OrmEngine(Engine):
    """The ORM's forms of the ledger's verbs."""

    vendor = "orm"

    # -- the claim -------------------------------------------------------------------------

    def lock_due(
        self, *, now: datetime, limit: int, planning: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """The due rows, locked and read by the ORM, none planned here (the claim plans them
        in Python)."""
        found = (
            Job.objects.filter(job_due_index(), next_due_at__lte=now)
            .select_for_update(**self.row_locks(skip_locked=True, no_key=True, of=("self",)))
            .order_by("next_due_at")
            .annotate(
                args_text=Cast("args", output_field=TextField()),
                kwargs_text=Cast("kwargs", output_field=TextField()),
            )
            .values(*_ROW_FIELDS, "args_text", "kwargs_text")[:limit]
        )
        return [
            {
                **row,
                "planned": False,
                "at_bound": False,
                "args": row.pop("args_text"),
                "kwargs": row.pop("kwargs_text"),
            }
            for row in found
        ]

    def write_claim(
        self,
        *,
        now: datetime,
        executions: Sequence[Mapping[str, Any]],
        jobs: Sequence[Mapping[str, Any]],
    ) -> dict[str, int]:
        """The claim's writes as the ORM's bulk writes."""
        taken = set(
            Execution.objects.filter(
                job_id__in={row["job_id"] for row in executions},
                scheduled_for__in={row["scheduled_for"] for row in executions},
            ).values_list("job_id", "scheduled_for")
        )
        fresh = [row for row in executions if (row["job_id"], row["scheduled_for"]) not in taken]
        Execution.objects.bulk_create(
            [
                Execution(
                    **{**row, "task_id": uuid.UUID(row["task_id"])},
                    created_at=now,
                    queued_at=now if row["status"] == ExecutionStatus.PENDING else None,
                    finished_at=None if row["status"] == ExecutionStatus.PENDING else now,
                    updated_at=now,
                )
                # In the order of their time-ordered task ids, as the statement inserts them.
                for row in sorted(fresh, key=lambda row: row["task_id"])
            ]
        )
        ids = {
            str(task_id): pk
            for task_id, pk in Execution.objects.filter(
                task_id__in=[row["task_id"] for row in fresh]
            ).values_list("task_id", "pk")
        }
        first_pending: dict[int, int] = {}
        for row in sorted(fresh, key=lambda row: row["scheduled_for"]):
            if row["status"] == ExecutionStatus.PENDING:
                first_pending.setdefault(row["job_id"], ids[row["task_id"]])
        moved: list[Job] = []
        kept: list[Job] = []
        paused: list[Job] = []
        for item in jobs:
            job = Job(
                pk=item["id"],
                next_due_at=item["next_due_at"],
                next_occurrence_at=item["next_occurrence_at"],
                current_execution_id=first_pending.get(item["id"]) if item["hold"] else None,
                status=item["status"],
                pause_reason=item["reason"] or "",
                task_unknown_since=item["unknown_since"],
                updated_at=now,
            )
            (kept if item["keep"] else moved).append(job)
            if item["reason"] is not None:
                paused.append(job)
        Job.objects.bulk_update(
            moved,
            [
                "next_due_at",
                "next_occurrence_at",
                "current_execution",
                "status",
                "task_unknown_since",
                "updated_at",
            ],
            batch_size=_UPDATE_BATCH,
        )
        # A job paused for a time it cannot read keeps its times as they are.
        Job.objects.bulk_update(
            kept,
            ["current_execution", "status", "task_unknown_since", "updated_at"],
            batch_size=_UPDATE_BATCH,
        )
        Job.objects.bulk_update(paused, ["pause_reason"], batch_size=_UPDATE_BATCH)
        return ids

    # -- an attempt ------------------------------------------------------------------------

    def start_attempt(
        self,
        *,
        execution_id: int,
        worker: str,
        pid: int,
        now: datetime,
        lease: float,
        limits_checked: bool,
        owner_limits: bool,
    ) -> Started | None:
        """The start's conditions and rows, written by the ORM in one transaction."""
        startable = _STARTABLE_NOW | Q(status=ExecutionStatus.RETRY, retry_at__lte=now)
        if not limits_checked:
            limited = Q(job__max_running__isnull=False)
            if owner_limits:
                limited |= Q(job__isnull=False)
            startable &= ~limited
        with transaction.atomic():
            if self.expired(execution_id, now):
                return None
            changed = Execution.objects.filter(startable, pk=execution_id).update(
                status=ExecutionStatus.RUNNING,
                started_at=now,
                finished_at=None,
                last_heartbeat_at=now,
                retry_at=None,
                worker=worker,
                updated_at=now,
            )
            if not changed:
                return None
            found = Execution.objects.values(
                "job_id", "checkpoint", "scheduled_for", "created_at", "call", "result"
            ).get(pk=execution_id)
            earlier = list(
                Attempt.objects.filter(execution_id=execution_id)
                .order_by("number")
                .values_list("worker", "started_at")
            )
            number = len(earlier) + 1
            Attempt.objects.create(
                execution_id=execution_id,
                scheduled_for=found["scheduled_for"],
                number=number,
                worker=worker,
                pid=pid,
                started_at=now,
            )
        return Started(
            execution_id,
            found["job_id"],
            number,
            found["checkpoint"],
            found["scheduled_for"],
            now,
            created_at=found["created_at"],
            call=found["call"],
            errors=tuple((found["result"] or {}).get("errors") or ()),
            earlier_workers=tuple(worker for worker, _ in earlier),
            first_started_at=earlier[0][1] if earlier else None,
        )

    def complete_attempt(
        self,
        *,
        execution_id: int,
        now: datetime,
        attempt: int | None,
        result: dict[str, Any] | None,
    ) -> Completed | None:
        """The completion's rows, written by the ORM in one durable transaction."""
        with transaction.atomic(durable=True):
            kept: dict[str, Any] = {}
            if result is not None:
                before = Execution.objects.filter(pk=execution_id).values_list("result", flat=True)
                kept["result"] = {**(before.first() or {}), **result}
            changed = Execution.objects.filter(
                self.attempt_running(execution_id, attempt),
                pk=execution_id,
                status=ExecutionStatus.RUNNING,
            ).update(
                status=ExecutionStatus.COMPLETED,
                finished_at=now,
                last_error="",
                updated_at=now,
                **kept,
            )
            if not changed:
                return None
            execution = Execution.objects.get(pk=execution_id)
            self.finish_attempt(execution_id, AttemptOutcome.COMPLETED, "", now)
            self.release_job(execution, now=now)
        return Completed(execution.job_id)

    # -- publishing, enqueues and backfills --------------------------------------------------

    def mark_queued(self, *, execution_ids: Sequence[int], now: datetime) -> int:
        return Execution.objects.filter(
            pk__in=execution_ids, status=ExecutionStatus.PENDING
        ).update(status=ExecutionStatus.QUEUED, queued_at=now, updated_at=now)

    def insert_run(
        self,
        *,
        task: str,
        scheduled_for: datetime,
        status: str,
        task_id: Any,
        queued_at: datetime | None,
        retry_at: datetime | None,
        call: dict[str, Any],
        now: datetime,
    ) -> int:
        return int(
            Execution.objects.create(
                task=task,
                scheduled_for=scheduled_for,
                status=status,
                task_id=task_id,
                queued_at=queued_at,
                retry_at=retry_at,
                call=call,
                created_at=now,
                updated_at=now,
            ).pk
        )

    def insert_runs(
        self,
        *,
        task: str,
        scheduled_for: datetime,
        status: str,
        queued_at: datetime | None,
        retry_at: datetime | None,
        now: datetime,
        runs: Sequence[tuple[Any, dict[str, Any]]],
    ) -> list[int]:
        """The ORM's multi-row INSERT (``bulk_create``); where a database returns no ids from
        one (MySQL), they are read back by the runs' task ids."""
        if not runs:
            return []
        made = [
            Execution(
                task=task,
                scheduled_for=scheduled_for,
                status=status,
                task_id=key,
                queued_at=queued_at,
                retry_at=retry_at,
                call=call,
                created_at=now,
                updated_at=now,
            )
            for key, call in runs
        ]
        Execution.objects.using(self.using).bulk_create(made)
        if all(execution.pk is not None for execution in made):
            return [int(execution.pk) for execution in made]
        ids = dict(
            Execution.objects.using(self.using)
            .filter(task_id__in=[key for key, _ in runs])
            .values_list("task_id", "pk")
        )
        return [int(ids[key]) for key, _ in runs]

    def insert_waiting(
        self, *, job_id: int, task: str, instants: Sequence[datetime], reason: str, now: datetime
    ) -> list[datetime]:
        """The ORM inside one transaction: the database's write lock (SQLite's ``BEGIN
        IMMEDIATE``) or the unique index keeps two backfills of one occurrence from both
        writing it."""
        if not instants:
            return []
        with transaction.atomic(using=self.using):
            rows = self.waiting_rows(
                job_id=job_id, task=task, instants=instants, reason=reason, now=now
            )
            Execution.objects.using(self.using).bulk_create(rows)
        return [row.scheduled_for for row in rows]

    def waiting_rows(
        self, *, job_id: int, task: str, instants: Sequence[datetime], reason: str, now: datetime
    ) -> list[Execution]:
        """The WAITING executions of the occurrences among ``instants`` that the job has no
        execution of yet, in time order (unsaved)."""
        held = self.held_instants(job_id=job_id, instants=instants)
        return [
            Execution(
                job_id=job_id,
                task=task,
                scheduled_for=at,
                status=ExecutionStatus.WAITING,
                task_id=uuid7(),
                last_error=reason,
                created_at=now,
                updated_at=now,
            )
            for at in sorted(set(instants) - held)
        ]

    # -- the scheduler's and the operators' reads -------------------------------------------

    def probe(
        self,
        *,
        now: datetime,
        pending_before: datetime,
        queued_before: datetime,
        stale_before: datetime,
    ) -> Probe:
        found = ledger.row(
            STATEMENTS["probe"],
            {
                "now": now,
                "pending_before": pending_before,
                "queued_before": queued_before,
                "stale_before": stale_before,
            },
            using=self.using,
        )
        next_due = found["next_due_at"]
        if isinstance(next_due, str):  # SQLite returns the raw text of the column
            parsed = parse_datetime(next_due)
            next_due = parsed.replace(tzinfo=UTC) if parsed and parsed.tzinfo is None else parsed
        return Probe(
            bool(found["due"]),
            bool(found["republish"]),
            bool(found["stale"]),
            next_due,
            bool(found["waiting"]),
        )

    def ping(self) -> bool:
        return ledger.value(STATEMENTS["ping"], using=self.using) == 1

    def lag_percentiles(
        self,
        *,
        start: datetime,
        end: datetime,
        owner_id: int | None,
        quantiles: Sequence[float],
    ) -> dict[float, float | None]:
        """The started executions' lags sorted and interpolated in Python."""
        executions = Execution.objects.filter(
            scheduled_for__gte=start, scheduled_for__lt=end, started_at__isnull=False
        )
        if owner_id is not None:
            executions = executions.filter(job__owner_id=owner_id)
        lags = sorted(
            (started - due).total_seconds()
            for due, started in executions.values_list("scheduled_for", "started_at")
        )
        if not lags:
            return dict.fromkeys(quantiles)
        return {q: _interpolate(lags, q) for q in quantiles}

    # -- liveness -----------------------------------------------------------------------------

    def database_now(self) -> Any:
        """The statement's clock."""
        return Now()


def _interpolate(values: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``values``, interpolated as percentile_cont does."""
    position = q * (len(values) - 1)
    low, high = math.floor(position), math.ceil(position)
    return values[low] + (values[high] - values[low]) * (position - low)
