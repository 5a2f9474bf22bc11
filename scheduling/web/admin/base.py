"""What every model admin here shares: the base class, and whose rows a user sees.

Ownership: a staff user who is not a superuser sees, changes and acts on only the jobs and
schedules they own and those jobs' history. Every way in (list, change page, delete, history,
bulk actions, autocomplete and raw-id popups) goes through ``get_queryset``, and the object
permissions say the same, so a crafted URL or a posted id of another owner's row finds
nothing.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from scheduling.models import Job, Schedule
from scheduling.pages.changelists import SafeListAdmin
from scheduling.pages.csp import ContentSecurityPolicyAdmin
from scheduling.pages.selections import IdSelectionAdmin
from scheduling.pages.times import ReadableTimesAdmin


def sees_everything(request: HttpRequest) -> bool:
    return bool(request.user.is_superuser)


def owned_jobs(request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
    """``queryset`` narrowed to the jobs the user may see (all of them for a superuser)."""
    return queryset if sees_everything(request) else queryset.filter(owner=request.user)


def usable_schedules(request: HttpRequest) -> QuerySet[Schedule]:
    """Schedules the user may pick or open: their own (every one, for a superuser)."""
    schedules = Schedule.objects.all()
    return schedules if sees_everything(request) else schedules.filter(owner=request.user)


class LedgerAdmin(
    SafeListAdmin,
    ReadableTimesAdmin,
    IdSelectionAdmin,
    ContentSecurityPolicyAdmin,
    admin.ModelAdmin,
):
    """The engine's admin pages: their times read by ``scheduling.timing.readable``'s rule
    (``scheduling.pages.times``); whatever a list's URL or an action's POST holds, the answer
    is the admin's own (a list with its error flag, a message), never a database error; and
    every page carries the apps' Content-Security-Policy where the host sends none
    (``scheduling.pages.csp``), with the engine's styles from its static files.

    Django passes list parameters, the search term and the selected ids to the database as
    they come; PostgreSQL refuses a NUL in text, and a date part outside the calendar fails
    as the query is compiled. Such input names nothing that exists, so it is answered as any
    bad filter (``scheduling.pages.changelists``), or as an empty selection.
    """

    class Media:
        css = {"all": ("scheduling/duecourse.css",)}
