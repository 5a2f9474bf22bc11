"""Waiting for what another process writes after the event a test waited for.

A process reports an event in its log after the write it reports: Celery logs a task's
``succeeded`` line after the ``task_success`` receiver has completed the execution's row, the
engine logs ``execution.failed`` after the row is failed. A test that waited for the row reads
such a line only once it is there: ``logged`` polls for it with a deadline.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tests.conftest import wait_for


def matching(text: str, pattern: str) -> list[str]:
    """The lines of ``text`` in which the regular expression ``pattern`` is found."""
    return [line for line in text.splitlines() if re.search(pattern, line)]


def logged(
    read: Callable[[], str], pattern: str, *, count: int = 1, timeout: float, message: str = ""
) -> str:
    """Wait until ``read()`` (a log) has ``count`` lines matching ``pattern``; return that log."""

    def enough() -> str:
        text = read()
        return text if len(matching(text, pattern)) >= count else ""

    return str(
        wait_for(enough, timeout=timeout, message=message or f"{count} line(s) like {pattern!r}")
    )
