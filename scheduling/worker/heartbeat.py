"""One keep-alive thread per worker process.

Every process that runs executions (a prefork child, or the worker itself with the solo and
threads pools) keeps the set of executions it is running, and one daemon thread refreshes their
``last_heartbeat_at`` (and their jobs' ``last_keepalive_at``) every ``HEARTBEAT_INTERVAL``
seconds in a single statement, whatever the number of tasks. The heartbeat is per process, not
per worker: a killed pool child stops beating even while its parent stays healthy, so the
reaper finds exactly the executions that died with it.
"""

from __future__ import annotations

import logging
import os
import threading

from django.db import close_old_connections, connection
from django.utils import timezone

from scheduling import conf, liveness

logger = logging.getLogger("scheduling")


class HeartbeatThread:
    """The executions this process runs, and the daemon thread that beats for them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[int] = set()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def track(self, execution_id: int) -> None:
        with self._lock:
            self._reset_after_fork()
            self._running.add(execution_id)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="duecourse-heartbeat", daemon=True
                )
                self._thread.start()

    def untrack(self, execution_id: int) -> None:
        with self._lock:
            self._running.discard(execution_id)

    def running(self) -> list[int]:
        with self._lock:
            return sorted(self._running)

    def _reset_after_fork(self) -> None:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._running = set()
            self._thread = None
            self._wake = threading.Event()

    def beat_once(self) -> int:
        ids = self.running()
        if not ids:
            return 0
        close_old_connections()
        return liveness.record_heartbeat(execution_ids=ids, now=timezone.now())

    def _run(self) -> None:
        wake = self._wake
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
