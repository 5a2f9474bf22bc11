"""``celery -A config beat -S scheduling.beat:DatabaseScheduler``.

A ``celery.beat.Scheduler`` that keeps no schedule in memory: each ``tick`` runs one round of
``scheduling.scheduler.loop.Dispatcher`` against the database and returns the sleep it asks for.
Nothing happens in ``__init__`` (Celery builds a lazy instance just to print its banner);
``setup_schedule``, run once by the real scheduler, reconciles the jobs declared in code; and
``sync`` has nothing to save because every tick commits its own work.
"""

from __future__ import annotations

from typing import Any

from celery.beat import Scheduler
from django.utils import timezone

from scheduling.scheduler.loop import Dispatcher, freeze_startup_heap
from scheduling.stages import reconciliation


class DatabaseScheduler(Scheduler):
    max_interval = 1.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._dispatcher: Dispatcher | None = None
        super().__init__(*args, **kwargs)

    def setup_schedule(self) -> None:
        """Reconcile the jobs declared in code (``beat_schedule``, ``SCHEDULING_JOBS``) with the
        ledger, as django-celery-beat loads ``beat_schedule`` at start
        (``SCHEDULING_SYNC_ON_START``); due work is read from the database on every tick."""
        reconciliation.sync_on_start(now=timezone.now(), app=self.app)

    @property
    def schedule(self) -> dict[str, Any]:
        return {}

    @property
    def dispatcher(self) -> Dispatcher:
        if self._dispatcher is None:
            self._dispatcher = Dispatcher(self.app, max_sleep=self.max_interval)
            freeze_startup_heap()
        return self._dispatcher

    def tick(self, *args: Any, **kwargs: Any) -> float:
        return self.dispatcher.tick()

    def sync(self) -> None:
        """Every tick commits its own work; there is nothing to save."""

    def close(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.close()
        super().close()

    @property
    def info(self) -> str:
        return "    . database scheduler (duecourse): claims due jobs with SKIP LOCKED"
