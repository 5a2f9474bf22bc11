"""The project's settings plus the test-only task-table app (``tests.tasktable_app``)."""

import os

# The suite runs on a DATABASE_URL, where the project requires a shared key; the worker and
# scheduler processes it starts inherit this one. (Without DATABASE_URL, the embedded default
# makes its own, as tests/test_embedded.py checks.)
if "DATABASE_URL" in os.environ:
    os.environ.setdefault("SECRET_KEY", "tests-only-" + "k" * 50)

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.tasktable_app"]
