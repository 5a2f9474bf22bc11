"""The project's settings plus the test-only task-table app (``tests.tasktable_app``)."""

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.tasktable_app"]
