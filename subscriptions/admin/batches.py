"""Due batches: read-only, one row per engine one-off that runs a block's subscription jobs."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from subscriptions.admin.common import ReadOnlyAdmin, when
from subscriptions.models import DueBatch


class BoundedDates(ChangeList):
    """Django reads a date drill-down (``?due_at__year=…``) with ``int()`` and builds a date
    from it; a year of twenty digits overflows instead of failing as a bad parameter. Here it
    is one, which Django answers with the unfiltered list (``?e=1``), as for ``year=abc``."""

    def get_filters(self, request: HttpRequest) -> Any:
        try:
            return super().get_filters(request)
        except OverflowError as exc:
            raise IncorrectLookupParameters(exc) from exc


@admin.register(DueBatch)
class DueBatchAdmin(ReadOnlyAdmin):
    """Read-only: the batches whose engine jobs run subscription jobs (the engine's Jobs
    page shows each batch's runs as ``subscriptions.DueBatch:<id>``)."""

    list_display = ("id", "due", "block", "job_count", "closed")
    list_filter = (("closed_at", admin.EmptyFieldListFilter),)
    date_hierarchy = "due_at"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).annotate(job_count=Count("jobs"))

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return BoundedDates

    @admin.display(description="jobs", ordering="job_count")
    def job_count(self, batch: Any) -> int:
        return int(batch.job_count)

    @admin.display(description="due", ordering="due_at")
    def due(self, batch: DueBatch) -> str:
        return when(batch.due_at)

    @admin.display(description="closed", ordering="closed_at")
    def closed(self, batch: DueBatch) -> str:
        return when(batch.closed_at)
