"""A plain Celery task (not ``@schedulable_task``) that jobs declared in code may run.

Processes started with ``DJANGO_SETTINGS_MODULE=tests.settings_declared`` import it (Celery's
``imports``); each body appends ``tick <label>`` to the file named by
``DUECOURSE_TEST_BODY_LOG``, so a test counts how often each entry ran.
"""

from __future__ import annotations

import os

from celery import shared_task

PLAIN_TASK = "tests.code.tick"


@shared_task(name=PLAIN_TASK)
def tick(label: str) -> str:
    path = os.environ.get("DUECOURSE_TEST_BODY_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(f"tick {label}\n")
    return label
