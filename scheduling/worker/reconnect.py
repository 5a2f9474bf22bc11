"""A worker survives the close Celery makes of a broker connection it has lost.

When the broker goes away, Celery's consumer (5.7) first ``collect``s the broken connection
and then ``close``s it (``Consumer.on_connection_error_after_connected``), ignoring connection
errors, before it reconnects. With kombu's Redis transport (5.7.0, the same code since kombu
3.0: celery/kombu#582) the second close can raise ``AttributeError: 'NoneType' object has no
attribute 'hostname'``, which is no connection error, so it escapes and the worker stops:

- ``collect`` closes the connection's channels and then detaches its transport
  (``transport.client = None``). When a BRPOP is still in flight on the consumer's channel
  (the error came from elsewhere, an acknowledgement say), reading its reply fails first and
  leaves that channel open; closing the others stops at the first that fails (the control
  channel's fanout queue, on a dead broker), so the consumer's channel stays open, its
  unacknowledged messages not restored;
- ``close`` closes that channel again, and restoring its messages makes a Redis client from
  ``transport.client``, now None.

``mend_close`` keeps kombu's own close, but gives the left-over channel its transport's
client back for the time of the close: the messages are restored as kombu means to (or, the
broker being down, the restore fails with a connection error, which Celery ignores), and the
transport is detached again. ``ReconnectStep`` mends each connection the consumer makes.
"""

from __future__ import annotations

from typing import Any

from celery import bootsteps


def mend_close(connection: Any) -> None:
    """Make ``connection.close`` (the name Celery calls) safe after ``connection.collect()``."""
    release = connection.release

    def close() -> None:
        channel = connection._default_channel
        transport = getattr(channel, "connection", None)
        if connection._transport is not None or transport is None or transport.client is not None:
            release()  # not collected, or no channel left over: kombu's close as it is
            return
        transport.client = connection
        try:
            release()
        finally:
            transport.client = None

    connection.close = close


class ReconnectStep(bootsteps.StartStopStep):
    """A bootstep of the worker's consumer: ``mend_close`` on each connection it makes (it
    starts after ``Connection`` each time a reconnection starts the consumer anew). Added by
    ``scheduling.worker.receivers`` when a worker starts."""

    requires = ("celery.worker.consumer.connection:Connection",)

    def start(self, c: Any) -> None:
        if c.connection is not None:
            mend_close(c.connection)
