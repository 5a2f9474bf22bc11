"""The execution history in the admin: read-only, with its attempts; cancel and retry
as actions, which need the change permission on jobs.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from scheduling.messages import errors
from scheduling.models import EXECUTION_UNFINISHED, Attempt, Execution, ExecutionStatus, Job
from scheduling.pages.times import ReadableTimesAdmin, shown
from scheduling.rules import permissions
from scheduling.stages import audit, controls, selectors
from scheduling.timing import readable
from scheduling.web.admin.base import LedgerAdmin, sees_everything
from scheduling.web.admin.display import badge, breakable, say


class AttemptInline(ReadableTimesAdmin, admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    fields = ("number", "worker", "pid", "started_at", "finished_at", "outcome", "error")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


#: The states whose reason the list shows under their badge (every reason is on the page).
WHY_SHOWN = frozenset(
    {ExecutionStatus.SKIPPED, ExecutionStatus.SUPERSEDED, ExecutionStatus.CANCELLED}
)


@admin.register(Execution)
class ExecutionAdmin(LedgerAdmin):
    # What decides a click; the worker, the exact times and the heartbeat are on its page.
    list_display = (
        "run",
        "due",
        "status_badge",
        "retries",
        "took",
        "failed_items",
    )
    list_filter = ("status",)
    search_fields = ("job__name", "task", "task_id", "worker")
    list_select_related = ("job",)
    date_hierarchy = "scheduled_for"
    inlines = (AttemptInline,)
    actions = ("cancel_executions", "retry_executions")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Execution]:
        rows = super().get_queryset(request)
        return rows if sees_everything(request) else rows.filter(job__owner=request.user)

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        """The execution of a page, named for what it is in its title and breadcrumbs."""
        found = super().get_object(request, object_id, from_field)
        if found is not None:
            selectors.titled([found])
        return found

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """The page's runs, each named for what it runs (``selectors.titled``: one query per
        task table on the page)."""
        changelist = super().get_changelist_instance(request)
        selectors.titled(changelist.result_list)
        return changelist

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_view_permission(request, obj)
        if obj is None or sees_everything(request):
            return allowed
        return allowed and obj.job_id is not None and obj.job.owner_id == request.user.pk

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [field.name for field in Execution._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Cancel and retry change a job's run: they need the change permission on jobs (the
        executions a staff user reaches are already only their own jobs')."""
        return bool(request.user.has_perm(permissions.model_permission(Job, "change")))

    @admin.display(description="status", ordering="status")
    def status_badge(self, execution: Execution) -> str:
        """The state, and under it, for the states a policy or a person decides (skipped by
        the misfire policy, superseded or cancelled by a later occurrence, cancelled by hand),
        why: the list says which occurrence replaced which without a click."""
        shown = badge(execution.status, title=errors.headline(execution.last_error, limit=200))
        if execution.status not in WHY_SHOWN or not execution.last_error:
            return shown
        return format_html(
            '{}<div class="duecourse-why">{}</div>',
            shown,
            breakable(errors.headline(execution.last_error, limit=80)),
        )

    @admin.display(description="run", ordering="job__name")
    def run(self, execution: Execution) -> str:
        """What the execution runs: its job's title, or a Django task run's task path."""
        title = getattr(execution, "title", None)
        if title is None:
            title = selectors.run_titles([execution])[execution.pk]
        return breakable(title)

    @admin.display(description="due", ordering="scheduled_for")
    def due(self, execution: Execution) -> str:
        return shown(execution.scheduled_for)

    @admin.display(description="retries", ordering="retry_count")
    def retries(self, execution: Execution) -> int:
        return execution.retry_count

    @admin.display(description="took")
    def took(self, execution: Execution) -> str:
        if execution.started_at is None or execution.finished_at is None:
            return "-"
        return readable.span((execution.finished_at - execution.started_at).total_seconds())

    @admin.display(description="failed items", ordering="item_failures")
    def failed_items(self, execution: Execution) -> Any:
        if not execution.item_failures:
            return "-"
        return format_html(
            '<span title="{}">{}</span>',
            execution.item_failure_detail,
            execution.item_failures,
        )

    @admin.action(
        description="Cancel the selected running or queued executions", permissions=["operate"]
    )
    def cancel_executions(self, request: HttpRequest, queryset: QuerySet[Execution]) -> None:
        now = timezone.now()
        reason = f"cancelled in the admin by {request.user.get_username()}"
        count = 0
        for execution in queryset.filter(status__in=EXECUTION_UNFINISHED):
            if controls.cancel_execution(
                execution_id=execution.pk, now=now, reason=reason, by=audit.Actor.user(request.user)
            ):
                self.log_change(request, execution, "Cancelled.")
                count += 1
        self.message_user(
            request,
            say(count, "%(count)d execution cancelled.", "%(count)d executions cancelled."),
            messages.SUCCESS if count else messages.WARNING,
        )

    @admin.action(description="Retry the selected failed executions", permissions=["operate"])
    def retry_executions(self, request: HttpRequest, queryset: QuerySet[Execution]) -> None:
        now = timezone.now()
        count = 0
        for execution in queryset.filter(status=ExecutionStatus.FAILED):
            if controls.retry_execution(
                execution_id=execution.pk, now=now, by=audit.Actor.user(request.user)
            ):
                self.log_change(request, execution, "Retried.")
                count += 1
        self.message_user(
            request,
            say(count, "%(count)d execution retried.", "%(count)d executions retried."),
            messages.SUCCESS if count else messages.WARNING,
        )
