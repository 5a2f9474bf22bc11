"""Pacing a run: the task's rate limit, and backing off when the server says "try later".

Pure logic over an injected clock and sleep, so it is tested without waiting. A 4xx reply
(throttling, greylisting) doubles a delay kept before every following message; an accepted
message halves it again. The server's pushback thus slows the whole run down instead of being
counted as failures, and the run speeds up again when the server does.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Pacer:
    def __init__(
        self,
        *,
        rate: float,
        backoff_base: float,
        backoff_max: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.delay = 0.0
        self._clock = clock
        self._sleep = sleep
        self._next = clock()

    def wait(self) -> None:
        """Sleep until the next message may go: the rate's slot, then any backoff delay."""
        now = self._clock()
        pause = max(0.0, self._next - now) + self.delay
        if pause > 0:
            self._sleep(pause)
            now = self._clock()
        self._next = max(self._next + self.interval, now) if self.interval else now

    def accepted(self) -> None:
        self.delay = self.delay / 2 if self.delay > self.backoff_base else 0.0

    def try_later(self) -> None:
        self.delay = min(self.backoff_max, max(self.backoff_base, self.delay * 2))
