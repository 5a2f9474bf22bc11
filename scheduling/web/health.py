"""``/health/``: one JSON answer for a load balancer or an orchestrator's probe.

Four checks, each cheap: the database answers, the broker accepts a connection, some scheduler
recorded a tick within ``SCHEDULING_HEALTH_TICK_AGE`` seconds (``scheduling.stages.ticks``), and no
running execution has gone without a heartbeat so long that the reaper should already have
taken it (twice ``SCHEDULING_STALE_AFTER``). Any failed check makes the answer HTTP 503. A
fifth, ``queues``, only warns (status ``warn``, HTTP 200): executions of a queue that no worker
consumes wait for ever while everything else works, which is worth a look, not a restart.
Anonymous callers learn which check failed; each check's figures and error text are for
staff who may see the scheduling ledger (the view permission on jobs and executions, as for
the dashboard): a staff user of another app gets the plain status.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from scheduling import conf
from scheduling.celeryapp import celery_app
from scheduling.ledger.engines import engine
from scheduling.models import Execution, Job
from scheduling.rules import permissions
from scheduling.stages import ticks
from scheduling.web import overview

BROKER_TIMEOUT = 2.0


def check_database(now: datetime) -> dict[str, Any]:
    return {"ok": engine().ping()}


def check_broker(now: datetime) -> dict[str, Any]:
    with celery_app().connection_for_write() as broker:
        broker.ensure_connection(max_retries=1, interval_start=0, timeout=BROKER_TIMEOUT)
        transport = broker.transport_cls
    return {"ok": True, "transport": str(transport)}


def check_scheduler(now: datetime) -> dict[str, Any]:
    last = ticks.last_tick()
    limit = conf.get("HEALTH_TICK_AGE")
    if last is None:
        return {"ok": False, "last_tick_at": None, "error": "no scheduler has ticked"}
    age = (now - last).total_seconds()
    return {
        "ok": age <= limit,
        "last_tick_at": last.isoformat(),
        "age_seconds": round(age, 3),
        "max_age_seconds": limit,
    }


def check_stale(now: datetime) -> dict[str, Any]:
    stale_after = conf.get("STALE_AFTER")
    overdue = overview.stale_count(now=now, older_than=2 * stale_after)
    return {
        "ok": overdue == 0,
        "count": overview.stale_count(now=now, older_than=stale_after),
        "unreaped": overdue,
    }


def check_queues(now: datetime) -> dict[str, Any]:
    """A warning, never a failure: a queue no worker consumes leaves the web, the database and
    the scheduler working, and its executions waiting (``overview.unconsumed_queues``)."""
    idle = overview.unconsumed_queues(now=now)
    result: dict[str, Any] = {
        "ok": True,
        "unconsumed": [
            {
                "queue": found.queue,
                "waiting": found.waiting,
                "waiting_since": found.since.isoformat(),
                "jobs": found.jobs,
            }
            for found in idle
        ],
        "idle_after_seconds": conf.get("QUEUE_IDLE_WARN"),
    }
    if idle:
        result["warning"] = "; ".join(found.describe(now) for found in idle)
    return result


def check_awaiting_tasks(now: datetime) -> dict[str, Any]:
    """A warning, never a failure: during a rolling deploy occurrences of a task only the new
    release knows wait for it (``overview.awaiting_tasks``); nothing is lost or failed."""
    found = overview.awaiting_tasks()
    result: dict[str, Any] = {
        "ok": True,
        "awaiting": [
            {
                "task": each.task,
                "jobs": each.jobs,
                "executions": each.executions,
                "waiting_since": each.since.isoformat(),
                "known_here": each.known_here,
            }
            for each in found
        ],
        "grace_seconds": conf.get("UNKNOWN_TASK_GRACE"),
    }
    if found:
        result["warning"] = "; ".join(each.describe(now) for each in found)
    return result


CHECKS: dict[str, Callable[[datetime], dict[str, Any]]] = {
    "database": check_database,
    "broker": check_broker,
    "scheduler": check_scheduler,
    "stale_executions": check_stale,
    "queues": check_queues,
    "unknown_tasks": check_awaiting_tasks,
}


def run_checks(*, now: datetime) -> dict[str, Any]:
    """Every check's result (an exception is a failed check with its message)."""
    results: dict[str, Any] = {}
    for name, check in CHECKS.items():
        started = time.monotonic()
        try:
            result = check(now)
        except Exception as exc:  # any failure to answer is the answer
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
            if name == "database":
                connection.close()
        result["ms"] = round((time.monotonic() - started) * 1000, 1)
        results[name] = result
    return results


def public_view_of(checks: dict[str, Any]) -> dict[str, Any]:
    """What anybody may learn: which component is up, down or worth a look, nothing of how or
    where.

    A probe needs only the verdict; error texts name internal hosts, ports, versions, queues and
    jobs, so they are for staff who may see the ledger alone.
    """
    return {
        name: {"ok": result["ok"], **({"warn": True} if "warning" in result else {})}
        for name, result in checks.items()
    }


def verdict(checks: dict[str, Any]) -> str:
    """``fail`` when a check failed (HTTP 503), ``warn`` when one warns, else ``ok``."""
    if not all(result["ok"] for result in checks.values()):
        return "fail"
    return "warn" if any("warning" in result for result in checks.values()) else "ok"


def may_see_details(user: Any) -> bool:
    """Staff with the view (or change) permission on jobs and executions, as the dashboard
    asks; every other caller, logged in or not, gets the verdict alone."""
    return bool(
        user is not None
        and user.is_active
        and user.is_staff
        and permissions.may_view(user, Job, Execution)
    )


@never_cache
@require_GET
def health_view(request: HttpRequest) -> JsonResponse:
    now = timezone.now()
    checks = run_checks(now=now)
    status = verdict(checks)
    if not may_see_details(getattr(request, "user", None)):
        checks = public_view_of(checks)
    body = {"status": status, "time": now.isoformat(), "checks": checks}
    return JsonResponse(body, status=503 if status == "fail" else 200)


@never_cache
@require_GET
def live_view(request: HttpRequest) -> JsonResponse:
    """Liveness of the web process alone: answers without touching the database or broker,
    so an orchestrator never restarts web processes for an outage elsewhere."""
    return JsonResponse({"status": "ok"})
