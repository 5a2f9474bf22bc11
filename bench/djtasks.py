"""The Django tasks of the Django Tasks benchmark (``bench/django_tasks_throughput.py``).

Declared with the framework's own ``@task``: the settings module decides which backend they
run on (``settings_djtasks``: Duecourse's; ``settings_tasksdb``: django-tasks-db's;
``settings_ox``: django-ox's; ``settings_threadmill``: threadmill's), so every side enqueues
the very same functions.
"""

from __future__ import annotations

from sleepbody import sleep_noting

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
    return sleep_noting(seconds)
