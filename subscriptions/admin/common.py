"""What every admin page of the app shares: the base ``ModelAdmin`` (a hand-made action
POST is refused, not answered with a 500), the read-only base for ledgers, the inline that
shows only a subscription's latest rows, and how times, counts, statuses and steps read.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from scheduling.api import (
    ADMIN_STYLESHEET,
    ContentSecurityPolicyAdmin,
    IdSelectionAdmin,
    ReadableTimesAdmin,
    SafeListAdmin,
    shown_time,
)
from subscriptions.models import JobStep, SubscriptionJob, SubscriptionJobStatus
from subscriptions.money import format_money

#: How many of a subscription's orders and jobs its page shows; the rest are a link away.
LATEST = 20


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def when(moment: Any) -> str:
    """A time as the engine's pages show it: the instant to the second, its zone named, and
    the time from now beside it (``scheduling.api.shown_time``)."""
    return shown_time(moment)


@admin.display(description="amount", ordering="amount")
def amount(row: Any) -> str:
    """A row's ``amount`` with the currency's decimals (``money.format_money``)."""
    return format_money(row.amount)


def status_text(job: SubscriptionJob) -> str:
    label = f"{job.status} {SubscriptionJobStatus(job.status).label}"
    return f"{label} (retry {job.retry_count})" if job.retry_count else label


def step_text(parameter: str) -> str:
    try:
        return str(JobStep(parameter).label)
    except ValueError:  # a value written by hand or by an import
        return parameter


class LatestInline(ReadableTimesAdmin, admin.TabularInline):
    """Only the subscription's latest ``LATEST`` rows; ``SubscriptionAdmin`` links to the rest."""

    newest_first: tuple[str, ...] = ("-pk",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        rows = super().get_queryset(request)
        match = request.resolver_match
        parent = match.kwargs.get("object_id") if match else None
        if parent is None:
            return rows
        latest = list(
            rows.filter(subscription_id=parent)
            .order_by(*self.newest_first)
            .values_list("pk", flat=True)[:LATEST]
        )
        return rows.filter(pk__in=latest)


class ModelAdmin(
    SafeListAdmin,
    ReadableTimesAdmin,
    IdSelectionAdmin,
    ContentSecurityPolicyAdmin,
    admin.ModelAdmin,
):
    """Every page of this app: its lists answer any filter value in their URL without a 500
    (``SafeListAdmin``); its times read as the engine's do (``ReadableTimesAdmin``);
    a list action posted with a selection that holds something
    other than ids (a hand-made POST) is refused with a message and changes nothing, where
    Django would filter by it as it came and answer 500."""

    refused_selection = "The selection holds values that are not ids; nothing was done."

    class Media:  # badges, and lists that fit their box with the navigation sidebar open
        css = {"all": (ADMIN_STYLESHEET,)}


class ReadOnlyAdmin(ModelAdmin):
    """Rows that only the app's own services write: the admin shows them and changes nothing,
    for superusers too (these answer before Django's superuser shortcut), so no add, change or
    delete page and no delete action exists for them. Only history retention removes a
    ledger's rows."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
