"""Settings for the paced-producer benchmark's Celery side: the project's settings, whose TASKS
backend is Duecourse's, with the benchmark's queue allowed and its tasks imported by the
workers (``paced_tasks``)."""

import os

from config.settings import *  # noqa: F403

TASKS = {
    "default": {
        "BACKEND": "scheduling.tasks_backend.DuecourseTaskBackend",
        "QUEUES": ["default", os.environ.get("BENCH_DJ_QUEUE", "bench")],
    }
}
CELERY_IMPORTS = ["paced_tasks"]
