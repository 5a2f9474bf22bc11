"""A throttle for the scheduler's periodic duties: true at most once per so many seconds.

The tick runs every second or so; the duties beside it (the history's periods, the chart's
settled hours) need a look only every few minutes. The first look is at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Every:
    """``due()`` is true at most once per ``seconds`` of ``clock``, the first time at once."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self._next = 0.0

    def due(self) -> bool:
        if self.clock() < self._next:
            return False
        self._next = self.clock() + self.seconds
        return True
