"""The scheduler loop: claim, publish, recover, reap; then say how long to sleep.

``Dispatcher.tick`` is the whole loop body. ``scheduling.beat.DatabaseScheduler`` runs it under
``celery beat`` and ``manage.py runscheduler`` runs it on its own; several may run at once on
PostgreSQL because every claim is a ``SELECT ... FOR UPDATE SKIP LOCKED`` that commits before
anything is published.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, InterfaceError, close_old_connections, connection
from django.utils import timezone

from scheduling import conf
from scheduling.ledger.engines import engine
from scheduling.messages.doorbell import Doorbell
from scheduling.scheduler.duty import Duty
from scheduling.scheduler.hours import HourKeeper
from scheduling.scheduler.lanes import Lanes
from scheduling.scheduler.periods import PeriodKeeper
from scheduling.scheduler.publisher import Publisher
from scheduling.scheduler.stopper import stop_bodies
from scheduling.stages import attempts, claims, limits, liveness, publishing, selectors, ticks

logger = logging.getLogger("scheduling")

#: A context manager factory called with the name of each step of a tick.
StepTimer = Callable[[str], AbstractContextManager[Any]]
#: The steps a ``StepTimer`` sees.
STEPS = ("probe", "claim", "publish", "mark_queued", "reclaim", "release", "reap")

BACKOFF_MAX = 5.0

#: The duties beside the tick, run after each one, each at its own interval (``duty.Duty``).
DUTIES: tuple[type[Duty[Any]], ...] = (PeriodKeeper, HourKeeper)


_heap_frozen = False


def freeze_startup_heap() -> None:
    """Move what a scheduler process holds at its start out of the collector's sight.

    A scheduler lives long and everything it imported at startup (Django, Celery, kombu)
    lives as long; frozen once, those objects stay out of the cyclic collector's full passes,
    which floods of short-lived rows trigger. The processes that run the loop for good call it
    (``runscheduler``, ``scheduling.beat``), once their imports are done; a ``Dispatcher``
    made anywhere else (a test, a benchmark) leaves the collector as it is.
    """
    global _heap_frozen
    if not _heap_frozen:
        gc.freeze()
        _heap_frozen = True


class Dispatcher:
    """One scheduler's loop state: its publisher, its back-off, and when it last reaped."""

    #: Wraps each step of a tick (see ``STEPS``): the instrumentation hook the benchmarks set
    #: on a dispatcher to split a tick's cost; it must be thread-safe (lanes call it).
    timer: StepTimer = nullcontext

    def __init__(
        self,
        app: Any,
        *,
        batch_size: int | None = None,
        max_sleep: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` is the monotonic clock of the reaping hold-off and of the duties (a test
        passes its own)."""
        self.app = app
        self.batch_size = batch_size or conf.get("BATCH_SIZE")
        self.max_sleep = conf.get("MAX_SLEEP") if max_sleep is None else max_sleep
        self.publisher = Publisher(app)
        self._lanes: Lanes | None = None
        self._stats_lock = threading.Lock()
        self._failures = 0
        self._database_lost = False
        # No reaping before this (monotonic) time: see _may_reap.
        self.clock = clock
        self._reap_from = clock() + conf.get("STALE_AFTER")
        self._broker_identity: str | None = None
        self.stats = {"claimed": 0, "published": 0, "republished": 0, "reaped": 0}
        self.duties = [duty(clock) for duty in DUTIES]

    def close(self) -> None:
        if self._lanes is not None:
            self._lanes.close()
            self._lanes = None
        self.publisher.close()

    def tick(self, now: datetime | None = None) -> float:
        """Do one round of work; return how long to sleep before the next.

        ``now`` is for tests with a fixed clock: the reaper then judges staleness on it. Without
        it the reaper reads the database's clock, the one the heartbeats were stamped with.
        """
        started = time.monotonic()
        try:
            close_old_connections()
            sleep = self._tick(now or timezone.now(), database_clock=now is None)
            later = timezone.now()
            for duty in self.duties:
                duty.maybe(later)
            ticks.record_tick(stats=self.stats, seconds=time.monotonic() - started)
        except (DatabaseError, InterfaceError) as exc:
            self._failures += 1
            self._database_lost = True
            delay = self._backoff()
            logger.error("dispatch.database_error error=%r retry_in=%.1fs", exc, delay)
            connection.close()
            return delay
        except Exception:
            # A fault of one tick (a row no check foresaw, a bug) must not end the scheduler:
            # everything a tick does is committed step by step, so the next one starts clean.
            self._failures += 1
            delay = self._backoff()
            logger.exception("dispatch.tick_failed retry_in=%.1fs", delay)
            connection.close()
            return delay
        if sleep is None:
            self._failures += 1
            return self._backoff()
        self._failures = 0
        return sleep

    def _backoff(self) -> float:
        """Sleep after a failed tick: doubling from MAX_SLEEP, at most BACKOFF_MAX seconds.

        Short enough that work due during a broker or database outage goes out soon after it
        ends, long enough that a scheduler facing a dead server does not spin.
        """
        return min(self.max_sleep * 2 ** min(self._failures, 10), BACKOFF_MAX)

    def _tick(self, now: datetime, *, database_clock: bool = True) -> float | None:
        """One round; returns the sleep it asks for, or None when the broker failed.

        One probe statement says which of claim, republish and reap have work, so an idle
        tick costs a single indexed query however many jobs exist.
        """
        self._notice_broker_restart(now)
        with self.timer("probe"):
            probe = selectors.scheduler_probe(
                now=now,
                pending_before=now - timedelta(seconds=conf.get("PENDING_GRACE")),
                queued_before=now - timedelta(seconds=conf.get("REQUEUE_AFTER")),
                stale_before=now - timedelta(seconds=conf.get("STALE_AFTER")),
            )
        self._notice_database_back()
        # The release before the claim: a run waiting for its job's turn or a running slot (a
        # backfilled one, one held by a limit) is older than anything due now, and goes first;
        # claimed first, a job already due again when its run ended would take the turn on
        # every tick and its waiting runs would wait until it caught up.
        released: list[Doorbell] = []
        if probe.waiting:
            with self.timer("release"):
                released = publishing.doorbells_for(
                    execution_ids=limits.release_waiting(now=now, limit=self.batch_size)
                )
            published = self._publish(released, self.publisher)
            self.stats["published"] += published
            if published < len(released):
                return None
        if probe.due and not self._claim_and_publish(now):
            return None
        again: list[Doorbell] = []
        if probe.republish:
            with self.timer("reclaim"):
                again = publishing.reclaim_for_publish(
                    now=now, limit=self.batch_size, queue_depth=self.publisher.queue_depth
                )
            self.stats["republished"] += len(again)
            published = self._publish(again, self.publisher)
            self.stats["published"] += published
            if published < len(again):
                return None
        reaped: list[int] = []
        if probe.stale and self._may_reap():
            with self.timer("reap"):
                reaped = liveness.reap_stale_executions(
                    now=now, stale_after=conf.get("STALE_AFTER"), database_clock=database_clock
                )
            self.stats["reaped"] += len(reaped)
        # Straight on while there was work; rows that are only waiting (a backlog not yet
        # lost, a stale run under the reaping hold-off) do not make the loop spin.
        if probe.due or again or released or reaped:
            return 0.0
        if probe.next_due_at is None:
            return self.max_sleep
        wait = (probe.next_due_at - timezone.now()) / timedelta(seconds=1)
        return max(0.0, min(self.max_sleep, wait))

    def _notice_database_back(self) -> None:
        """After an outage, give workers a full STALE_AFTER before reaping anything.

        Workers lost the database as this scheduler did: their heartbeats stopped for the
        length of the outage, not because they died. Counting staleness from the moment this
        scheduler can read the database again (and from its own start, since it cannot know
        what happened before it) lets every live worker beat again first.
        """
        if self._database_lost:
            self._database_lost = False
            self._reap_from = self.clock() + conf.get("STALE_AFTER")
            logger.warning(
                "dispatch.database_back reaping_resumes_in=%.0fs", conf.get("STALE_AFTER")
            )

    def _may_reap(self) -> bool:
        return self.clock() >= self._reap_from

    def _notice_broker_restart(self, now: datetime) -> None:
        """Re-publish every queued execution at once when the Redis server was restarted.

        A Redis without persistence comes back empty; without this its lost messages would
        wait for REQUEUE_AFTER. Redis names each server start with a new ``run_id``; a changed
        one means its queues may have been emptied. Re-publishing all queued rows is harmless
        when they were not (workers acknowledge duplicates and do nothing).
        """
        identity = self.publisher.broker_identity()
        if identity is None:
            return
        if self._broker_identity is not None and identity != self._broker_identity:
            count = publishing.requeue_queued(now=now)
            logger.warning("dispatch.broker_restarted requeued=%s", count)
        self._broker_identity = identity

    def _claim_and_publish(self, now: datetime) -> bool:
        """Claim and publish due jobs, batch after batch while full batches come back.

        The first batch is claimed and published here. If it was full, a flood is due: the
        rest is claimed by the lanes (``Lanes``) side by side, or in line where lanes cannot
        work: inside a test case's transaction a second connection could not see the new rows,
        and SQLite has a single writer. Claiming stops after MAX_SLEEP so recovery still runs
        between rounds; the tick returns only when every batch it claimed has been published
        and marked.
        """
        deadline = time.monotonic() + max(self.max_sleep, 0.1)
        ok, full = self._claim_round(now, self.publisher, deadline, once=True)
        if ok and full:
            lanes = self._flood_lanes()
            if lanes is None:
                ok, _ = self._claim_round(now, self.publisher, deadline)
            else:
                ok = all(lanes.run(lambda: self._lane_round(now, lanes, deadline)))
        return ok

    def _claim_round(
        self, now: datetime, publisher: Publisher, deadline: float, *, once: bool = False
    ) -> tuple[bool, bool]:
        """Claim a batch, publish it, mark it; again until a short batch, a failure or the
        deadline. Returns whether everything went out, and whether the last batch was full."""
        while True:
            with self.timer("claim"):
                claim = claims.claim_due_jobs(now=now, limit=self.batch_size)
            self._stop_replaced(claim, now)
            done = self._publish(claim.bells, publisher)
            with self._stats_lock:
                self.stats["claimed"] += len(claim.bells)
                self.stats["published"] += done
            full = claim.jobs >= self.batch_size
            if done < len(claim.bells):
                return False, full
            if once or not full or time.monotonic() > deadline:
                return True, full

    def _stop_replaced(self, claim: claims.Claim, now: datetime) -> None:
        """Stop the runs the claim cancelled (``cancel_other``) before their successors go out.

        Runs whose rows were busy during the claim are cancelled now, after its commit.
        """
        stop = list(claim.stop)
        for execution_id, reason in claim.cancel_after.items():
            task_id = attempts.cancel_running(execution_id=execution_id, now=now, reason=reason)
            if task_id is not None:
                stop.append(task_id)
        stop_bodies(self.app, stop)

    def _lane_round(self, now: datetime, lanes: Lanes, deadline: float) -> bool:
        """``_claim_round`` on a lane, which looks after its own database connection."""
        close_old_connections()
        try:
            return self._claim_round(now, lanes.publisher(), deadline)[0]
        except (DatabaseError, InterfaceError):
            connection.close()
            raise

    def _flood_lanes(self) -> Lanes | None:
        count = conf.get("FLOOD_LANES")
        if count < 2 or not engine().parallel_claims or connection.in_atomic_block:
            return None
        if self._lanes is None or self._lanes.count != count:
            if self._lanes is not None:
                self._lanes.close()
            self._lanes = Lanes(self.app, count)
        return self._lanes

    def _publish(self, bells: Sequence[Doorbell], publisher: Publisher) -> int:
        """Publish ``bells`` and mark the ones that reached the broker QUEUED; return those."""
        if not bells:
            return 0
        started = time.monotonic()
        with self.timer("publish"):
            done = publisher.publish(bells)
        with self.timer("mark_queued"):
            publishing.mark_queued(execution_ids=done, now=timezone.now())
        logger.debug(
            "dispatch.published count=%s seconds=%.4f", len(done), time.monotonic() - started
        )
        return len(done)
