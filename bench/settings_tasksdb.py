"""Settings for django-tasks-db's side of the Django Tasks benchmark: the project's settings
with django-tasks-db's backend (its own table, run by its own ``db_worker``)."""

import os

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]
TASKS = {
    "default": {
        "BACKEND": "django_tasks_db.DatabaseBackend",
        "QUEUES": ["default", os.environ.get("BENCH_DJ_QUEUE", "bench")],
    }
}
