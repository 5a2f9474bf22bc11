"""Django's Tasks framework on the ledger: everything the ``TASKS`` backend needs, in one room.

- ``framework``: the framework's names from Django 6's ``django.tasks`` or the ``django-tasks``
  backport on Django 5.2, imported in one place;
- ``options``: ``task_options``, Duecourse's own options stacked above the framework's ``@task``;
- ``backend``: ``DuecourseTaskBackend`` (``scheduling.tasks_backend`` names it for settings);
- ``runs``: one enqueued run as a ledger row;
- ``results``: a run read back as the framework's ``TaskResult``, with the task as enqueued;
- ``outbox``: the enqueuing process's thread that publishes committed runs;
- ``runner``: the Celery task that runs a framework task on a worker.
"""
