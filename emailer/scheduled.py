"""The emailer's scheduled work: SendEmailTask rows are a task table the engine runs."""

from __future__ import annotations

from typing import Any

from emailer.models import SendEmailTask
from emailer.sending import run_send_email_task
from scheduling.api import RunContext, task_table


@task_table(SendEmailTask)
def run_task(row: SendEmailTask, run: RunContext) -> dict[str, Any]:
    return run_send_email_task(row, run)
