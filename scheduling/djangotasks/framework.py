"""Django's Tasks framework, from Django itself where it has it, else the ``django-tasks`` backport.

Django 6 ships ``django.tasks``; on Django 5.2 the ``django-tasks`` package (the
``duecourse[tasks]`` extra) provides the same API under ``django_tasks``. Everything in the
engine that speaks the framework's language imports it from here, so that choice is made once,
and the exceptions raised are always the classes of the framework in use: on Django 6 a caller's
``except django.tasks.exceptions.InvalidTask`` catches them, on 5.2 ``except
django_tasks.exceptions.InvalidTaskError`` does. The two spell the invalid-task error
differently (``InvalidTask`` in Django, ``InvalidTaskError`` in the backport); here it is
``InvalidTask`` either way. ``normalize_json`` is the framework's own conversion of a run's
arguments and return value, so a value it refuses raises the framework's own error
(``TypeError("Unsupported type: ...")``) here too.
"""

from __future__ import annotations

try:  # Django 6.0 and later
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    FRAMEWORK = "django.tasks"
except ImportError:  # Django 5.2 with the backport
    from django_tasks import (  # type: ignore[no-redef]
        DEFAULT_TASK_QUEUE_NAME,
        task,
        task_backends,
    )
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef]
    from django_tasks.base import (  # type: ignore[no-redef]
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import (  # type: ignore[no-redef]
        InvalidTaskError as InvalidTask,
    )
    from django_tasks.exceptions import (  # type: ignore[no-redef]
        TaskResultDoesNotExist,
    )
    from django_tasks.signals import (  # type: ignore[no-redef]
        task_enqueued,
        task_finished,
        task_started,
    )
    from django_tasks.utils import normalize_json  # type: ignore[no-redef]

    FRAMEWORK = "django_tasks"

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "FRAMEWORK",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
