"""The heartbeat: one keep-alive thread per worker process.

Every process that runs executions (a prefork child, or the worker itself with the solo and
threads pools) keeps the set of executions it is running, and one daemon thread refreshes their
``last_heartbeat_at`` (and their jobs' ``last_keepalive_at``) every ``HEARTBEAT_INTERVAL``
seconds in a single statement, whatever the number of tasks. The heartbeat is per process, not
per worker: a killed pool child stops beating even while its parent stays healthy, so the
reaper finds exactly the executions that died with it.

Each beat renews the leases of the runs it names and tells the process's lease fence
(``scheduling.worker.fence``) which renewals the database accepted; a run it names that is no
longer RUNNING for this process (reaped, cancelled) is fenced at once, unless the database's
crash recovery undid a start this process made, which is written again.

The heartbeat's own connection has a connect timeout, a statement timeout and TCP keepalives
with a user timeout, so a beat on a dead link fails within seconds instead of hanging.

Usage, from the worker's task runtime (``scheduling.worker.runtime``)::

    heartbeat_thread.track(execution_id, lease_from=sent, started=started, worker=hostname)
    heartbeat_thread.body_ended(execution_id)  # the body returned: no fence, still beaten for
    heartbeat_thread.untrack(execution_id)     # the outcome is written
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time

from django.db import close_old_connections, connection

from scheduling import conf
from scheduling.ledger.engines import engine
from scheduling.stages import attempts, liveness
from scheduling.worker.fence import Fence, Lease, fence_limits

logger = logging.getLogger("scheduling")


def liveness_timeout() -> float:
    """How long one heartbeat may take on a dead link before it fails (seconds, at least 2)."""
    soft, _ = fence_limits()
    return max(2.0, min(float(conf.get("HEARTBEAT_INTERVAL")), soft / 3))


def bound_liveness_connection() -> None:
    """Give this thread's database connection timeouts on every layer (PostgreSQL only).

    The settings dictionary is replaced on this thread's connection alone; the host's settings
    and the task's own connection keep theirs. A statement timeout is set per beat
    (``record_heartbeat``), which a pooler in transaction mode also accepts.
    """
    engine().bound_connection(math.ceil(liveness_timeout()))


class HeartbeatThread:
    """The executions this process runs, the thread that beats for them, and their fence."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[int] = set()
        self._starts: dict[int, tuple[attempts.Started, str]] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self.fence = Fence()

    def track(
        self,
        execution_id: int,
        *,
        lease_from: float | None = None,
        started: attempts.Started | None = None,
        worker: str = "",
    ) -> None:
        """Beat for ``execution_id``; with ``lease_from``, also fence its body.

        ``lease_from`` is the monotonic time the start was sent (the lease's first renewal);
        the body runs in the calling thread. ``started`` is the start this process made, which a
        beat writes again if the database's crash recovery undid it (``attempts.restore_start``).
        """
        with self._lock:
            self._reset_after_fork()
            self._running.add(execution_id)
            if started is not None:
                self._starts[execution_id] = (started, worker)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="duecourse-heartbeat", daemon=True
                )
                self._thread.start()
        if lease_from is not None:
            self.fence.guard(execution_id, renewed_at=lease_from)

    def body_ended(self, execution_id: int) -> Lease | None:
        """The body returned or raised: nothing left to fence (the run is still beaten for)."""
        return self.fence.release(execution_id)

    def untrack(self, execution_id: int) -> None:
        with self._lock:
            self._running.discard(execution_id)
            self._starts.pop(execution_id, None)
        self.fence.release(execution_id)

    def running(self) -> list[int]:
        with self._lock:
            return sorted(self._running)

    def _reset_after_fork(self) -> None:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._running = set()
            self._starts = {}
            self._thread = None
            self._wake = threading.Event()

    def beat_once(self) -> int:
        ids = self.running()
        if not ids:
            return 0
        close_old_connections()
        sent = time.monotonic()
        changed = liveness.record_heartbeat(execution_ids=ids, statement_timeout=liveness_timeout())
        renewed, lost = set(ids), set()
        if changed < len(ids):
            # Fewer runs renewed than named: one ended meanwhile, or was taken from this
            # process (reaped, cancelled), or a crash recovery undid its start, which is
            # written again. A body whose run is no longer RUNNING must stop.
            renewed, lost = liveness.running_and_taken(execution_ids=ids)
            restored = {execution_id for execution_id in lost if self._restore(execution_id)}
            renewed, lost = renewed | restored, lost - restored
        self.fence.renewed(renewed, sent=sent, lost=lost)
        return changed

    def _restore(self, execution_id: int) -> bool:
        with self._lock:
            start = self._starts.get(execution_id)
        if start is None:
            return False
        started, worker = start
        return attempts.restore_start(
            execution_id=execution_id, started=started, worker=worker, pid=os.getpid()
        )

    def _run(self) -> None:
        wake = self._wake
        bound_liveness_connection()
        while True:
            wake.wait(conf.get("HEARTBEAT_INTERVAL"))
            if self._pid != os.getpid():
                return
            try:
                self.beat_once()
            except Exception:
                logger.exception("heartbeat.failed pid=%s", os.getpid())
                connection.close()


heartbeat_thread = HeartbeatThread()
