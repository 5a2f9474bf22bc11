"""What a running task is told about its run: the ``RunContext`` handed to domain code.

Domain code never sees the ledger's ORM rows or Celery's task object; it gets this small value
with the identifiers it may log, the checkpoint the last attempt saved, and three verbs. The
worker side builds it and supplies the writes, so this module depends on nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

_UNCHANGED: Any = object()


@dataclass
class RunContext:
    """One attempt of one occurrence, as its runner sees it.

    ``scheduled_for`` is the occurrence's nominal due time (what a per-run history records as
    the batch's start time), the same on every attempt; ``attempt`` counts from 1.
    ``checkpoint`` is what the previous
    attempt saved (None on the first), so a retry resumes after the last step it recorded.
    """

    execution_id: int
    job_id: int | None
    scheduled_for: datetime
    attempt: int
    checkpoint: Any = None
    _save: Callable[[int, Any], None] = field(default=lambda _id, _value: None, repr=False)
    _keep_alive: Callable[[int], None] = field(default=lambda _id: None, repr=False)
    _report: Callable[[int, int, str], None] = field(
        default=lambda _id, _count, _detail: None, repr=False
    )

    def save_checkpoint(self, value: Any) -> None:
        """Persist progress now (JSON), so a retried attempt resumes after the last step done."""
        self._save(self.execution_id, value)
        self.checkpoint = value

    def progress(self, checkpoint: Any = _UNCHANGED) -> None:
        """Report that the run is alive (and, if given, save the checkpoint in the same call).

        A long step that calls this every few seconds is never mistaken for a dead worker, and
        the admin and the command line show its last heartbeat.
        """
        if checkpoint is not _UNCHANGED:
            self.save_checkpoint(checkpoint)
        self._keep_alive(self.execution_id)

    def report_failures(self, count: int, detail: str = "") -> None:
        """Record that ``count`` single items of this run failed (a renewal declined, a
        message not delivered), with what went wrong, in a few words.

        The run itself may still complete: these are failures *inside* it, which the dashboard,
        ``/metrics`` and ``manage.py executions`` count beside failed runs. Counts add up over
        the calls and the attempts of one occurrence; ``detail`` replaces the last one given.
        A count of zero or less records nothing.
        """
        if count > 0:
            self._report(self.execution_id, int(count), detail)
