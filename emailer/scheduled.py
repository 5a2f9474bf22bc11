"""The emailer's scheduled work: SendEmailTask rows are a task table."""

from __future__ import annotations

from typing import Any

from emailer.models import SendEmailTask
from emailer.services import send_batch
from scheduling.api import RunContext, task_table


@task_table(SendEmailTask)
def run_send_email_task(row: SendEmailTask, run: RunContext) -> dict[str, Any]:
    return send_batch(email_task=row, run=run)
