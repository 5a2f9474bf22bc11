"""A task only the "new release" declares, for the rolling-deploy specifications.

Processes started with ``DJANGO_SETTINGS_MODULE=tests.settings_new_release`` import this module
(Celery's ``imports`` setting); those of ``tests.settings`` do not, so the two sides of a
rolling deploy run side by side with task registries that differ by this one task. Each body
appends ``greet <label>`` to the file named by ``DUECOURSE_TEST_BODY_LOG``, so a test counts
how often each occurrence ran.
"""

from __future__ import annotations

import os

from scheduling.api import schedulable_task

NEW_TASK = "tests.new_release.greet"


@schedulable_task(name=NEW_TASK)
def greet(label: str) -> str:
    path = os.environ.get("DUECOURSE_TEST_BODY_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(f"greet {label}\n")
    return label
