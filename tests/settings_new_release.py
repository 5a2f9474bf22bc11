"""The test settings of the "new release" in the rolling-deploy specifications: the same
project, with one more task module imported by its workers and schedulers."""

from tests.settings import *  # noqa: F403

CELERY_IMPORTS = ["tests.scheduling.new_release_tasks"]
