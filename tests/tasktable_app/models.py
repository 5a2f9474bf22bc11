"""``Chore``: a task-table row that records every run the engine gives it; ``TeamChore`` (rows
with an owner) and ``ChoreBatch`` (an internal table) for the permission rules."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Chore(models.Model):
    name = models.CharField(max_length=100)
    #: Runs that raise before succeeding (to exercise retries through the engine).
    fail_first = models.PositiveIntegerField(default=0)
    runs = models.JSONField(default=list, help_text="One entry per attempt the runner saw.")

    def __str__(self) -> str:
        return self.name


class TeamChore(models.Model):
    """A task table whose rows belong to a user: only its owner may point a job at a row."""

    name = models.CharField(max_length=100)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)

    class Meta:
        permissions = [("send_reminders", "Can schedule team reminders")]

    def __str__(self) -> str:
        return self.name


class ChoreBatch(models.Model):
    """An internal task table, as subscriptions' due batches are: only code makes its jobs."""

    name = models.CharField(max_length=100)

    def __str__(self) -> str:
        return self.name
