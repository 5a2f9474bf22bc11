"""Schedules in the admin, scoped to their owner as jobs are."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from scheduling.models import Schedule
from scheduling.stages import audit, edits, selectors
from scheduling.web.admin.base import LedgerAdmin, sees_everything, usable_schedules
from scheduling.web.admin.display import breakable
from scheduling.web.admin.filters import InternalScheduleFilter
from scheduling.web.admin.owners import OwnerChoiceAdmin


@admin.register(Schedule)
class ScheduleAdmin(OwnerChoiceAdmin, LedgerAdmin):
    """Schedules, scoped to their owner as jobs are: a staff user who is not a superuser sees
    only their own, by any URL, and makes schedules that are theirs."""

    list_display = ("__str__", "in_words", "zone", "job_count")
    search_fields = ("name", "cron", "interval", "rrule")
    list_select_related = ("owner",)

    def get_list_display(self, request: HttpRequest) -> Any:
        shown = super().get_list_display(request)
        return (*shown, "owner_name") if sees_everything(request) else shown

    def get_list_filter(self, request: HttpRequest) -> tuple[Any, ...]:
        found: tuple[Any, ...] = (InternalScheduleFilter,)
        return (*found, "owner") if sees_everything(request) else found

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if sees_everything(request) else ("owner",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        # The jobs a user may see: another owner's job on a shared schedule is not counted.
        mine = None if sees_everything(request) else Q(jobs__owner=request.user)
        return usable_schedules(request).annotate(job_total=Count("jobs", filter=mine))

    def _only_mine(self, request: HttpRequest, obj: Schedule | None) -> bool:
        """A schedule is changed only by its owner, and only while every job on it is theirs
        (a superuser may have put another owner's job on it)."""
        return (
            obj is None
            or sees_everything(request)
            or (
                obj.owner_id == request.user.pk
                and not obj.jobs.exclude(owner=request.user).exists()
            )
        )

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_view_permission(request, obj)
        return allowed and (
            obj is None or sees_everything(request) or obj.owner_id == request.user.pk
        )

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_change_permission(request, obj) and self._only_mine(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_delete_permission(request, obj) and self._only_mine(request, obj)

    @admin.display(description="in words")
    def in_words(self, schedule: Schedule) -> str:
        return breakable(selectors.describe_schedule(schedule))

    @admin.display(description="timezone", ordering="timezone")
    def zone(self, schedule: Schedule) -> str:
        return breakable(schedule.timezone)

    @admin.display(description="owner", ordering="owner__username")
    def owner_name(self, schedule: Schedule) -> str:
        return breakable(schedule.owner.get_username())

    @admin.display(description="jobs", ordering="job_total")
    def job_count(self, schedule: Schedule) -> int:
        return int(getattr(schedule, "job_total", 0))

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        """A new schedule is saved as it is; an edited one moves every job on it, each job's
        trail saying who changed which timing (``edits.edit_schedule``)."""
        if not change:
            if not sees_everything(request):
                obj.owner = request.user
            super().save_model(request, obj, form, change)
            return
        edits.edit_schedule(schedule=obj, now=timezone.now(), by=audit.Actor.user(request.user))
