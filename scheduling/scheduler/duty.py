"""What every duty beside the scheduler's tick shares: its interval, and failing softly.

The tick runs every second or so; the duties beside it need a look only every few minutes.
Each duty is a ``Duty`` in a file of its own (``periods.py``, ``hours.py``) that names its
``interval`` and what it does in ``run``; the loop holds the list (``loop.DUTIES``) and after
each tick calls ``maybe`` on every one. A duty runs at once in a new scheduler, then at most
once per ``interval`` seconds of its clock. A database error is logged under the duty's
``event`` and tried again at the next interval: a duty never fails a tick, and nothing the
tick does waits on one.

A new duty: a subclass in a file of its own with ``interval``, ``event``, ``run`` and ``idle``
(and ``failed`` if a failure should reset something), its interval and usage in its module
docstring, and one entry in ``loop.DUTIES``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import ClassVar, Generic, TypeVar

from django.db import DatabaseError

logger = logging.getLogger("scheduling")

T = TypeVar("T")


class Duty(Generic[T]):
    """``maybe(now)`` runs ``run(now)`` at most once per ``interval`` seconds of ``clock``,
    the first time at once, and answers ``idle`` when it is not yet time or the run failed."""

    #: Seconds between two runs.
    interval: ClassVar[float]
    #: The log event of a failed run.
    event: ClassVar[str]

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._next = 0.0

    def due(self) -> bool:
        if self.clock() < self._next:
            return False
        self._next = self.clock() + self.interval
        return True

    def maybe(self, now: datetime) -> T:
        if not self.due():
            return self.idle()
        try:
            return self.run(now)
        except DatabaseError as exc:
            self.failed(exc)
            logger.warning("%s error=%s", self.event, str(exc).splitlines()[0])
            return self.idle()

    def run(self, now: datetime) -> T:
        raise NotImplementedError

    def idle(self) -> T:
        raise NotImplementedError

    def failed(self, exc: DatabaseError) -> None:
        """What a duty forgets after a failed run (nothing, unless it says otherwise)."""
