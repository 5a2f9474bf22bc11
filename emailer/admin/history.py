"""The read-only pages of the run history and the delivery ledger."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html

from emailer.admin.common import EngineStyles, shown
from emailer.models import Delivery, HistoryStatus, SendEmailHistory
from scheduling.api import ContentSecurityPolicyAdmin, ReadableTimesAdmin, SafeListAdmin


@admin.register(SendEmailHistory)
class SendEmailHistoryAdmin(
    SafeListAdmin, ReadableTimesAdmin, ContentSecurityPolicyAdmin, admin.ModelAdmin
):
    """One row per run, with live counts; read-only, like all history."""

    Media = EngineStyles

    # What decides a click; attempts, exact times and the full reason are on the row's page.
    list_display = ("task", "due", "status", "counts", "reason")
    list_filter = ("status", "task")
    list_select_related = ("task",)
    date_hierarchy = "scheduled_batch_start_time"
    change_list_template = "admin/emailer/sendemailhistory/change_list.html"

    @admin.display(description="due", ordering="scheduled_batch_start_time")
    def due(self, history: SendEmailHistory) -> str:
        if history.runs > 1 and history.last_batch_start_time:
            return format_html(
                "{} runs, {} to {}",
                history.runs,
                shown(history.scheduled_batch_start_time),
                shown(history.last_batch_start_time),
            )
        return shown(history.scheduled_batch_start_time)

    @admin.display(description="deliveries")
    def counts(self, history: SendEmailHistory) -> str:
        words = [
            f"{value} {name}"
            for name in ("sent", "failed", "uncertain", "deferred")
            if (value := getattr(history, name))
        ]
        return ", ".join(words) or "-"

    @admin.display(description="reason")
    def reason(self, history: SendEmailHistory) -> str:
        note = history.note
        if not note:
            return "-"
        short = note if len(note) < 40 else note[:39] + "…"
        return format_html('<span title="{}">{}</span>', note, short)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        running = SendEmailHistory.objects.filter(status=HistoryStatus.RUNNING).exists()
        return super().changelist_view(request, {**(extra_context or {}), "refresh": running})

    # Append-only for everyone, superusers too (add, change, delete page, delete_selected):
    # history is what happened. Deleting a task or its project takes its history with it.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(
    SafeListAdmin, ReadableTimesAdmin, ContentSecurityPolicyAdmin, admin.ModelAdmin
):
    """The per-participant ledger; read-only."""

    Media = EngineStyles

    # What decides a click; the server's reply, the tries and the times are on the row's page.
    list_display = ("email", "task", "when", "state")
    list_filter = ("state", "task")
    search_fields = ("email",)
    list_select_related = ("task",)

    @admin.display(description="occurrence", ordering="occurrence")
    def when(self, delivery: Delivery) -> str:
        return shown(delivery.occurrence)

    # Append-only for everyone, superusers too: the next run reads the ledger to know who has
    # had the mail, so a delivery deleted here would mail that participant again.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
