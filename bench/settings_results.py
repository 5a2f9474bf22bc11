"""Settings for the django-celery-results sides of the worker benchmark.

The project's settings plus django-celery-results' database backend on the same PostgreSQL,
with ``result_extended`` (task name, arguments and worker in each row, which is what a
per-task history needs). ``BENCH_TRACK_STARTED=1`` also records the STARTED state before the
body runs, the usual way to see running tasks with this backend: one more write per task.
"""

import os

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_celery_results"]
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True
CELERY_TASK_TRACK_STARTED = os.environ.get("BENCH_TRACK_STARTED", "0") == "1"
