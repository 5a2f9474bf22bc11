"""The SendEmailTask table: rows that jobs run through ``scheduling.run_task_row``.

The name is seed 000's on purpose: it is a *task table*, each row a batch of mail to send when
its job comes due. The per-run history (seed 000's SendEmailHistory, with the original due
time) is the job's Execution row.
"""

from __future__ import annotations

from django.db import models


class SendEmailTask(models.Model):
    name = models.CharField(max_length=200)
    subject = models.CharField(max_length=998)
    body = models.TextField()
    from_email = models.EmailField(blank=True)
    recipients = models.JSONField(default=list, help_text="A list of addresses.")
    batch_size = models.PositiveIntegerField(default=100)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name
