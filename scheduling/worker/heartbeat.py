"""One keep-alive thread per worker process.

Every process that runs executions (a prefork child, or the worker itself with the solo and
threads pools) keeps the set of executions it is running, and one daemon thread refreshes their
``last_heartbeat_at`` (and their jobs' ``last_keepalive_at``) every ``HEARTBEAT_INTERVAL``
seconds in a single statement, whatever the number of tasks. The heartbeat is per process, not
per worker: a killed pool child stops beating even while its parent stays healthy, so the
reaper finds exactly the executions that died with it.

Each beat renews the leases of the runs it names (docs/architecture.md, *Never two bodies at
once*). The process remembers, on its own monotonic clock, when it sent the last renewal the
database accepted for each running body. A second daemon thread, the fence, watches those
times: a body whose lease went unrenewed for ``FENCE_AT`` times ``STALE_AFTER`` is stopped with
``Fenced`` raised in its thread, and a process whose body is still running halfway from there to
the full lease is ended (a kernel timer, so a body that holds the interpreter cannot delay it).
The reaper acts only after the full lease, judged on the database's clock, so the body has
stopped before another worker may start the execution. A body that has returned is no longer
fenced: its outcome waits for the database as before (``runtime.write_until_done``).

The heartbeat's own connection has a connect timeout, a statement timeout and TCP keepalives
with a user timeout, so a beat on a dead link fails within seconds instead of hanging.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection

from scheduling import attempts, conf, liveness
from scheduling.errors import Fenced

logger = logging.getLogger("scheduling")

#: The signal that raises ``Fenced`` in a body running in the process's main thread: billiard's
#: soft time limit signal, whose handler ours hands every signal we did not send ourselves.
FENCE_SIGNAL = signal.SIGUSR1
#: The exit status of a process ended because a fenced body did not stop.
FENCED_EXIT = 70


_limits: tuple[int, tuple[float, float]] | None = None


def fence_limits() -> tuple[float, float]:
    """Seconds without renewal after which a body is fenced, and its process ended.

    Asked several times per task; read from the settings again only when they were replaced
    (``override_settings`` swaps the object behind ``django.conf.settings``).
    """
    global _limits
    key = id(getattr(settings, "_wrapped", settings))
    if _limits is None or _limits[0] != key:
        lease = float(conf.get("STALE_AFTER"))
        fence_at = min(float(conf.get("FENCE_AT")), 0.95)
        _limits = (key, (fence_at * lease, (1 + fence_at) / 2 * lease))
    return _limits[1]


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
    if connection.vendor != "postgresql":
        return
    seconds = math.ceil(liveness_timeout())
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


@dataclass
class Lease:
    """A running body's lease: when its last accepted renewal was sent, and its thread."""

    renewed_at: float
    thread_id: int
    fenced: bool = False


_fence_message: str | None = None
_previous_handler: Any = None


def _on_fence_signal(signum: int, frame: FrameType | None) -> None:
    global _fence_message
    message, _fence_message = _fence_message, None
    if message is not None:
        raise Fenced(message)
    if callable(_previous_handler):
        _previous_handler(signum, frame)


def _install_fence_handler() -> bool:
    """Make the main thread's fence signal ours (chained to the one before); True if it is."""
    global _previous_handler
    if threading.current_thread() is not threading.main_thread():
        return signal.getsignal(FENCE_SIGNAL) is _on_fence_signal
    current = signal.getsignal(FENCE_SIGNAL)
    if current is not _on_fence_signal:
        _previous_handler = current
        signal.signal(FENCE_SIGNAL, _on_fence_signal)
    return True


def _interrupt(thread_id: int, message: str) -> None:
    """Raise ``Fenced`` in the thread running a body (a signal interrupts a blocking call)."""
    global _fence_message
    main = threading.main_thread().ident
    if thread_id == main and signal.getsignal(FENCE_SIGNAL) is _on_fence_signal:
        _fence_message = message
        signal.pthread_kill(thread_id, FENCE_SIGNAL)
    else:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread_id), ctypes.py_object(Fenced)
        )


