"""The job list's and the schedule list's filters: health, queue, and who made the job."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import HttpRequest

from scheduling.models import Job, JobStatus
from scheduling.rules import tasktables
from scheduling.stages import selectors
from scheduling.web.admin.base import owned_jobs


class HealthFilter(admin.SimpleListFilter):
    title = "health"
    parameter_name = "health"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("failing", "Failing (last run failed or retrying)"),
            ("late", "Late (overdue by a minute or more)"),
            ("paused", "Paused"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if self.value() == "failing":
            return selectors.failing(queryset)
        if self.value() == "late":
            return selectors.late(queryset)
        if self.value() == "paused":
            return queryset.filter(status=JobStatus.PAUSED)
        return queryset


class QueueFilter(admin.SimpleListFilter):
    """The queues of the jobs the user may see (another owner's queue names are not listed)."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        queues = owned_jobs(request, Job.objects.all()).values_list("queue", flat=True)
        return [(queue, queue) for queue in queues.distinct().order_by("queue")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset if value is None else queryset.filter(queue=value)


class InternalFilter(admin.SimpleListFilter):
    """Jobs the engine made for a domain app on its own (due batches) are left out unless
    asked for (``tasktables.internal_jobs``); their runs stay in the history."""

    title = "made by"
    parameter_name = "made_by"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("all", "Anyone, with internal jobs (due batches)"),
            ("internal", "A domain app on its own (internal) only"),
        ]

    def choices(self, changelist: Any) -> Any:
        yield {
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "display": "People and code (internal jobs hidden)",
        }
        for lookup, title in self.lookup_choices:
            yield {
                "selected": self.value() == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        internal = self.internal_rows()
        if self.value() == "all":
            return queryset
        if self.value() == "internal":
            return queryset.filter(internal)
        return queryset.exclude(internal)

    def internal_rows(self) -> Q:
        return tasktables.internal_jobs()


class InternalScheduleFilter(InternalFilter):
    """Schedules of internal jobs (the one-off instant of each due batch) are left out too."""

    def internal_rows(self) -> Q:
        return Q(Exists(Job.objects.filter(tasktables.internal_jobs(), schedule=OuterRef("pk"))))
