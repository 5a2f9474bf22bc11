"""Scheduler ticks: each scheduler records its ticks so the web process can see it is alive.

The scheduler runs in a process of its own, so ``/health/`` and ``/metrics`` cannot ask it
anything; they read the ``SchedulerState`` row it keeps fresh. ``record_tick`` is called after
every tick but writes at most once per ``SCHEDULING_LIVENESS_INTERVAL`` seconds (one upsert),
so an idle tick stays a single query and a busy one pays nothing measurable.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DatabaseError, transaction
from django.db.models import Max
from django.utils import timezone

from scheduling import conf
from scheduling.ledger.engines import engine
from scheduling.models import SchedulerState

logger = logging.getLogger("scheduling")

#: Rows of schedulers silent for this long are removed when another scheduler starts.
FORGET_AFTER = timedelta(days=7)


@dataclass
class _Local:
    """What this process has not written yet."""

    name: str
    started_at: datetime
    written_at: float | None = None
    ticks: int = 0
    longest: float = 0.0
    first_write: bool = True


_local: _Local | None = None


def scheduler_name() -> str:
    return conf.get("SCHEDULER_NAME") or f"{socket.gethostname()}:{os.getpid()}"


def _state() -> _Local:
    global _local
    name = scheduler_name()
    if _local is None or _local.name != name:
        _local = _Local(name=name, started_at=timezone.now())
    return _local


def record_tick(*, stats: Mapping[str, int], seconds: float, now: datetime | None = None) -> bool:
    """Note one finished tick of this process's scheduler; write it when the interval passed.

    ``stats`` holds the scheduler's running totals (``claimed``, ``republished``, ``reaped``);
    ``seconds`` is how long the tick took. Returns whether a row was written.
    """
    local = _state()
    local.ticks += 1
    local.longest = max(local.longest, seconds)
    clock = time.monotonic()
    if local.written_at is not None and clock - local.written_at < conf.get("LIVENESS_INTERVAL"):
        return False
    now = now or timezone.now()
    try:
        with transaction.atomic():
            _write(local, stats, now)
    except DatabaseError as exc:
        # Liveness is for the operators; it must never stop the scheduler (a database not yet
        # migrated during an upgrade, say). The next interval tries again.
        logger.warning("ticks.write_failed error=%r", exc)
        local.written_at = clock
        return False
    local.written_at = clock
    local.longest = 0.0
    return True


def _write(local: _Local, stats: Mapping[str, int], now: datetime) -> None:
    SchedulerState.objects.bulk_create(
        [
            SchedulerState(
                name=local.name,
                last_tick_at=now,
                last_tick_seconds=local.longest,
                ticks_total=local.ticks,
                claimed_total=int(stats.get("claimed", 0)),
                republished_total=int(stats.get("republished", 0)),
                reaped_total=int(stats.get("reaped", 0)),
                started_at=local.started_at,
            )
        ],
        update_conflicts=True,
        unique_fields=engine().upsert_target("name"),
        update_fields=[
            "last_tick_at",
            "last_tick_seconds",
            "ticks_total",
            "claimed_total",
            "republished_total",
            "reaped_total",
            "started_at",
        ],
    )
    if local.first_write:
        SchedulerState.objects.filter(last_tick_at__lt=now - FORGET_AFTER).delete()
        local.first_write = False


def last_tick() -> datetime | None:
    """When any scheduler last recorded a tick (``None`` when none ever did)."""
    found: datetime | None = SchedulerState.objects.aggregate(last=Max("last_tick_at"))["last"]
    return found


def schedulers(*, active_within: timedelta, now: datetime) -> list[SchedulerState]:
    """The schedulers that recorded a tick within ``active_within`` of ``now``, newest first."""
    return list(
        SchedulerState.objects.filter(last_tick_at__gte=now - active_within).order_by(
            "-last_tick_at"
        )
    )
