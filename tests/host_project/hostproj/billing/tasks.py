"""The host's own schedulable task: each run appends its execution to a file, so the test can
count bodies, not just ledger rows."""

import os

try:
    from django.tasks import task  # Django 6
except ImportError:
    from django_tasks import task  # Django 5.2, with the django-tasks backport

from scheduling.api import schedulable_task


@schedulable_task(bind=True, name="billing.close_books")
def close_books(self, ledger: str) -> str:
    run = self.run_context
    line = f"{run.execution_id} {run.scheduled_for.isoformat()} {ledger}\n"
    with open(os.environ["HOST_RUN_LOG"], "a") as handle:
        handle.write(line)
    return "closed"


@task
def send_receipt(order: int) -> dict:
    """A Django task (the framework's @task), run by the same stock workers."""
    return {"order": order, "sent": True}
