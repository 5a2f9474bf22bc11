"""The emailer's history and deliveries as the command line shows and exports them.

One form per row (``history_summary``, ``delivery_summary``), instants in ISO 8601 with their
offset, for ``emailer history`` and ``emailer deliveries`` alike: their ``--json`` lists and
their ``--jsonl`` exports. A listing is newest first and capped by ``--limit``; an export
reads every row of its window a page at a time (``scheduling.api.in_key_order``), oldest first
by due time and id (``emailer_hist_due``, ``emailer_delivery_due``), with no cap.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from emailer.models import Delivery, SendEmailHistory, SendEmailTask
from scheduling.api import ALL_TIME, ExportWindow, in_key_order


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def history_summary(run: SendEmailHistory) -> dict[str, Any]:
    """One run of a task: its due time, status and counts (read ``task`` with it)."""
    return {
        "id": run.pk,
        "task": run.task.name,
        "scheduled_batch_start_time": _iso(run.scheduled_batch_start_time),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "status": run.status,
        "attempts": run.attempts,
        "sent": run.sent,
        "failed": run.failed,
        "deferred": run.deferred,
        "skipped": run.skipped,
        "uncertain": run.uncertain,
        "note": run.note,
        "updated_at": _iso(run.updated_at),
    }


def delivery_summary(delivery: Delivery) -> dict[str, Any]:
    """One participant's message for one occurrence, and what became of it."""
    return {
        "email": delivery.email,
        "occurrence": _iso(delivery.occurrence),
        "state": delivery.state,
        "reply": delivery.reply,
        "tries": delivery.tries,
        "finished_at": _iso(delivery.finished_at),
    }


def history(
    *, task: SendEmailTask | None = None, window: ExportWindow = ALL_TIME
) -> QuerySet[SendEmailHistory]:
    """Runs of every task, or of one, due in ``window`` (``scheduled_batch_start_time``)."""
    runs = window.of(SendEmailHistory.objects.select_related("task"), "scheduled_batch_start_time")
    return runs if task is None else runs.filter(task=task)


def deliveries(
    *, task: SendEmailTask, state: str | None = None, window: ExportWindow = ALL_TIME
) -> QuerySet[Delivery]:
    """One task's deliveries (in ``state`` when given) whose occurrence is in ``window``."""
    found = window.of(Delivery.objects.filter(task=task), "occurrence")
    return found if not state else found.filter(state=state)


def export_history(
    runs: QuerySet[SendEmailHistory], *, limit: int | None = None
) -> Iterator[list[dict[str, Any]]]:
    """Every run of ``runs`` as ``history_summary``, oldest first, a page at a time."""
    for page in in_key_order(
        runs,
        time_field="scheduled_batch_start_time",
        key=lambda r: (r.scheduled_batch_start_time, r.pk),
        limit=limit,
    ):
        yield [history_summary(run) for run in page]


def export_deliveries(
    found: QuerySet[Delivery], *, limit: int | None = None
) -> Iterator[list[dict[str, Any]]]:
    """Every delivery of ``found`` as ``delivery_summary``, by occurrence, a page at a time."""
    for page in in_key_order(
        found, time_field="occurrence", key=lambda d: (d.occurrence, d.pk), limit=limit
    ):
        yield [delivery_summary(delivery) for delivery in page]
