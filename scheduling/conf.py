"""The scheduler's knobs: Django settings named ``SCHEDULING_<NAME>``, each with a default here.

A host project sets only what it wants to change (``SCHEDULING_STALE_AFTER = 30`` in its
settings); ``KNOBS`` is the one list of names, defaults, meanings and accepted ranges, and
docs/install.md's settings table is written from it (a test holds the two together). Values
are read on each access, never at import time, so tests and management commands can override
settings. The older form, a ``SCHEDULING = {"NAME": …}`` dict, is still read for a name that
has no ``SCHEDULING_<NAME>`` setting.

A value outside its knob's range is refused, never clamped: ``manage.py check`` names it
(``scheduling.E008``, with the range) before anything starts, and reading it raises
``ImproperlyConfigured`` with the same words, so a typo stops the process instead of turning
into a scheduler that reaps live work (``STALE_AFTER = 0``) or a page that answers 500.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

#: The largest whole number a knob that becomes a job's column may hold (PostgreSQL ``integer``).
INT_COLUMN_MAX = 2_147_483_647
#: The longest retry delay a job or a setting may ask for: a week. Capped exponential backoff
#: never waits longer, and a longer wait is a paused job, not a retry.
RETRY_DELAY_LIMIT = 7 * 24 * 3600.0


@dataclass(frozen=True)
class Knob:
    """One setting: its default, its type, what it means, and the values it accepts.

    ``minimum`` and ``maximum`` bound a number (both included); ``max_length`` bounds text,
    which may hold no control characters. A ``timedelta`` knob is a length of time, given as
    a ``timedelta`` or a number of days, bounded in days; ``nullable`` lets it be None
    (forever). The range is stated once, here: ``get`` refuses a value outside it, the
    ``scheduling.E008`` system check names it, and docs/install.md's
    settings table states it (a test compares the two).
    """

    default: Any
    kind: type
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    max_length: int = 255
    nullable: bool = False

    def range_text(self) -> str:
        """The accepted values in words, as docs/install.md's settings table states them."""
        if self.kind is timedelta:
            low, high = _number_text(self.minimum), _number_text(self.maximum)
            never = ", or None (forever)" if self.nullable else ""
            return f"a timedelta or a number of days, from {low} to {high} days{never}"
        if self.kind is bool:
            return "true or false"
        if self.kind is dict:
            low, high = _number_text(self.minimum), _number_text(self.maximum)
            return f"a dict of usernames to whole numbers from {low} to {high}"
        if self.kind is str:
            return f"text of up to {self.max_length} characters"
        low, high = _number_text(self.minimum), _number_text(self.maximum)
        kind = "a whole number" if self.kind is int else "a number"
        return f"{kind} from {low} to {high}"

    def problem(self, raw: Any) -> str | None:
        """Why ``raw`` is not an accepted value of this knob, or None when it is."""
        try:
            value = self.coerce(raw)
        except ValueError as exc:
            return str(exc)
        if value is None:
            return None
        if self.kind is timedelta:
            days = value.total_seconds() / 86_400
            if (self.minimum is not None and days < self.minimum) or (
                self.maximum is not None and days > self.maximum
            ):
                return "is out of range"
            return None
        if self.kind is str:
            if len(value) > self.max_length:
                return f"is {len(value)} characters long"
            if any(unicodedata.category(c) in ("Cc", "Cs") for c in value):
                return "holds a control character"
            return None
        if self.kind is bool:
            return None
        if self.kind is dict:
            inside = Knob(0, int, "", self.minimum, self.maximum)
            for key, item in value.items():
                problem = inside.problem(item)
                if not isinstance(key, str) or problem is not None:
                    return f"has {key!r}: {item!r}, which {problem or 'is not under a username'}"
            return None
        if (self.minimum is not None and value < self.minimum) or (
            self.maximum is not None and value > self.maximum
        ):
            return "is out of range"
        return None

    def coerce(self, raw: Any) -> Any:
        """``raw`` as this knob's type; a setting read from the environment is a string.

        Raises ValueError saying what was expected: a bool is not a number, a number is not a
        bool, and a number must be finite (and whole, for a whole-number knob).
        """
        if raw is None and self.nullable:
            return None
        if self.kind is timedelta:
            if isinstance(raw, timedelta):
                return raw
            days = Knob(0, float, "").coerce(raw)
            try:
                return timedelta(days=days)
            except OverflowError:
                raise ValueError("is too large") from None
        if self.kind is str:
            if not isinstance(raw, str):
                raise ValueError(f"is a {type(raw).__name__}, not text")
            return raw
        if self.kind is dict:
            if not isinstance(raw, dict):
                raise ValueError(f"is a {type(raw).__name__}, not a dict")
            return {key: Knob(0, int, "").coerce(item) for key, item in raw.items()}
        if self.kind is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower() if isinstance(raw, str | int) else None
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError("is not true or false")
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise ValueError(f"is a {type(raw).__name__}, not a number")
        if isinstance(raw, int) and self.kind is int:
            return raw
        try:
            number = float(raw)
        except ValueError:
            raise ValueError("is not a number") from None
        except OverflowError:
            raise ValueError("is too large") from None
        if not math.isfinite(number):
            raise ValueError("is not a finite number")
        if self.kind is float:
            return number
        if not number.is_integer():
            raise ValueError("is not a whole number")
        return int(number)


