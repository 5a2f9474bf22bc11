"""The project's settings plus the test-only task-table app (``tests.tasktable_app``)."""

import os

# The suite runs on a DATABASE_URL, where the project requires a shared key; the worker and
# scheduler processes it starts inherit this one.
os.environ.setdefault("SECRET_KEY", "tests-only-" + "k" * 50)

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.tasktable_app"]
