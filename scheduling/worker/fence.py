"""The lease fence: a body whose lease went unrenewed stops before anyone else may start it.

Each heartbeat (``scheduling.worker.heartbeat``) renews the leases of the runs it names, and
tells the fence when it sent the last renewal the database accepted for each running body, on
this process's monotonic clock (docs/architecture.md, *Never two bodies at once*). One daemon
thread per process watches those times:

- a body whose lease went unrenewed for ``FENCE_AT`` times ``STALE_AFTER`` is stopped with
  ``Fenced`` raised in its thread (a signal for the main thread, so a blocking call is
  interrupted; an asynchronous exception for any other thread);
- a process whose body is still running halfway from there to the full lease is ended with
  ``os._exit(FENCED_EXIT)``, and a kernel interval timer (``SIGALRM``, where the process has
  not claimed it) does the same if a body holds the interpreter so the thread cannot run.

The reaper acts only after the full lease, judged on the database's clock, so the body has
stopped before another worker may start the execution. A body that has returned is no longer
fenced: its outcome waits for the database as before (``runtime.write_until_done``).

Usage, from the heartbeat that owns it::

    fence = Fence()
    fence.guard(execution_id, renewed_at=time.monotonic())  # in the thread running the body
    fence.renewed({execution_id}, sent=sent, lost=set())     # after each beat
    fence.release(execution_id)                              # the body returned
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any

from django.conf import settings

from scheduling import conf
from scheduling.messages.errors import Fenced

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


class Fence:
    """The leases of the bodies this process runs, and the thread that watches them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._leases: dict[int, Lease] = {}
        self._thread: threading.Thread | None = None
        self._kernel_timer = False
        self._armed = False
        self._pid = os.getpid()

    def guard(self, execution_id: int, *, renewed_at: float) -> None:
        """Fence the body of ``execution_id``, running in the calling thread.

        ``renewed_at`` is the monotonic time the start was sent (the lease's first renewal).
        """
        interruptible = _install_fence_handler()
        with self._lock:
            self._reset_after_fork()
            self._leases[execution_id] = Lease(
                renewed_at=renewed_at, thread_id=threading.get_ident()
            )
            if not interruptible:
                logger.debug("execution.fence_by_async_exception execution=%s", execution_id)
            self._kernel_timer = signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
            # No wake-up for the watching thread: a new lease ends later than any it already
            # watches, and it looks again well within a lease (``_watch``), so a task costs no
            # thread switch here.
            self._arm_locked()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._watch, name="duecourse-fence", daemon=True
                )
                self._thread.start()

    def release(self, execution_id: int) -> Lease | None:
        """The body returned or raised: nothing left to fence."""
        with self._lock:
            lease = self._leases.pop(execution_id, None)
            if lease is not None:
                self._arm_locked()
        return lease

    def renewed(self, renewed: set[int], *, sent: float, lost: set[int]) -> None:
        """A beat sent at ``sent`` renewed ``renewed``; the runs in ``lost`` are not ours now."""
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

    def _reset_after_fork(self) -> None:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._leases = {}
            self._thread = None
            self._armed = False  # a forked child starts with no interval timer

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