def _number_text(value: float | None) -> str:
    if value is None:
        return "any"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:g}"


KNOBS: dict[str, Knob] = {
    "BATCH_SIZE": Knob(1000, int, "Due jobs claimed per transaction.", 1, 100_000),
    "MAX_SLEEP": Knob(1.0, float, "Longest sleep between scheduler ticks, in seconds.", 0.01, 3600),
    "PENDING_GRACE": Knob(
        10.0,
        float,
        "Seconds a claimed execution may stay unpublished before it is re-published.",
        1,
        86_400,
    ),
    "REQUEUE_AFTER": Knob(
        600.0,
        float,
        "Seconds a queued execution waits, at least, before its message is published again, "
        "and then only on evidence that the message is lost (see publishing.find_lost_messages); "
        "each row's delay doubles.",
        1,
        604_800,
    ),
    "HEARTBEAT_INTERVAL": Knob(
        10.0, float, "Seconds between a worker process's heartbeats.", 0.1, 3600
    ),
    "STALE_AFTER": Knob(
        60.0,
        float,
        "The lease of a running execution: one whose heartbeat is older than this on the "
        "database's clock is reaped (never within this long of the scheduler's start or of its "
        "regaining the database).",
        1,
        86_400,
    ),
    "FENCE_AT": Knob(
        0.5,
        float,
        "The fraction of STALE_AFTER after which a worker that could not renew a run's lease "
        "(on its own monotonic clock) stops the body (Fenced); the process exits at halfway "
        "from there to the full lease if the body has not stopped.",
        0.1,
        0.9,
    ),
    "MISFIRE_GRACE": Knob(
        60.0,
        float,
        "An occurrence dispatched later than this after its due time counts as missed "
        "(matters for the skip policy).",
        0,
        86_400,
    ),
    "UNKNOWN_TASK_GRACE": Knob(
        3600.0,
        float,
        "Seconds an occurrence whose task (or task table) the process that would claim, "
        "publish or run it does not know waits for one that does (a rolling deploy) before it "
        "fails naming the task.",
        1,
        604_800,
    ),
    "RETRY_BACKOFF_BASE": Knob(
        5.0, float, "First retry delay in seconds; doubles per attempt.", 0, RETRY_DELAY_LIMIT
    ),
    "RETRY_BACKOFF_CAP": Knob(
        600.0, float, "Longest retry delay in seconds.", 0, RETRY_DELAY_LIMIT
    ),
    "DEFAULT_TIMEOUT": Knob(
        300, int, "Per-job execution time limit in seconds.", 1, INT_COLUMN_MAX
    ),
    "DEFAULT_MAX_RETRIES": Knob(3, int, "Retries after the first attempt.", 0, INT_COLUMN_MAX),
    "MAX_INTERRUPTIONS": Knob(
        3,
        int,
        "How many times an execution's worker process may die under it (killed, ended by its "
        "body with os._exit, taken by the OOM killer) before it fails naming the cause; "
        "shutdowns of the worker do not count.",
        1,
        1_000_000,
    ),
    "HARD_TIMEOUT_GRACE": Knob(
        10, int, "Seconds between the soft time limit and the hard kill.", 0, 86_400
    ),
    "SYNC_ON_START": Knob(
        True,
        bool,
        "Reconcile the jobs declared in code (SCHEDULING_JOBS, beat_schedule) with the ledger "
        "when a scheduler starts.",
    ),
    "RECORD_ADHOC": Knob(
        False, bool, "Record executions of schedulable tasks called outside any job."
    ),
    "FAST_PUBLISH": Knob(
        True, bool, "Publish batches through a Redis pipeline when the broker is Redis."
    ),
    "FLOOD_LANES": Knob(
        2,
        int,
        "Threads that claim and publish side by side while full batches keep coming "
        "(PostgreSQL; 1: one batch after another in the scheduler's own thread).",
        1,
        32,
    ),
    "PREPARE_STATEMENTS": Knob(
        True,
        bool,
        "Prepare the statements a worker sends for every task on the PostgreSQL server (turn "
        "off behind a connection pooler in transaction mode that cannot keep them).",
    ),
    "CELERY_APP": Knob(
        "",
        str,
        "The -A argument of the project's Celery app, for the worker that manage.py runstack "
        "starts (default: found among the imported modules).",
    ),
    "DEMO": Knob(
        False,
        bool,
        "Allow manage.py loaddemo and runstack's generated demo-admin login on this database "
        "(a project turns it on for a throwaway local database only).",
    ),
    "SCHEDULER_NAME": Knob(
        "",
        str,
        "How a scheduler names itself in /health/ and /metrics (default: host:pid).",
    ),
    "LIVENESS_INTERVAL": Knob(
        5.0,
        float,
        "Seconds between a scheduler's writes of its tick time and counters (0: every tick).",
        0,
        3600,
    ),
    "HEALTH_TICK_AGE": Knob(
        60.0,
        float,
        "/health/ fails when no scheduler has ticked for this many seconds.",
        1,
        86_400,
    ),
    "QUEUE_IDLE_WARN": Knob(
        300.0,
        float,
        "Seconds executions of a queue may wait with nothing of that queue started before "
        "/health/, the dashboard and manage.py check warn that no worker consumes it (0: never).",
        0,
        604_800,
    ),
    "CSP": Knob(
        True,
        bool,
        "Send the apps' Content-Security-Policy on the engine's admin pages, dashboard, /health/ "
        "and /metrics where the host sends none (scheduling.pages.csp); False leaves every page to "
        "the host.",
    ),
    "DASHBOARD_LAG_WARN": Knob(
        5.0,
        float,
        "The dashboard shows a lag percentile (start minus due) amber from here, in seconds.",
        0,
        86_400,
    ),
    "DASHBOARD_LAG_ALERT": Knob(
        30.0, float, "The dashboard shows a lag percentile red from here, in seconds.", 0, 86_400
    ),
    "DASHBOARD_FAILURES_WARN": Knob(
        1,
        int,
        "The dashboard shows failures in 24 h (failed runs, failed items) amber from this many.",
        1,
        1_000_000,
    ),
    "DASHBOARD_FAILURES_ALERT": Knob(
        10, int, "The dashboard shows failures in 24 h red from this many.", 1, 1_000_000
    ),
    "CATCH_UP_LIMIT": Knob(
        100,
        int,
        "Missed occurrences a catch_up job with overlap=allow creates per claim.",
        1,
        10_000,
    ),
    "TIMING_BUDGET_MS": Knob(
        50,
        int,
        "Milliseconds of CPU one evaluation of a timing may take (a calendar's next "
        "occurrence): a calendar that needs more is refused when saved, and a job whose "
        "calendar needs more when it is claimed is paused, naming the reason.",
        1,
        10_000,
    ),
    "BACKFILL_MAX": Knob(
        1000,
        int,
        "Most occurrences one backfill may make (``jobs backfill``, the admin's Backfill "
        "action); a range holding more is refused, naming the count.",
        1,
        1_000_000,
    ),
    "OWNER_MAX_RUNNING": Knob(
        0,
        int,
        "Most executions of one owner's jobs running at once, across all workers (0: no "
        "limit); one over it waits in the ledger. Turning owner limits on costs each start "
        "one more round trip.",
        0,
        1_000_000,
    ),
    "MAX_WAITING_PER_JOB": Knob(
        1000,
        int,
        "Most occurrences of one job waiting for a running slot (its own or its owner's "
        "limit); an occurrence claimed past it is recorded SKIPPED with the reason.",
        1,
        1_000_000,
    ),
    "WARN_AFTER_UNFINISHED_RUNS": Knob(
        5,
        int,
        "A job whose last this many runs were all cancelled, superseded or failed shows a "
        "warning in the job list and on the dashboard.",
        1,
        1000,
    ),
    "OWNER_MAX_RUNNING_OVERRIDES": Knob(
        {},
        dict,
        'Per-owner exceptions to OWNER_MAX_RUNNING, by username: {"reports": 8, '
        '"duecourse-system": 0} (0: no limit for that owner).',
        0,
        1_000_000,
    ),
    "ARGS_MAX_DEPTH": Knob(
        32,
        int,
        "How deeply a job's args or kwargs (and a Django task's arguments) may nest lists and "
        "objects; deeper values are refused at every door and failed at the claim.",
        1,
        1_000,
    ),
    "ARGS_MAX_BYTES": Knob(
        65536,
        int,
        "How many bytes a job's args or kwargs (and a Django task's arguments) may take as "
        "JSON; larger values are refused at every door and failed at the claim.",
        64,
        16 * 1024 * 1024,
    ),
    "HISTORY_PARTITION_DAYS": Knob(
        7,
        int,
        "On PostgreSQL, the days of scheduled_for each partition of the executions and "
        "attempts tables holds (the scheduler makes them ahead; prune_history drops them whole); "
        "choose about a twelfth of the history you keep.",
        1,
        366,
    ),
    "AUDIT_RETENTION": Knob(
        timedelta(days=365),
        timedelta,
        "How long the audit trail of jobs (who changed what) is kept: manage.py prune_history "
        "deletes older changes, whatever its --older-than says of executions (None: forever).",
        1,
        36_500,
        nullable=True,
    ),
}