class HeartbeatThread:
    """The executions this process runs, the leases of their bodies, and the two threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._running: set[int] = set()
        self._leases: dict[int, Lease] = {}
        self._starts: dict[int, tuple[attempts.Started, str]] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._fence: threading.Thread | None = None
        self._kernel_timer = False
        self._armed = False
        self._pid = os.getpid()

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
        interruptible = _install_fence_handler() if lease_from is not None else False
        with self._lock:
            self._reset_after_fork()
            self._running.add(execution_id)
            if started is not None:
                self._starts[execution_id] = (started, worker)
            if lease_from is not None:
                self._leases[execution_id] = Lease(
                    renewed_at=lease_from, thread_id=threading.get_ident()
                )
                if not interruptible:
                    logger.debug("execution.fence_by_async_exception execution=%s", execution_id)
                self._kernel_timer = signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
                # No wake-up for the fence thread: a new lease ends later than any it already
                # watches, and it looks again well within a lease (``_watch``), so a task
                # costs no thread switch here.
                self._arm_locked()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="duecourse-heartbeat", daemon=True
                )
                self._thread.start()
            if lease_from is not None and (self._fence is None or not self._fence.is_alive()):
                self._fence = threading.Thread(
                    target=self._watch, name="duecourse-fence", daemon=True
                )
                self._fence.start()

    def body_ended(self, execution_id: int) -> Lease | None:
        """The body returned or raised: nothing left to fence (the run is still beaten for)."""
        with self._lock:
            lease = self._leases.pop(execution_id, None)
            self._arm_locked()
        return lease

    def untrack(self, execution_id: int) -> None:
        with self._lock:
            self._running.discard(execution_id)
            self._starts.pop(execution_id, None)
            if self._leases.pop(execution_id, None) is not None:
                self._arm_locked()

    def running(self) -> list[int]:
        with self._lock:
            return sorted(self._running)

    def _reset_after_fork(self) -> None:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._running = set()
            self._leases = {}
            self._starts = {}
            self._thread = None
            self._fence = None
            self._armed = False  # a forked child starts with no interval timer
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
        self._renewed(renewed, sent, lost)
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

    def _renewed(self, renewed: set[int], sent: float, lost: set[int]) -> None:
        soft, _ = fence_limits()
        with self._lock:
            for execution_id, lease in self._leases.items():
                if execution_id in lost:
                    # Fence now, and end the process after the usual grace if it goes on.
                    lease.renewed_at = min(lease.renewed_at, time.monotonic() - soft)
                elif execution_id in renewed:
                    lease.renewed_at = max(lease.renewed_at, sent)
            self._arm_locked()
            if lost & self._leases.keys():
                self._changed.notify_all()  # a lost run's body is fenced now, not on the next look

    def _arm_locked(self) -> None:
        """Point the kernel's timer at the earliest hard deadline (none: disarmed)."""
        if not self._kernel_timer:
            return
        if not self._leases:
            if self._armed:
                signal.setitimer(signal.ITIMER_REAL, 0)
                self._armed = False
            return
        _, hard = fence_limits()
        deadline = min(lease.renewed_at for lease in self._leases.values()) + hard
        signal.setitimer(signal.ITIMER_REAL, max(0.001, deadline - time.monotonic()))
        self._armed = True

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

    def _watch(self) -> None:
        """The fence: stop bodies whose lease went unrenewed, end the process if they go on."""
        pid = os.getpid()
        while True:
            soft, hard = fence_limits()
            to_fence: list[tuple[int, Lease, float]] = []
            overdue: list[tuple[int, float]] = []
            with self._lock:
                if self._pid != pid:
                    return
                now = time.monotonic()
                # Nobody wakes this thread for a new lease: it looks again at least this often,
                # well before any new lease can reach its fence point.
                wait = min(1.0, soft / 2)
                for execution_id, lease in self._leases.items():
                    unrenewed = now - lease.renewed_at
                    if unrenewed >= hard:
                        overdue.append((execution_id, unrenewed))
                    elif unrenewed >= soft and not lease.fenced:
                        lease.fenced = True
                        to_fence.append((execution_id, lease, unrenewed))
                    limit = hard if lease.fenced else soft
                    wait = min(wait, max(0.01, limit - unrenewed))
            for execution_id, lease, unrenewed in to_fence:
                logger.error(
                    "execution.fenced execution=%s unrenewed=%.1fs: the lease could not be "
                    "renewed; stopping the body",
                    execution_id,
                    unrenewed,
                )
                _interrupt(
                    lease.thread_id,
                    f"execution {execution_id}: lease not renewed for {unrenewed:.1f}s "
                    f"(fenced at {soft:g}s of STALE_AFTER)",
                )
            if overdue:
                for execution_id, unrenewed in overdue:
                    logger.critical(
                        "execution.fence_exit execution=%s unrenewed=%.1fs: the body did not "
                        "stop; ending the process",
                        execution_id,
                        unrenewed,
                    )
                os._exit(FENCED_EXIT)
            with self._lock:
                if self._pid == pid:
                    self._changed.wait(wait)


heartbeat_thread = HeartbeatThread()
