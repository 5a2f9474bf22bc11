"""The fault campaign's task bodies, and the log they keep that the engine never writes.

Each body appends to a file of its own host and process (``FAULT_BODY_LOG``/``<host>-<pid>``)
one line when it starts, one every quarter second while it runs and one when it returns:

    S <run> <attempt> <host> <wall> <skew>     (started)
    T <run> <attempt> <host> <wall> <skew>     (still running)
    E <run> <attempt> <host> <wall> <skew>     (returned: its work is done)
    F <run> <attempt> <host> <wall> <skew>     (raised on purpose: a retry must follow)

``<run>`` is ``x<execution id>`` for a scheduled occurrence and ``d<result id>`` for a Django
task. ``<wall>`` is the host's clock, which the nemesis may have skewed by ``<skew>`` seconds
(libfaketime); the checker takes ``wall - skew`` as the machine's time. The lines are short
writes to a file opened for appending, so the lines of two processes never interleave. A
body killed (or frozen) mid-run simply stops writing: its last line bounds when it last ran.
"""

from __future__ import annotations

import os
import time
from typing import Any

try:
    from django.tasks import task
except ImportError:  # Django 5.2 with the backport
    from django_tasks import task

from scheduling.api import task_options
from scheduling.worker.taskbase import schedulable_task

TICK = 0.25
HOST = os.environ.get("FAULT_HOST", "local")
SKEW = float(os.environ.get("FAULT_SKEW", "0") or 0)


def _note(kind: str, run: str, attempt: int) -> None:
    folder = os.environ["FAULT_BODY_LOG"]
    line = f"{kind} {run} {attempt} {HOST} {time.time():.3f} {SKEW:g}\n"
    fd = os.open(f"{folder}/{HOST}-{os.getpid()}", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _work(run: str, attempt: int, seconds: float, fail: bool) -> None:
    _note("S", run, attempt)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(TICK, left))
        _note("T", run, attempt)
    if fail:
        _note("F", run, attempt)
        raise RuntimeError(f"{run}: attempt {attempt} fails on purpose")
    _note("E", run, attempt)


@schedulable_task(name="faults.body", bind=True)
def body(self: Any, seconds: float, fail_first: bool = False) -> float:
    """A scheduled occurrence's work: ``seconds`` of ticking; a ``fail_first`` job's first
    attempt raises after its ticks, so its retry policy is exercised on every occurrence."""
    attempt = int(getattr(self.request, "duecourse_attempt", 0) or 0)
    _work(f"x{self.execution_id}", attempt, float(seconds), fail_first and attempt == 1)
    return float(seconds)


@task_options(max_retries=3, timeout=120)
@task(takes_context=True)
def produced(context: Any, n: int, seconds: float) -> int:
    """A Django task run from the producer's steady stream."""
    _work(f"d{context.task_result.id}", int(context.attempt), float(seconds), False)
    return n
