"""The Django tasks of the Django Tasks benchmark (``bench/django_tasks_throughput.py``).

Declared with the framework's own ``@task``: the settings module decides which backend they
run on (``settings_djtasks``: Duecourse's; ``settings_tasksdb``: django-tasks-db's), so both
sides enqueue the very same functions.
"""

from __future__ import annotations

import os
import time

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task
def noop() -> None:
    """Return at once: the cost of the framework's enqueue and run, with the result kept."""


@task
def sleepy(seconds: float) -> str:
    """For the crash scenario: note the start and the end of the body in a file."""
    with open(os.environ["BENCH_BODY_LOG"], "a") as handle:
        handle.write("start\n")
    time.sleep(seconds)
    with open(os.environ["BENCH_BODY_LOG"], "a") as handle:
        handle.write("end\n")
    return "slept"
