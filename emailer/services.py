"""Sending a SendEmailTask's mail, resumable after the last batch sent."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.mail import EmailMessage, get_connection

from emailer.models import SendEmailTask
from scheduling.api import RunContext

logger = logging.getLogger("emailer")


def send_batch(*, email_task: SendEmailTask, run: RunContext) -> dict[str, int]:
    """Send to every recipient, checkpointing after each batch.

    A retried attempt starts after the last batch that was sent, so a worker that dies halfway
    does not mail the first half twice.
    """
    recipients = list(email_task.recipients)
    sent = int((run.checkpoint or {}).get("sent", 0))
    size = max(1, email_task.batch_size)
    with get_connection() as mail:
        while sent < len(recipients):
            batch = recipients[sent : sent + size]
            for address in batch:
                EmailMessage(
                    subject=email_task.subject,
                    body=email_task.body,
                    from_email=email_task.from_email or settings.DEFAULT_FROM_EMAIL,
                    to=[address],
                    connection=mail,
                ).send()
            sent += len(batch)
            run.save_checkpoint({"sent": sent})
    logger.info("emailer.sent email_task=%s recipients=%s", email_task.pk, sent)
    return {"sent": sent}
