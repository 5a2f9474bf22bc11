"""How an error is written into the history: short, with the innermost frames."""

from __future__ import annotations

import traceback
from typing import Any

MAX_ERROR = 4000


def format_error(exc: BaseException | None, tb: Any = None, *, limit: int = 6) -> str:
    """``Class: message`` and the innermost frames of the traceback, short enough to read."""
    if exc is None:
        return ""
    head = f"{type(exc).__name__}: {exc}".strip()
    if tb is None:
        tb = exc.__traceback__
    if tb is None:
        return head
    if isinstance(tb, str):
        # Celery's main process reports a lost pool process (WorkerLostError) with the
        # traceback already formatted by billiard: keep its last lines, as for frames.
        frames = "\n".join(tb.strip().splitlines()[-2 * limit :])
        return f"{head}\n{frames}"[:MAX_ERROR]
    frames = "".join(traceback.format_tb(tb)[-limit:])
    return f"{head}\n{frames}"[:MAX_ERROR]
