"""How much time working out a timing may take: a deadline checked while it works.

Pure: the callers pass the seconds in (the engine reads ``SCHEDULING_TIMING_BUDGET_MS``); the
timing modules check ``Budget.check`` between steps of bounded size, so no step runs long
without returning control to a check. A budget counts the CPU time of the calling thread
(``time.thread_time``) by default: a busy machine slows every thread down alike, and a rule
that is cheap must not be refused, or its job paused, because other processes took the CPU
while it was worked out. For the same reason the CPU that garbage collection spends in the
thread is left out (``working_time``): a full collection of a large process's heap takes
hundreds of milliseconds, and it is the process's debt, not the rule's, whichever
allocation happened to set it off. A caller that promises an answer within a wall-clock
time (the admin's preview) gives a ``Budget`` over ``time.monotonic`` for its total.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_SECONDS", "Budget", "OverBudget", "working_time"]

#: The budget of one evaluation when the caller names none (the setting's default, 50 ms).
DEFAULT_SECONDS = 0.05


_collections = threading.local()


def _count_collection(phase: str, _info: dict[str, Any]) -> None:
    """A ``gc.callbacks`` entry: adds each collection's CPU time to its thread's tally.

    The collector runs in the thread whose allocation set it off, so ``thread_time`` around it
    is that thread's.
    """
    if phase == "start":
        _collections.started = time.thread_time()
        return
    started = getattr(_collections, "started", None)
    if started is not None:
        _collections.spent = getattr(_collections, "spent", 0.0) + time.thread_time() - started
        _collections.started = None


if _count_collection not in gc.callbacks:
    gc.callbacks.append(_count_collection)


def working_time() -> float:
    """This thread's CPU time less what garbage collection has spent in it: a Budget's clock."""
    return time.thread_time() - getattr(_collections, "spent", 0.0)


class OverBudget(Exception):
    """A timing needed more than its budget; str() is a one-line reason."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"took more than {seconds * 1000:g} ms of CPU")
        self.seconds = seconds


class Budget:
    """A deadline ``seconds`` from now on ``clock``; ``check`` raises OverBudget past it."""

    __slots__ = ("_clock", "deadline", "seconds")

    def __init__(
        self, seconds: float = DEFAULT_SECONDS, *, clock: Callable[[], float] = working_time
    ) -> None:
        self.seconds = seconds
        self._clock = clock
        self.deadline = clock() + seconds

    def check(self) -> None:
        """Raise OverBudget when the deadline has passed."""
        if self._clock() > self.deadline:
            raise OverBudget(self.seconds)

    @property
    def exceeded(self) -> bool:
        return self._clock() > self.deadline
