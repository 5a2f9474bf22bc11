"""The outbox: messages of committed enqueues, published from a thread of the enqueuing process.

An enqueue commits its row as QUEUED (``scheduling.djangotasks.enqueued``) and hands the message
here. A thread per process publishes whatever has gathered as one batch (one Redis pipeline), so a
burst of enqueues costs a request its insert and commit alone. Nothing here is needed for
correctness: a batch the broker refused is put back to PENDING, and the scheduler publishes it
after ``SCHEDULING_PENDING_GRACE``; a message lost with its process finds its way back through
the republish rule's evidence (a later message on its queue started, or the queue is empty).
At interpreter exit the outbox is flushed for a few seconds, so a management command or a
script that enqueues and returns has its messages sent; a Celery pool process that enqueued
from a task flushes it before it exits (``worker_process_shutdown``), since it leaves by
``os._exit`` and runs no exit hooks.

Usage, from the backend once the enqueue's transaction commits::

    transaction.on_commit(lambda: outbox.put(bell))  # bell: the run's Doorbell
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time

from celery.signals import worker_process_shutdown
from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from scheduling.celeryapp import celery_app
from scheduling.messages.doorbell import Doorbell
from scheduling.scheduler.publisher import Publisher
from scheduling.stages.publishing import hand_to_scheduler

logger = logging.getLogger("scheduling")

BATCH = 500
EXIT_FLUSH = 5.0


class Outbox:
    """One publishing thread per process (made again after a fork); see the module docstring."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Doorbell] = queue.Queue()
        self._lock = threading.Lock()
        self._pid: int | None = None
        #: Messages handed over and not yet dealt with, and the condition that says when none
        #: are: ``flush`` waits on it in the calling thread, because Python 3.12 and later
        #: refuse a new thread at interpreter shutdown, which is when ``flush`` matters most.
        self._pending = 0
        self._settled = threading.Condition()

    def put(self, bell: Doorbell) -> None:
        if self._pid != os.getpid():
            self._start()
        with self._settled:
            self._pending += 1
        self._queue.put(bell)

    def flush(self, timeout: float) -> bool:
        """Wait until every message handed over has been dealt with; False at the deadline."""
        if self._pid != os.getpid():
            return True  # nothing was handed over in this process
        deadline = time.monotonic() + timeout
        with self._settled:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._settled.wait(left)
        return True

    def _start(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                return
            self._queue = queue.Queue()  # a forked child does not inherit its parent's backlog
            with self._settled:
                self._pending = 0
            self._pid = os.getpid()
            threading.Thread(target=self._run, name="duecourse-outbox", daemon=True).start()
            atexit.register(self.flush, EXIT_FLUSH)

    def _run(self) -> None:
        publisher: Publisher | None = None
        made_for: tuple[str, str] | None = None
        while True:
            batch = [self._queue.get()]
            # What has gathered goes in one pipeline, with no wait for more: a burst gathers
            # on its own while the previous batch is being published, and a lone message
            # goes at once (a wait of a few milliseconds here was most of a run's latency
            # from its commit to its start on an idle machine).
            while len(batch) < BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                # A new publisher when the app's broker settings changed (a test's key prefix).
                conf = celery_app().conf
                wanted = (str(conf.broker_url), repr(conf.broker_transport_options))
                if publisher is None or wanted != made_for:
                    if publisher is not None:
                        publisher.close()
                    publisher, made_for = Publisher(celery_app()), wanted
                self._publish(publisher, batch)
            except Exception as exc:
                # Still QUEUED without a message: the republish rule finds them.
                logger.warning("outbox.publish_failed executions=%s error=%r", len(batch), exc)
            finally:
                with self._settled:
                    self._pending -= len(batch)
                    self._settled.notify_all()

    @staticmethod
    def _publish(publisher: Publisher, batch: list[Doorbell]) -> None:
        done = set(publisher.publish(batch))
        failed = [bell.execution_id for bell in batch if bell.execution_id not in done]
        if not failed:
            return
        close_old_connections()
        try:
            hand_to_scheduler(execution_ids=failed, now=timezone.now())
        except DatabaseError as exc:
            # Still QUEUED without a message: the republish rule finds them by its evidence.
            logger.warning("outbox.handover_failed executions=%s error=%r", len(failed), exc)


outbox = Outbox()


@worker_process_shutdown.connect(weak=False, dispatch_uid="duecourse:outbox")
def _flush_before_the_pool_process_exits(**_: object) -> None:
    outbox.flush(EXIT_FLUSH)
