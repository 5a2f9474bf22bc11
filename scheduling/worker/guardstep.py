"""The worker's bootstep that puts ``guard`` in front of every task and the transports'
guards under the consumer (``scheduling.worker.transports``).
"""

from __future__ import annotations

from typing import Any

from celery import bootsteps

from scheduling.worker.guard import guard
from scheduling.worker.refusals import log_drop, record_drop, unreadable
from scheduling.worker.transports import guard_envelopes, guard_header_tables


class GuardStep(bootsteps.StartStopStep):
    """A bootstep of the worker's consumer: every task's strategy guarded, not only the ledger
    tasks', a body Celery itself cannot decode (protocol 1) counted as a drop, and on Redis an
    envelope kombu cannot decode dropped rather than stopping the worker (``guard_envelopes``),
    and on RabbitMQ a header table py-amqp cannot read refused (``guard_header_tables``).

    It starts after the consumer has made its strategies (``Tasks``), each time it does
    (a reconnection makes them anew), and before the event loop reads the first message.
    Added by ``scheduling.worker.receivers`` when a worker starts.
    """

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, c: Any) -> None:
        worker = str(c.hostname or "")
        for name, strategy in list(c.strategies.items()):
            task = c.app.tasks.get(name)
            if task is not None and not getattr(strategy, "guarded", False):
                c.strategies[name] = guard(strategy, task=task, app=c.app, consumer=c)
        task_consumer = getattr(c, "task_consumer", None)
        guard_envelopes(getattr(task_consumer, "channel", None), worker=worker)
        broker = getattr(c, "connection", None)
        if broker is not None and getattr(broker, "connected", False):
            guard_header_tables(broker.connection, worker=worker)
        celery_on_decode_error = c.on_decode_error
        if getattr(celery_on_decode_error, "guarded", False):
            return

        def on_decode_error(message: Any, exc: BaseException) -> None:
            celery_on_decode_error(message, exc)  # Celery logs it and acknowledges it
            found = unreadable("body", exc)
            headers = message.headers if isinstance(message.headers, dict) else {}
            log_drop(found, task=headers.get("task"), message_id=headers.get("id"), worker=worker)
            record_drop(found, message=message, body=None, worker=worker)

        on_decode_error.guarded = True  # type: ignore[attr-defined]
        c.on_decode_error = on_decode_error
