"""The scheduler's knobs: Django settings named ``SCHEDULING_<NAME>``, each with a default here.

A host project sets only what it wants to change (``SCHEDULING_STALE_AFTER = 30`` in its
settings); ``KNOBS`` is the one list of names, defaults and meanings, and docs/install.md's
settings table is written from it. Values are read on each access, never at import time, so tests
and management commands can override settings. The older form, a ``SCHEDULING = {"NAME": …}``
dict, is still read for a name that has no ``SCHEDULING_<NAME>`` setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class Knob:
    default: Any
    kind: type
    doc: str


KNOBS: dict[str, Knob] = {
    "BATCH_SIZE": Knob(1000, int, "Due jobs claimed per transaction."),
    "MAX_SLEEP": Knob(1.0, float, "Longest sleep between scheduler ticks, in seconds."),
    "PENDING_GRACE": Knob(
        10.0, float, "Seconds a claimed execution may stay unpublished before it is re-published."
    ),
    "REQUEUE_AFTER": Knob(
        600.0,
        float,
        "Seconds a queued execution waits, at least, before its message is published again, "
        "and then only on evidence that the message is lost (see publishing.find_lost_messages); "
        "each row's delay doubles.",
    ),
    "HEARTBEAT_INTERVAL": Knob(10.0, float, "Seconds between a worker process's heartbeats."),
    "STALE_AFTER": Knob(
        60.0,
        float,
        "The lease of a running execution: one whose heartbeat is older than this on the "
        "database's clock is reaped (never within this long of the scheduler's start or of its "
        "regaining the database).",
    ),
    "FENCE_AT": Knob(
        0.5,
        float,
        "The fraction of STALE_AFTER after which a worker that could not renew a run's lease "
        "(on its own monotonic clock) stops the body (Fenced); the process exits at halfway "
        "from there to the full lease if the body has not stopped. Below 1.",
    ),
    "MISFIRE_GRACE": Knob(
        60.0,
        float,
        "An occurrence dispatched later than this after its due time counts as missed "
        "(matters for the skip policy).",
    ),
    "RETRY_BACKOFF_BASE": Knob(5.0, float, "First retry delay in seconds; doubles per attempt."),
    "RETRY_BACKOFF_CAP": Knob(600.0, float, "Longest retry delay in seconds."),
    "DEFAULT_TIMEOUT": Knob(300, int, "Per-job execution time limit in seconds."),
    "DEFAULT_MAX_RETRIES": Knob(3, int, "Retries after the first attempt."),
    "HARD_TIMEOUT_GRACE": Knob(10, int, "Seconds between the soft time limit and the hard kill."),
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
        "(PostgreSQL; below 2, one batch after another in the scheduler's own thread).",
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
        5.0, float, "Seconds between a scheduler's writes of its tick time and counters."
    ),
    "HEALTH_TICK_AGE": Knob(
        60.0, float, "/health/ fails when no scheduler has ticked for this many seconds."
    ),
    "DASHBOARD_LAG_WARN": Knob(
        5.0,
        float,
        "The dashboard shows a lag percentile (start minus due) amber from here, in seconds.",
    ),
    "DASHBOARD_LAG_ALERT": Knob(
        30.0, float, "The dashboard shows a lag percentile red from here, in seconds."
    ),
    "DASHBOARD_FAILURES_WARN": Knob(
        1,
        int,
        "The dashboard shows failures in 24 h (failed runs, failed items) amber from this many.",
    ),
    "DASHBOARD_FAILURES_ALERT": Knob(
        10, int, "The dashboard shows failures in 24 h red from this many."
    ),
    "CATCH_UP_LIMIT": Knob(
        100, int, "Missed occurrences a catch_up job with overlap=allow creates per claim."
    ),
    "OWNER_MAX_RUNNING": Knob(
        0,
        int,
        "Most executions of one owner's jobs running at once, across all workers (0: no "
        "limit); one over it waits in the ledger. Turning owner limits on costs each start "
        "one more round trip.",
    ),
    "OWNER_MAX_RUNNING_OVERRIDES": Knob(
        {},
        dict,
        "Per-owner exceptions to OWNER_MAX_RUNNING, by username: {\"reports\": 8, "
        "\"duecourse-system\": 0} (0: no limit for that owner).",
    ),
    "ARGS_MAX_DEPTH": Knob(
        32,
        int,
        "How deeply a job's args or kwargs (and a Django task's arguments) may nest lists and "
        "objects; deeper values are refused at every door and failed at the claim.",
    ),
    "ARGS_MAX_BYTES": Knob(
        65536,
        int,
        "How many bytes a job's args or kwargs (and a Django task's arguments) may take as "
        "JSON; larger values are refused at every door and failed at the claim.",
    ),
}

_UNSET = object()
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _coerce(name: str, raw: Any, kind: type) -> Any:
    if kind is str:
        return str(raw)
    if kind is dict:
        if isinstance(raw, dict):
            return dict(raw)
        raise ImproperlyConfigured(f"SCHEDULING_{name}: expected a dict, got {raw!r}")
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    else:
        try:
            value = kind(raw)
        except (TypeError, ValueError):
            pass
        else:
            if value >= 0:
                return value
    raise ImproperlyConfigured(
        f"SCHEDULING_{name}: expected a non-negative {kind.__name__}, got {raw!r}"
    )


def get(name: str) -> Any:
    """Return the current value of knob ``name`` (such as ``"STALE_AFTER"``)."""
    knob = KNOBS[name]
    raw = getattr(settings, f"SCHEDULING_{name}", _UNSET)
    if raw is _UNSET:
        legacy: dict[str, Any] = getattr(settings, "SCHEDULING", {}) or {}
        raw = legacy.get(name, _UNSET)
    if raw is _UNSET:
        return knob.default
    return _coerce(name, raw, knob.kind)