_UNSET = object()
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def declared_jobs() -> Any:
    """``SCHEDULING_JOBS``: the jobs the project declares in its settings, name -> the options
    of ``jobs add`` as Python values (checked by ``scheduling.stages.declarations``, not a
    knob: its values are a job's, with the job's rules)."""
    return getattr(settings, "SCHEDULING_JOBS", {})


def _raw(name: str) -> Any:
    """The value the host set for knob ``name``, or ``_UNSET``."""
    raw = getattr(settings, f"SCHEDULING_{name}", _UNSET)
    if raw is _UNSET:
        legacy: dict[str, Any] = getattr(settings, "SCHEDULING", {}) or {}
        raw = legacy.get(name, _UNSET) if isinstance(legacy, dict) else _UNSET
    return raw


def refusal(name: str, raw: Any) -> str | None:
    """Why ``raw`` cannot be ``SCHEDULING_<name>``, naming the setting and the accepted range,
    or None when it can: the one sentence of ``get`` and of the ``scheduling.E008`` check."""
    knob = KNOBS[name]
    problem = knob.problem(raw)
    if problem is None:
        return None
    return f"SCHEDULING_{name} = {raw!r} {problem}; it accepts {knob.range_text()}"


def refusals() -> dict[str, str]:
    """Every knob the host set to a value it does not accept, by name (``scheduling.E008``)."""
    found: dict[str, str] = {}
    for name in KNOBS:
        raw = _raw(name)
        if raw is not _UNSET and (reason := refusal(name, raw)) is not None:
            found[name] = reason
    return found


def timing_budget() -> float:
    """``SCHEDULING_TIMING_BUDGET_MS`` in seconds, as the timing modules take it."""
    return float(get("TIMING_BUDGET_MS")) / 1000


def get(name: str) -> Any:
    """Return the current value of knob ``name`` (such as ``"STALE_AFTER"``).

    A value outside the knob's range raises ImproperlyConfigured naming the setting and the
    range; ``manage.py check`` says the same before anything starts (``scheduling.E008``).
    """
    knob = KNOBS[name]
    raw = _raw(name)
    if raw is _UNSET:
        return knob.default
    reason = refusal(name, raw)
    if reason is not None:
        raise ImproperlyConfigured(reason)
    return knob.coerce(raw)
