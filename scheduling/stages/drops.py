"""Drops: broker messages a worker acknowledged without running them, counted.

The worker's guard (``scheduling.worker.guard``) refuses a message no pool process may be
handed (undecodable, malformed, nested or sized past the limits) and records it here: one row
per worker and kind (``MessageDrops``), its total raised by one and its latest reason kept, so
a flood of such messages writes no more rows. ``/metrics`` reads the totals (``totals``).
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F

from scheduling.messages.errors import MAX_ERROR
from scheduling.models import MessageDrops


def record_drop(*, worker: str, kind: str, reason: str, now: datetime) -> None:
    """Count one message dropped by ``worker`` for a reason of ``kind``."""
    reason = reason[:MAX_ERROR]
    worker = worker[:255]
    rows = MessageDrops.objects.filter(worker=worker, kind=kind)
    update = {
        "dropped_total": F("dropped_total") + 1,
        "last_dropped_at": now,
        "last_reason": reason,
    }
    with transaction.atomic(durable=True):
        if rows.update(**update):
            return
        try:
            with transaction.atomic():
                MessageDrops.objects.create(
                    worker=worker, kind=kind, dropped_total=1, last_dropped_at=now,
                    last_reason=reason,
                )  # fmt: skip
        except IntegrityError:  # another process of this worker made the row meanwhile
            rows.update(**update)


def totals() -> list[MessageDrops]:
    """Every worker's drops by kind (a few rows: one per worker and kind)."""
    return list(MessageDrops.objects.order_by("worker", "kind"))
