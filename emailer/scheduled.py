"""The emailer's scheduled work: SendEmailTask rows are a task table the engine runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db.models import QuerySet

from emailer.models import SendEmailTask
from emailer.sending import run_send_email_task
from scheduling.api import RunContext, task_table


def describe_tasks(rows: QuerySet[SendEmailTask]) -> Iterator[tuple[int, str]]:
    """How a job of a task reads in the engine's lists: the email's name and its project
    ("email "welcome" of project Acme"), never ``emailer.SendEmailTask:1:1``."""
    for task in rows.select_related("project"):
        yield task.pk, f'email "{task.name}" of project {task.project.name}'


@task_table(SendEmailTask, describe=describe_tasks)
def run_task(row: SendEmailTask, run: RunContext) -> dict[str, Any]:
    return run_send_email_task(row, run)
