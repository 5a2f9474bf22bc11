"""The ledger's one interface: every verb the stages ask of the database, whatever it is.

Oban's manner (``engine.ex`` over ``engines/basic.ex`` and ``engines/lite.ex``): the stages
call a verb named for what it does to the ledger (``lock_due``, ``start_attempt``,
``mark_queued``, ``drop_period``), typed in and out (``ledger.values``), and never ask which
database it is. Each database answers through its engine in ``scheduling/ledger/engines/``,
chosen once per connection (``engines.engine``):

- ``PostgreSQLEngine``: its statements in named ``.sql`` files (``engines/sql/postgresql/``),
  one round trip where the ORM would take several, the partitioned history, advisory locks;
- ``OrmEngine``: the ORM's forms of the same verbs, for a database without those statements;
- ``SQLiteEngine(OrmEngine)``: the embedded default, whose writers are serialised anyway.

A MySQL/MariaDB engine is one more subclass of ``OrmEngine`` (the claim's lock through
``select_for_update(skip_locked=True)``, ``GET_LOCK`` for the advisory locks) and one more name
in ``engines.ENGINES``.

The verbs every database takes in the same ORM words (``finish_attempt``, ``release_job``,
``cancel_runs``, ``lock_execution``, and a job's own: ``lock_job``, ``plan_job``,
``change_job``, ``remove_job``, ``insert_job``, ``mark_declared``, ...) are written once, in
``ledger.shared``, and inherited; the abstract ones here each engine answers. No stage
writes or locks a job, a schedule, an execution or an attempt but through them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from django.db import DEFAULT_DB_ALIAS

from scheduling.ledger.shared import DIED_OUTCOMES, SharedVerbs
from scheduling.ledger.values import Completed, Dropped, Latest, Period, Probe, Started


class NoPartitions(NotImplementedError):
    """This database's history is not partitioned: there is no period to make or drop."""


