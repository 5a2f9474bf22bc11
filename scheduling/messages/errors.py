"""How an error is written into the history (short, with the innermost frames), and how it
reads back in one line where a list, a panel or a command has room for no more."""

from __future__ import annotations

import re
import traceback
from typing import Any

from billiard.exceptions import SoftTimeLimitExceeded

MAX_ERROR = 4000


class RunCancelled(Exception):
    """A body stopped because its run was cancelled (the next occurrence of a ``cancel_other``
    job, ``scheduler.stopper``): an intended end, not a failure.

    The stop arrives in the body as the soft time limit's exception; ``ScheduledTask`` raises
    this in its place once the ledger shows the run cancelled, with the cancel's reason. It is
    among the task's expected exceptions (``ScheduledTask.throws``), so Celery logs it at INFO
    without a traceback, and the end records nothing over the cancellation.
    """


class Fenced(SoftTimeLimitExceeded):
    """Raised in a running body whose worker could not renew its lease in time.

    The worker lost the database for a part of ``SCHEDULING_STALE_AFTER`` (``FENCE_AT``) and
    so can no longer prove the run is its own: the reaper may hand it to another worker once the
    lease runs out, and the body must be stopped before then. A task with cleanup to do catches
    it (or Celery's ``SoftTimeLimitExceeded``, its base), cleans up quickly and re-raises; a body
    still running halfway from there to the end of the lease is ended with its process. The
    attempt is recorded as ``fenced`` and the execution retried under its job's rules.
    """


class StartHeld(Exception):
    """An execution may not start yet: the database recovered from a crash less than a lease ago.

    A worker's start commits without waiting for its flush (docs/architecture.md, *One flush
    per task*), so a crash can undo the start of a body that is still running. For one lease
    after the recovery only that worker may start an execution made before it (its heartbeat
    or its end restores the start); any other worker hands the message back and tries later.
    """

    def __init__(self, execution_id: int, seconds: float) -> None:
        super().__init__(execution_id, seconds)  # the arguments, so that it pickles
        self.execution_id = execution_id
        self.seconds = seconds

    def __str__(self) -> str:
        return (
            f"execution {self.execution_id} is held for {self.seconds:.1f}s after the "
            "database's crash recovery, so that a start the crash undid can be restored by "
            "its own worker"
        )


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


#: A frame of a Python traceback: ``  File "/srv/app/tasks.py", line 12, in run``.
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')
#: The line Python's own format opens a traceback with.
_TRACEBACK = "Traceback (most recent call last):"


def headline(error: str | None, *, limit: int | None = None) -> str:
    """``error`` as an operator reads it in a list, a panel or a command's line: the
    exception's type and message, ``ValueError: the amount is negative``, on one line.

    A traceback never leads. The history's own form (``format_error``: the exception, then the
    innermost frames) gives its first line; Python's form (``Traceback (most recent call
    last):``, the frames, the exception last) gives the line after its last frame, the
    exception the run ended with. With ``limit``, the line is cut to that many characters at a
    word where one is near, ending in "…". The whole error stays on the execution's page and
    in ``manage.py executions --json``.
    """
    lines = [line for line in (error or "").strip().splitlines() if line.strip()]
    if not lines:
        return ""
    kept = lines[0]
    if kept.strip() == _TRACEBACK:
        frames = [number for number, line in enumerate(lines) if _FRAME.match(line)]
        after = frames[-1] + 1 if frames else 1
        while after < len(lines) and lines[after][:1].isspace():
            after += 1  # the frame's source line and its ^^^^ markers
        kept = lines[after] if after < len(lines) else lines[-1]
    text = " ".join(kept.split())
    if limit is None or len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit * 2 // 3:
        cut = cut[:space]
    return cut.rstrip(" ,;:-") + "…"
