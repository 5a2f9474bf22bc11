"""Test settings whose declarations in code come from the environment, for the schedulers
and workers of the declared-schedules specifications.

``DUECOURSE_TEST_DECLARATIONS`` is JSON: ``{"beat": {key: {"task", "every", "args"}},
"jobs": {name: jobs add options}}``; a beat entry's ``every`` (seconds) becomes a
``timedelta``, as a project's ``CELERY_BEAT_SCHEDULE`` would hold it.
"""

import json
import os
from datetime import timedelta

from tests.settings import *  # noqa: F403

CELERY_IMPORTS = ["tests.scheduling.code_tasks"]

_DECLARED = json.loads(os.environ.get("DUECOURSE_TEST_DECLARATIONS") or "{}")
CELERY_BEAT_SCHEDULE = {
    key: {
        "task": entry["task"],
        "schedule": timedelta(seconds=entry["every"]),
        "args": entry.get("args", []),
        # Under the tests' broker visibility timeout (60 s), as every job's must be.
        "options": {"time_limit": 20},
    }
    for key, entry in _DECLARED.get("beat", {}).items()
}
SCHEDULING_JOBS = _DECLARED.get("jobs", {})
