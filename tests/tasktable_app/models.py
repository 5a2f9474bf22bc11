"""``Chore``: a task-table row that records every run the engine gives it."""

from __future__ import annotations

from django.db import models


class Chore(models.Model):
    name = models.CharField(max_length=100)
    #: Runs that raise before succeeding (to exercise retries through the engine).
    fail_first = models.PositiveIntegerField(default=0)
    runs = models.JSONField(default=list, help_text="One entry per attempt the runner saw.")

    def __str__(self) -> str:
        return self.name
