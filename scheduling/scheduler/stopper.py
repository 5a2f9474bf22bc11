"""The stopper: bodies of runs a ``cancel_other`` claim cancelled, stopped through Celery.

The claim has already recorded each run as CANCELLED (``stages.overlaps``); this only makes
its body stop now rather than at its end. One broadcast per batch:
``control.revoke(ids, terminate=True, signal=STOP_SIGNAL)``. Every worker adds the ids to its
revoked set (a message not yet started is dropped), and the one running a body sends the
signal to the pool process that runs it.

``STOP_SIGNAL`` is ``SIGUSR1``, the signal of a soft time limit: in the pool process it raises
``SoftTimeLimitExceeded`` inside the body, which can catch it and clean up (close a file, roll
back its own work) like at any soft time limit. ``SIGTERM``, revoke's default, ends a prefork
pool process at once (Celery restores its default action there), with no ``finally`` run.
A body that catches the exception and goes on anyway is stopped by the lease fence: its
heartbeat finds the run taken (``worker.fence``). Whatever it does, its end is not written
over the cancellation (every end is a compare-and-set from RUNNING).

A broker that is down loses only the early stop: the run stays cancelled in the ledger.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger("scheduling")

#: The signal a cancelled body gets: Celery's soft time limit, an exception it can handle.
STOP_SIGNAL = "SIGUSR1"


def stop_bodies(app: Any, task_ids: Sequence[str]) -> bool:
    """Ask every worker to stop these messages' bodies; False when the broker refused."""
    if not task_ids:
        return True
    try:
        app.control.revoke(list(task_ids), terminate=True, signal=STOP_SIGNAL)
    except Exception:
        logger.exception("execution.stop_failed count=%s", len(task_ids))
        return False
    logger.info("execution.stopped count=%s task_ids=%s", len(task_ids), ",".join(task_ids))
    return True
