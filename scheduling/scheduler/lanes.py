"""Flood lanes: threads that claim and publish side by side while full batches keep coming."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, TypeVar

from django.db import connections

from scheduling.scheduler.publisher import Publisher

logger = logging.getLogger("scheduling")
T = TypeVar("T")


class Lanes:
    """Threads that claim and publish a flood side by side, each on connections of its own.

    A claim spends most of its time waiting for the database, a publish building messages and
    waiting for the broker. Lanes that each claim, publish and mark their own batches keep the
    database, the broker and the interpreter busy at once; ``SKIP LOCKED`` keeps their batches
    apart exactly as it keeps scheduler processes apart, and each batch is committed before its
    messages exist, so a scheduler killed mid-flood leaves only due jobs and PENDING rows.
    """

    def __init__(self, app: Any, count: int) -> None:
        self.app = app
        self.count = count
        self._pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix="duecourse-lane")
        self._local = threading.local()

    def publisher(self) -> Publisher:
        """This lane's own broker connection (kombu connections are not shared by threads)."""
        publisher: Publisher | None = getattr(self._local, "publisher", None)
        if publisher is None:
            publisher = self._local.publisher = Publisher(self.app)
        return publisher

    def run(self, work: Callable[[], T]) -> list[T]:
        """Run ``work`` once per lane, all at once; wait for every one, then re-raise the first
        error, so no lane is still working when the tick moves on."""
        futures = [self._pool.submit(work) for _ in range(self.count)]
        wait(futures)
        return [future.result() for future in futures]

    def close(self) -> None:
        """Close every lane's broker and database connections, then stop the threads."""
        barrier = threading.Barrier(self.count)

        def release() -> None:
            try:
                barrier.wait(timeout=10)  # holds each lane until every lane has one release
            except threading.BrokenBarrierError:
                logger.debug("dispatch.lanes_release_unsynchronised")
            publisher: Publisher | None = getattr(self._local, "publisher", None)
            if publisher is not None:
                publisher.close()
            connections.close_all()

        wait([self._pool.submit(release) for _ in range(self.count)])
        self._pool.shutdown()
