"""What every model admin here shares: the base class, and whose rows a user sees.

Ownership: a staff user who is not a superuser sees, changes and acts on only the jobs and
schedules they own and those jobs' history. Every way in (list, change page, delete, history,
bulk actions, autocomplete and raw-id popups) goes through ``get_queryset``, and the object
permissions say the same, so a crafted URL or a posted id of another owner's row finds
nothing.
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.http import HttpRequest

from scheduling.admintimes import ReadableTimesAdmin
from scheduling.csp import ContentSecurityPolicyAdmin
from scheduling.models import Job, Schedule
from scheduling.rules import validation
from scheduling.selections import IdSelectionAdmin


def sees_everything(request: HttpRequest) -> bool:
    return bool(request.user.is_superuser)


def owned_jobs(request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
    """``queryset`` narrowed to the jobs the user may see (all of them for a superuser)."""
    return queryset if sees_everything(request) else queryset.filter(owner=request.user)


def usable_schedules(request: HttpRequest) -> QuerySet[Schedule]:
    """Schedules the user may pick or open: their own (every one, for a superuser)."""
    schedules = Schedule.objects.all()
    return schedules if sees_everything(request) else schedules.filter(owner=request.user)


#: A date hierarchy walks to the next year, month or day: the calendar's last one has none.
LAST_LISTED_YEAR = 9998


class LedgerAdmin(
    ReadableTimesAdmin, IdSelectionAdmin, ContentSecurityPolicyAdmin, admin.ModelAdmin
):
    """The engine's admin pages: their times read by ``scheduling.readable``'s rule
    (``scheduling.admintimes``); whatever a list's URL or an action's POST holds, the answer
    is the admin's own (a list with its error flag, a message), never a database error; and
    every page carries the apps' Content-Security-Policy where the host sends none
    (``scheduling.csp``), with the engine's styles from its static files.

    Django passes list parameters, the search term and the selected ids to the database as
    they come; PostgreSQL refuses a NUL in text, and a date hierarchy on the calendar's last
    day overflows. Such input names nothing that exists, so it is answered as any lookup that
    finds nothing, or as an empty selection.
    """

    class Media:
        css = {"all": ("scheduling/duecourse.css",)}

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        for key, values in request.GET.lists():
            if not all(validation.storable(text) for text in (key, *values)):
                raise IncorrectLookupParameters(f"{key}: holds text no row can hold")
        if self.date_hierarchy:
            year = request.GET.get(f"{self.date_hierarchy}__year")
            if year is not None and not (
                re.fullmatch(r"[0-9]{1,4}", year) and 1 <= int(year) <= LAST_LISTED_YEAR
            ):
                raise IncorrectLookupParameters(f"{self.date_hierarchy}__year: out of range")
        return super().get_changelist_instance(request)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        if not validation.storable(search_term):
            return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)
