"""Settings for Duecourse's side of the Django Tasks benchmark: the project's settings, whose
TASKS backend is Duecourse's, with the benchmark's queue allowed and its tasks imported by
the workers."""

import os

from config.settings import *  # noqa: F403

TASKS = {
    "default": {
        "BACKEND": "scheduling.tasks_backend.DuecourseTaskBackend",
        "QUEUES": ["default", os.environ.get("BENCH_DJ_QUEUE", "bench")],
    }
}
CELERY_IMPORTS = ["djtasks"]
