# As in cookiecutter-django: the Celery app is imported when Django starts, so that
# shared_task (and so @schedulable_task) uses it.
from .celery_app import app as celery_app

__all__ = ("celery_app",)
