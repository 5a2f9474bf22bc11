"""The admin: jobs and schedules are edited here; the execution history is read-only.

Forms validate through the models' ``clean`` (the same rules as the command line), saves that
change timing re-plan the job through ``jobs.replan_job``, and actions call one service per
row and report counts.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from scheduling import attempts, jobs
from scheduling.models import (
    EXECUTION_UNFINISHED,
    Attempt,
    Execution,
    Job,
    Schedule,
)

TIMING_FIELDS = {"schedule", "jitter", "status"}


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    list_display = ("__str__", "interval", "cron", "timezone", "run_at", "starts_at", "ends_at")
    search_fields = ("name", "cron", "interval")

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if change:
            now = timezone.now()
            for job in obj.jobs.all():
                jobs.replan_job(job=job, now=now)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "owner",
        "status",
        "schedule",
        "task",
        "next_due_at",
        "execute_count",
        "last_keepalive_at",
    )
    list_filter = ("status", "misfire", "overlap", "queue")
    search_fields = ("name", "task", "note", "owner__username")
    list_select_related = ("owner", "schedule")
    readonly_fields = (
        "next_due_at",
        "next_occurrence_at",
        "current_execution",
        "execute_count",
        "last_keepalive_at",
        "created_at",
        "updated_at",
    )
    raw_id_fields = ("owner", "schedule")
    actions = ("pause_jobs", "resume_jobs", "run_jobs_now")
    fieldsets = (
        (None, {"fields": ("owner", "name", "status", "schedule", "note")}),
        ("Target", {"fields": ("task", "args", "kwargs", "task_table", "task_row_id")}),
        (
            "Policies",
            {
                "fields": (
                    "misfire",
                    "overlap",
                    "jitter",
                    "timeout",
                    "max_retries",
                    "retry_backoff",
                    "retry_backoff_max",
                    "queue",
                    "priority",
                )
            },
        ),
        ("State", {"fields": readonly_fields}),
    )

    def save_model(self, request: HttpRequest, obj: Job, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if not change or TIMING_FIELDS & set(form.changed_data):
            jobs.replan_job(job=obj, now=timezone.now())

    @admin.action(description="Pause selected jobs")
    def pause_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        now = timezone.now()
        count = sum(jobs.pause_job(job=job, now=now) for job in queryset)
        self.message_user(request, f"{_plural(count, 'job')} paused.", messages.SUCCESS)

    @admin.action(description="Resume selected jobs")
    def resume_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        now = timezone.now()
        count = sum(jobs.resume_job(job=job, now=now) for job in queryset)
        self.message_user(request, f"{_plural(count, 'job')} resumed.", messages.SUCCESS)

    @admin.action(description="Run one occurrence of selected jobs now")
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        now = timezone.now()
        count = 0
        for job in queryset:
            try:
                jobs.run_job_now(job=job, now=now)
            except Exception as exc:
                self.message_user(request, f"{job.name}: {exc}", messages.ERROR)
            else:
                count += 1
        self.message_user(request, f"{_plural(count, 'job')} queued to run now.", messages.SUCCESS)


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    fields = ("number", "worker", "pid", "started_at", "finished_at", "outcome", "error")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Execution)
class ExecutionAdmin(admin.ModelAdmin):
    list_display = (
        "job",
        "scheduled_for",
        "status",
        "retry_count",
        "worker",
        "started_at",
        "finished_at",
        "last_heartbeat_at",
        "duplicates",
    )
    list_filter = ("status",)
    search_fields = ("job__name", "task", "task_id", "worker")
    list_select_related = ("job",)
    date_hierarchy = "scheduled_for"
    inlines = (AttemptInline,)
    actions = ("cancel_executions",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [field.name for field in Execution._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Cancel selected unfinished executions")
    def cancel_executions(self, request: HttpRequest, queryset: QuerySet[Execution]) -> None:
        now = timezone.now()
        count = sum(
            attempts.cancel_execution(execution_id=pk, now=now, reason="cancelled in the admin")
            for pk in queryset.filter(status__in=EXECUTION_UNFINISHED).values_list(
                "pk", flat=True
            )
        )
        self.message_user(request, f"{_plural(count, 'execution')} cancelled.", messages.SUCCESS)
