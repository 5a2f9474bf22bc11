"""Where ``TASKS = {"default": {"BACKEND": "scheduling.tasks_backend.DuecourseTaskBackend"}}``
finds the backend: the path projects already name in their settings. The backend itself lives
with the rest of the Tasks framework's side in ``scheduling.djangotasks``."""

from scheduling.djangotasks.backend import DuecourseTaskBackend

__all__ = ["DuecourseTaskBackend"]