class Engine(SharedVerbs, ABC):
    """The verbs of the ledger, for the connection ``using``."""

    #: The ``connection.vendor`` this engine answers for.
    vendor: ClassVar[str]
    #: Several claims at once may each lock their own rows (``SKIP LOCKED``): flood lanes pay.
    parallel_claims: ClassVar[bool] = False
    #: One writer at a time, whatever the transactions: two schedulers only take turns.
    one_writer: ClassVar[bool] = False

    def __init__(self, using: str = DEFAULT_DB_ALIAS) -> None:
        self.using = using

    def on_connect(self, raw_connection: Any) -> None:
        """Prepare a new connection of this database (``connection_created``)."""
        return

    # -- what the database can say ----------------------------------------------------------

    def upsert_target(self, *fields: str) -> list[str] | None:
        """The ``unique_fields`` of an upsert (``bulk_create(update_conflicts=True)``)."""
        return list(fields)

    def case_blind_columns(self) -> list[dict[str, str]]:
        """The ledger's text columns whose collation ignores case (none where collations
        are not the database's choice): ``scheduling.W015``."""
        return []

    def clock_offset(self) -> int:
        """Seconds between the database session's clock and UTC: ``scheduling.E017``."""
        return 0

    def json_depth_limit(self) -> int | None:
        """The deepest arguments the database's own JSON check keeps, where it has one:
        ``scheduling.W016``."""
        return None

    # -- the claim -------------------------------------------------------------------------

    @abstractmethod
    def lock_due(
        self, *, now: datetime, limit: int, planning: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """Lock up to ``limit`` due jobs (in the caller's transaction), oldest first, against
        other schedulers; one row per job by name.

        ``planning`` holds the parameters under which an engine may plan a row itself
        (``plain_claims.sql_planning``) and the bound on waiting executions (``waiting.sql_bound``).
        Unplanned rows carry every ``claims`` due field, times read, the arguments as stored
        text, ``planned`` false; planned ones carry ``execution_id``, ``task_id``,
        ``occurrence``, the message's fields and ``at_bound`` (written SKIPPED: the job has
        its most waiting executions).
        """

    @abstractmethod
    def write_claim(
        self,
        *,
        now: datetime,
        executions: Sequence[Mapping[str, Any]],
        jobs: Sequence[Mapping[str, Any]],
    ) -> dict[str, int]:
        """Write the planned executions and move the jobs; the new executions' ids by task id.

        ``executions``: ``job_id``, ``task``, ``scheduled_for``, ``status``, ``task_id``
        (text) and ``last_error``. ``jobs``: ``id``, ``next_due_at``, ``next_occurrence_at``,
        ``status``, ``hold`` (the job takes its first new PENDING execution as current),
        ``keep`` (its times stay as they are), ``reason`` (a pause reason, or None) and
        ``unknown_since``. An occurrence that already has its execution is left as it is, and
        absent from the result.
        """

    # -- an attempt ------------------------------------------------------------------------

    @abstractmethod
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
        """Start one attempt at ``execution_id`` (compare-and-set) and write its attempt row;
        None when it was not startable (finished, expired, held, or limited and unchecked)."""

    def held_after_crash(self, execution_id: int, *, lease: float) -> float | None:
        """Seconds before ``execution_id`` may start, if the last crash recovery holds it.
        A database that commits every start durably holds nothing."""
        return None

    @abstractmethod
    def complete_attempt(
        self,
        *,
        execution_id: int,
        now: datetime,
        attempt: int | None,
        result: dict[str, Any] | None,
    ) -> Completed | None:
        """Complete the running attempt (attempt number ``attempt`` when given): its result
        merged into what earlier attempts left, the run counted, the job's run of failures
        ended and the job released; None when the execution was not running it."""

    # -- publishing, enqueues and backfills --------------------------------------------------

    @abstractmethod
    def mark_queued(self, *, execution_ids: Sequence[int], now: datetime) -> int:
        """Mark these executions QUEUED if they are still PENDING; how many were."""

    @abstractmethod
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
        """Write one run of Django's Tasks framework (in the caller's transaction); its id."""

    @abstractmethod
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
        """Write many runs of ``task`` (each its task id and call) in one INSERT, in the
        caller's transaction (``scheduling.api.enqueue_many``); their ids, in order."""

    @abstractmethod
    def insert_waiting(
        self, *, job_id: int, task: str, instants: Sequence[datetime], reason: str, now: datetime
    ) -> list[datetime]:
        """Write a WAITING execution for each of ``instants`` the job has none for, each once
        however many backfills run at once; the instants written, oldest first."""

    # -- the scheduler's and the operators' reads -------------------------------------------

    @abstractmethod
    def probe(
        self,
        *,
        now: datetime,
        pending_before: datetime,
        queued_before: datetime,
        stale_before: datetime,
    ) -> Probe:
        """Ask every question of an idle tick in one round trip."""

    @abstractmethod
    def ping(self) -> bool:
        """Whether the database answers (an error propagates: the caller reports it)."""

    @abstractmethod
    def lag_percentiles(
        self,
        *,
        start: datetime,
        end: datetime,
        owner_id: int | None,
        quantiles: Sequence[float],
    ) -> dict[float, float | None]:
        """Start minus due time, in seconds, at each of ``quantiles`` over one range of due
        times (None where nothing started)."""

    # -- liveness, limits and declarations ----------------------------------------------------

    @abstractmethod
    def database_now(self) -> Any:
        """The database's own clock, as an expression for a write to stamp."""

    def bound_statements(self, seconds: float) -> None:
        """Bound the rest of this transaction's statements to ``seconds`` (where a server may
        stop answering)."""
        return

    def bound_connection(self, seconds: int) -> None:
        """Timeouts on every layer of this thread's connection (where there is a link to
        lose)."""
        return

    @abstractmethod
    def lock_slot(self, *, job_id: int, limit_job: bool, owner_id: int | None) -> None:
        """Serialise limited starts of ``job_id`` (when ``limit_job``) and of ``owner_id``
        (when given) until this transaction ends, the job's before the owner's."""

    @abstractmethod
    def lock_declarations(self) -> None:
        """Serialise reconciliations of the declarations until this transaction ends."""

    # -- the partitioned history ----------------------------------------------------------------

    def is_partitioned(self) -> bool:
        """Whether the executions table is partitioned by period."""
        return False

    def periods(self, table: str = "scheduling_execution") -> list[Period]:
        """The periods ``table`` has a partition for, oldest first (not the default)."""
        raise NoPartitions(self.vendor)

    def make_period(self, period: Period) -> int:
        """Make one period's partitions of both tables; how many rows moved into it."""
        raise NoPartitions(self.vendor)

    def drop_period(
        self,
        period: Period,
        *,
        latest: Callable[[dict[int | None, int]], Latest | None],
    ) -> Dropped:
        """Drop one period's partitions, keeping its unfinished and current executions and
        the latest ones ``latest(by_job)`` names (a ``Latest``, or None)."""
        raise NoPartitions(self.vendor)

    def nth_newest(
        self, jobs: Sequence[int], *, keep: int, within: Sequence[Period]
    ) -> dict[int, datetime | None]:
        """Each job's ``keep``-th newest ``scheduled_for`` in the periods ``within``."""
        raise NoPartitions(self.vendor)


__all__ = ["DIED_OUTCOMES", "Engine", "Latest", "NoPartitions"]
