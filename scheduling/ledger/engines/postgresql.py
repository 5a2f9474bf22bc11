"""The PostgreSQL engine: the ledger's verbs as the statements in ``sql/postgresql/*.sql``.

Where the ORM would take several round trips, a lock it cannot say, or Python per row, this
engine sends one statement, loaded by the verb's name. The worker's statements for every
task (``start_attempt``, ``complete_attempt``, ``insert_run``) are prepared on the server
(``ledger.hot``); the claim reads times and JSON as text (``read_times``), which costs less
than the driver's loaders. The partitioned history's verbs are in ``postgresql_history``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.db.models import DateTimeField, Func

from scheduling import ledger
from scheduling.ids import uuid7_text
from scheduling.ledger import named, pgtimes
from scheduling.ledger.engine import Engine
from scheduling.ledger.engines.postgresql_history import PostgreSQLHistory, PostgreSQLHistoryMove
from scheduling.ledger.hot import run_hot
from scheduling.ledger.values import Completed, Probe, Started
from scheduling.models import AttemptOutcome, ExecutionStatus, JobStatus

STATEMENTS = named.load(
    "scheduling.ledger.engines",
    "sql/postgresql/claim.sql",
    "sql/postgresql/attempt.sql",
    "sql/postgresql/publish.sql",
    "sql/postgresql/backfill.sql",
    "sql/postgresql/reads.sql",
    "sql/postgresql/locks.sql",
    form="postgresql",
)

#: The due fields that hold times: text from ``lock_due``, read here (``read_times``).
TIME_FIELDS = (
    "next_occurrence_at",
    "next_due_at",
    "created_at",
    "schedule__run_at",
    "schedule__starts_at",
    "schedule__ends_at",
    "task_unknown_since",
)
_PENDING = ExecutionStatus.PENDING.value
_RUNNING = ExecutionStatus.RUNNING.value


class _TransactionStart(Func):
    """The database's clock at the start of this transaction (one value for all its rows)."""

    template = "CURRENT_TIMESTAMP"
    output_field = DateTimeField()


def read_times(row: dict[str, Any]) -> dict[str, Any]:
    """A locked row with its times read from text, in place.

    As text a time is one ``fromisoformat`` call (psycopg requires the server's ISO
    ``DateStyle`` anyway). A time Python cannot hold ('infinity', years past 9999) is kept
    under ``bad_times`` by name and read as None, for the claim to name.
    """
    for name in TIME_FIELDS:
        if row[name] is not None:
            try:
                row[name] = datetime.fromisoformat(row[name])
            except ValueError:
                row.setdefault("bad_times", {})[name] = row[name]
                row[name] = None
    return row


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


