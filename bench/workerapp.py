"""The Celery app the benchmark workers run: the project's app plus one bare task.

``celery -A workerapp worker`` (with ``bench/`` on PYTHONPATH) serves both sides of the worker
throughput comparison from one and the same app and configuration, so the only difference
between them is whether the task records its execution history (``scheduling.diagnostics.noop``
is a ScheduledTask; ``bench.bare_noop`` is a plain ``@app.task``).
"""

from __future__ import annotations

from typing import Any

from sleepbody import sleep_noting

from config.celery import app

__all__ = ["app", "bare_noop", "bare_sleepy"]


@app.task(name="bench.bare_noop", acks_late=True)
def bare_noop(*args: Any, **kwargs: Any) -> str:
    """Return at once: the cost of a trivial acks_late task with no history at all."""
    return "ok"


@app.task(name="bench.bare_sleepy", acks_late=True)
def bare_sleepy(seconds: float) -> str:
    """For the crash scenario: note the body's start and end, as ``djtasks.sleepy`` does."""
    return sleep_noting(seconds)