class PostgreSQLEngine(PostgreSQLHistoryMove, PostgreSQLHistory, Engine):
    vendor = "postgresql"
    parallel_claims = True

    def on_connect(self, raw_connection: Any) -> None:
        """A row holding ``infinity`` must not break every reader of its table (pgtimes)."""
        pgtimes.register(raw_connection)

    def _rows(self, name: str, params: Mapping[str, Any]) -> list[Any]:
        return ledger.rows(STATEMENTS[name], params, using=self.using)

    def _value(self, name: str, params: Mapping[str, Any] | None = None) -> Any:
        return ledger.value(STATEMENTS[name], params, using=self.using)

    # -- the claim -------------------------------------------------------------------------

    def lock_due(
        self, *, now: datetime, limit: int, planning: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """One statement locks the due jobs and plans, inserts and moves the plain ones."""
        found = self._rows(
            "lock_due",
            {
                **planning,
                "now": now,
                "limit": limit,
                "active": JobStatus.ACTIVE.value,
                "pending": _PENDING,
            },
        )
        for row in found:
            if not row["planned"]:
                read_times(row)
        return found

    def write_claim(
        self,
        *,
        now: datetime,
        executions: Sequence[Mapping[str, Any]],
        jobs: Sequence[Mapping[str, Any]],
    ) -> dict[str, int]:
        written = self._rows(
            "write_claim",
            {
                "now": now.isoformat(),
                "pending": _PENDING,
                "executions": json.dumps(
                    [{**e, "scheduled_for": e["scheduled_for"].isoformat()} for e in executions]
                ),
                "jobs": json.dumps(
                    [
                        {
                            **job,
                            "next_due_at": _iso(job["next_due_at"]),
                            "next_occurrence_at": _iso(job["next_occurrence_at"]),
                            "unknown_since": _iso(job["unknown_since"]),
                        }
                        for job in jobs
                    ]
                ),
            },
        )
        return {row["task_id"]: row["id"] for row in written}

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
        """One prepared statement; the start commits without waiting for its flush."""
        found = run_hot(
            STATEMENTS["start_attempt"],
            {
                "running": _RUNNING,
                "pending": _PENDING,
                "queued": ExecutionStatus.QUEUED.value,
                "retry": ExecutionStatus.RETRY.value,
                "attempt_running": AttemptOutcome.RUNNING.value,
                "id": execution_id,
                "now": now,
                "worker": worker,
                "pid": pid,
                "lease": lease,
                "limits_checked": limits_checked,
                "owner_limits": owner_limits,
            },
        )
        if found is None:
            return None
        return Started(
            execution_id,
            found["job_id"],
            found["attempt"],
            _json(found["checkpoint"]),
            found["scheduled_for"],
            now,
            created_at=found["created_at"],
            call=_json(found["call"]),
            errors=tuple(_json(found["errors"]) or ()),
            earlier_workers=tuple(found["earlier_workers"] or ()),
            first_started_at=found["first_started_at"],
        )

    def held_after_crash(self, execution_id: int, *, lease: float) -> float | None:
        seconds = self._value("held_after_crash", {"id": execution_id, "lease": lease})
        return None if seconds is None else max(0.0, float(seconds))

    def complete_attempt(
        self,
        *,
        execution_id: int,
        now: datetime,
        attempt: int | None,
        result: dict[str, Any] | None,
    ) -> Completed | None:
        found = run_hot(
            STATEMENTS["complete_attempt"],
            {
                "completed": ExecutionStatus.COMPLETED.value,
                "running": _RUNNING,
                "attempt_completed": AttemptOutcome.COMPLETED.value,
                "attempt_running": AttemptOutcome.RUNNING.value,
                "id": execution_id,
                "now": now,
                "attempt": attempt,
                "result": result,
            },
        )
        return None if found is None else Completed(found["job_id"])

    # -- publishing, enqueues and backfills --------------------------------------------------

    def mark_queued(self, *, execution_ids: Sequence[int], now: datetime) -> int:
        """The commit does not wait for the disk: if the server crashed and lost it, the rows
        would only be PENDING again and published once more, which workers absorb."""
        with transaction.atomic(using=self.using, durable=True):
            ledger.execute(STATEMENTS["commit_unflushed"], using=self.using)
            return ledger.execute(
                STATEMENTS["mark_queued"],
                {
                    "queued": ExecutionStatus.QUEUED.value,
                    "pending": _PENDING,
                    "now": now,
                    "ids": list(execution_ids),
                },
                using=self.using,
            )

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
        """Prepared on the server: an enqueue is a request's cost, where the ORM's own work
        would be a third of it."""
        found = run_hot(
            STATEMENTS["insert_run"],
            {
                "task": task,
                "scheduled_for": scheduled_for,
                "status": str(status),
                "task_id": task_id,
                "queued_at": queued_at,
                "retry_at": retry_at,
                "call": call,
                "now": now,
            },
        )
        assert found is not None  # an INSERT … RETURNING returns its row
        return int(found["id"])

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
        """One statement whatever their number, the rows as one JSON document (an array per
        column would be quoted value by value on the client); ids matched by task id, not
        by the order RETURNING happens to give."""
        if not runs:
            return []
        found = ledger.rows(
            STATEMENTS["insert_runs"],
            {
                "task": task,
                "scheduled_for": scheduled_for,
                "status": str(status),
                "queued_at": queued_at,
                "retry_at": retry_at,
                "now": now,
                "runs": json.dumps([{"task_id": str(key), "call": call} for key, call in runs]),
            },
            using=self.using,
        )
        ids = {row["task_id"]: row["id"] for row in found}
        return [int(ids[key]) for key, _ in runs]

    def insert_waiting(
        self, *, job_id: int, task: str, instants: Sequence[datetime], reason: str, now: datetime
    ) -> list[datetime]:
        """One statement; a concurrent insert of the same occurrence waits for the other
        transaction and then does nothing."""
        if not instants:
            return []
        written = self._rows(
            "insert_waiting",
            {
                "job_id": job_id,
                "task": task,
                "waiting": ExecutionStatus.WAITING.value,
                "reason": reason,
                "now": now,
                # Oldest first, as the rows go in, so their time-ordered task ids rise with them.
                "instants": sorted(instants),
                "task_ids": [uuid7_text() for _ in instants],
            },
        )
        return sorted(row["scheduled_for"] for row in written)

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
        return Probe(
            bool(found["due"]),
            bool(found["republish"]),
            bool(found["stale"]),
            found["next_due_at"],
            bool(found["waiting"]),
        )

    def ping(self) -> bool:
        return self._value("ping") == 1

    def lag_percentiles(
        self,
        *,
        start: datetime,
        end: datetime,
        owner_id: int | None,
        quantiles: Sequence[float],
    ) -> dict[float, float | None]:
        """``percentile_cont`` over one bounded range of ``scheduled_for``."""
        params = {"start": start, "end": end, "quantiles": list(quantiles)}
        if owner_id is None:
            lags = self._value("lag_percentiles", params)
        else:
            lags = self._value("owner_lag_percentiles", {**params, "owner_id": owner_id})
        if lags is None:
            return dict.fromkeys(quantiles)
        return {q: float(v) for q, v in zip(quantiles, lags, strict=True)}

    def job_names(self, ids: Sequence[int]) -> dict[int, str]:
        """One array parameter: a quarter of the time of ten thousand ``IN`` parameters."""
        if not ids:
            return {}
        return {found["id"]: found["name"] for found in self._rows("job_names", {"ids": list(ids)})}

    # -- liveness, limits and declarations ----------------------------------------------------

    def database_now(self) -> Any:
        """One instant per transaction, so every row of a beat gets the same."""
        return _TransactionStart()

    def bound_statements(self, seconds: float) -> None:
        self._value("bound_statements", {"timeout": f"{max(1, round(seconds * 1000))}ms"})

    def bound_connection(self, seconds: int) -> None:
        """A connect timeout and TCP keepalives with a user timeout, on this thread's
        connection alone (the host's settings and the task's own connection keep theirs).
        The connection is closed; the next query opens it with these options."""
        connection = connections[self.using]
        options = dict(connection.settings_dict.get("OPTIONS") or {})
        options.update(
            connect_timeout=seconds,
            keepalives=1,
            keepalives_idle=max(1, seconds // 2),
            keepalives_interval=1,
            keepalives_count=max(1, seconds // 2),
            tcp_user_timeout=seconds * 1000,
        )
        connection.close()
        connection.settings_dict = {**connection.settings_dict, "OPTIONS": options}

    def lock_slot(self, *, job_id: int, limit_job: bool, owner_id: int | None) -> None:
        """Advisory locks, so nothing else waits on them; the job's before the owner's in
        every process, so two starts never wait on each other in a circle."""
        if limit_job:
            self._value("lock_slot", {"name": f"duecourse.job.{job_id}"})
        if owner_id is not None:
            self._value("lock_slot", {"name": f"duecourse.owner.{owner_id}"})

    def lock_declarations(self) -> None:
        """An advisory lock: claims and edits never wait on it."""
        self._value("lock_declarations")


def _json(value: Any) -> Any:
    """A JSON column as Python: a prepared statement decodes it, Django's cursor gives text."""
    return json.loads(value) if isinstance(value, str) else value
