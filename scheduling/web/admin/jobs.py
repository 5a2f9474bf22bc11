"""Jobs in the admin: their form, their list with its health, and their actions.

Saves go through ``scheduling.stages`` (``jobs.create_job``, ``edits.edit_job``), which plan the
next occurrence. The list answers "is it healthy?" from one query (``selectors.with_health``).
Actions call one service per row, report counts and write the admin log; every action that
changes state needs the change permission on jobs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from scheduling import api
from scheduling.models import Execution, Job, JobStatus
from scheduling.pages.csp import DATA_POLICY, with_csp
from scheduling.pages.times import shown
from scheduling.rules import permissions
from scheduling.stages import audit, controls, edits, jobs, pauses, removals, selectors
from scheduling.stages import previews as stage_previews
from scheduling.timing import readable
from scheduling.timing.previews import DEFAULT_COUNT
from scheduling.timing.schedules import ScheduleError
from scheduling.web.admin.backfill import backfill_jobs
from scheduling.web.admin.base import LedgerAdmin, owned_jobs, sees_everything, usable_schedules
from scheduling.web.admin.display import badge, breakable, pause_note, say
from scheduling.web.admin.filters import HealthFilter, InternalFilter, QueueFilter
from scheduling.web.admin.forms import JOB_POLICY_FIELDS, JobForm, PauseForm
from scheduling.web.admin.owners import OwnerChoiceAdmin
from scheduling.web.admin.previews import preview_response, render_list

#: The most changes of the audit trail the job's page shows (``manage.py jobs history`` has all).
TRAIL_SHOWN = 50


@admin.register(Job)
class JobAdmin(OwnerChoiceAdmin, LedgerAdmin):
    form = JobForm
    change_list_template = "admin/scheduling/job/change_list.html"
    # What decides a click; failures in 24 h and the last run's retries are on the job's page.
    list_display = (
        "job_name",
        "target",
        "status_badge",
        "schedule_in_words",
        "next_due",
        "last_run",
    )
    list_display_links = ("job_name",)
    search_fields = ("name", "task", "note", "owner__username")
    list_select_related = ("owner", "schedule")
    ordering = ("name",)
    actions = (
        "run_now",
        "pause_jobs",
        "resume_jobs",
        "retry_failed_executions",
        "cancel_unfinished_executions",
        backfill_jobs,
    )
    state_fields = (
        "status",
        "pause_reason",
        "paused_by",
        "pause_kind",
        "consecutive_failures",
        "schedule_in_words",
        "failures",
        "retries",
        "next_due",
        "next_occurrence",
        "current_execution",
        "execute_count",
        "last_keepalive_at",
        "created_at",
        "updated_at",
    )
    readonly_fields = (*state_fields, "recent_executions", "upcoming", "change_trail")
    policy_fields = JOB_POLICY_FIELDS

    class Media:
        js = ("scheduling/timing_preview.js",)

    # --- who sees what

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        mine = owned_jobs(request, super().get_queryset(request))
        return pauses.with_pauses(selectors.with_health(mine, now=timezone.now()))

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        """The job of a page, named for what it is in its title and breadcrumbs."""
        found = super().get_object(request, object_id, from_field)
        if found is not None:
            selectors.titled([found])
        return found

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """The page's jobs, each named for what it is (``selectors.titled``)."""
        changelist = super().get_changelist_instance(request)
        selectors.titled(changelist.result_list)
        return changelist

    def _owns(self, request: HttpRequest, obj: Job | None) -> bool:
        return obj is None or sees_everything(request) or obj.owner_id == request.user.pk

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_view_permission(request, obj) and self._owns(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_change_permission(request, obj) and self._owns(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """A job the code declares is removed from the code, never here
        (``removals.removal_refusal``)."""
        if obj is not None and obj.declared:
            return False
        return super().has_delete_permission(request, obj) and self._owns(request, obj)

    def get_list_filter(self, request: HttpRequest) -> tuple[Any, ...]:
        found: tuple[Any, ...] = (HealthFilter, InternalFilter, QueueFilter)
        return (*found, "owner") if sees_everything(request) else found

    # --- the form

    #: What a declared job's page shows, read-only: the code owns it (``declared_sets``).
    declared_fields = ("declaration", "name", "owner", "note", "declared_target", "args", "kwargs")

    @admin.display(description="task")
    def declared_target(self, obj: Job) -> str:
        """The task the code names (``Job.shown_task``), not only the runner it goes through."""
        return obj.shown_task

    @admin.display(description="declared in")
    def declaration(self, obj: Job) -> str:
        """Where the code declares the job, and that it owns the fields below."""
        if obj.declared:
            return format_html(
                "{} &mdash; the code owns this job's fields: change {} and deploy "
                "(<code>manage.py jobs sync</code>). Pause, resume, run now and backfill work "
                "here as for any job.",
                obj.declaration,
                "SCHEDULING_JOBS"
                if obj.declared_in == "SCHEDULING_JOBS"
                else "CELERY_BEAT_SCHEDULE (the Celery app's beat_schedule)",
            )
        if obj.declared_in:
            return f"was {obj.declaration}; removed from the code"
        return "-"

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is not None and obj.declared:
            return (
                *self.declared_fields,
                *self.policy_fields,
                *self.readonly_fields,
            )
        return super().get_readonly_fields(request, obj)

    def declared_sets(self, request: HttpRequest, obj: Job) -> list[Any]:
        sets: list[Any] = [
            (None, {"fields": self.declared_fields[:4]}),
            ("Target", {"fields": self.declared_fields[4:]}),
            ("Schedule", {"fields": ("schedule_in_words", "upcoming")}),
            ("Policies", {"fields": self.policy_fields, "classes": ("collapse",)}),
            ("State", {"fields": self.state_fields}),
        ]
        if permissions.may_view(request.user, Execution):
            sets.append(("Recent executions", {"fields": ("recent_executions",)}))
        sets.append(("Changes", {"fields": ("change_trail",), "classes": ("collapse",)}))
        return sets

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        if obj is not None and obj.declared:
            return self.declared_sets(request, obj)
        first = ("owner", "name", "note") if sees_everything(request) else ("name", "note")
        sets: list[Any] = [
            (None, {"fields": first}),
            ("Target", {"fields": ("task", "args", "kwargs", "task_row_id")}),
            (
                "Schedule",
                {
                    "fields": (
                        "existing_schedule",
                        "interval",
                        ("cron", "timezone"),
                        "rrule",
                        "run_at",
                        "starts_at",
                        "ends_at",
                        "upcoming",
                    ),
                    "description": "Give an interval, a cron expression, a calendar or one "
                    "instant.",
                },
            ),
            ("Policies", {"fields": self.policy_fields, "classes": ("collapse",)}),
        ]
        if obj is not None:
            sets.append(("State", {"fields": self.state_fields}))
            if permissions.may_view(request.user, Execution):  # their errors, workers, attempts
                sets.append(("Recent executions", {"fields": ("recent_executions",)}))
            # Whoever may see the job's page (view permission on jobs, and its owner or a
            # superuser) may read its trail; nobody edits it.
            sets.append(("Changes", {"fields": ("change_trail",), "classes": ("collapse",)}))
        return sets

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kw: Any):
        if obj is not None and obj.declared:
            # The code owns every field: the page's form has none to post.
            kw.update(form=forms.ModelForm, fields=())
        form = super().get_form(request, obj, change, **kw)
        form.schedule_queryset = usable_schedules(request)
        form.owner_for_new = None if sees_everything(request) else request.user
        form.user = request.user
        return form

    def save_model(self, request: HttpRequest, obj: Job, form: Any, change: bool) -> None:
        now = timezone.now()
        if not change:
            if not sees_everything(request):
                obj.owner = request.user
            # The form validated these values with the same rules; the job row saved is
            # ``create_job``'s, and the admin goes on (log entry, redirect) with its id.
            created = jobs.create_job(
                owner=obj.owner,
                name=obj.name,
                schedule=obj.schedule,
                target=jobs.Target(
                    task=obj.task,
                    args=obj.args,
                    kwargs=obj.kwargs,
                    task_table=obj.task_table,
                    task_row_id=obj.task_row_id,
                ),
                policies=jobs.Policies(
                    note=obj.note, **{name: getattr(obj, name) for name in JOB_POLICY_FIELDS}
                ),
                now=now,
                by=audit.Actor.user(request.user),
            )
            obj.pk = created.pk
            obj.refresh_from_db()
            return
        if obj.declared:
            return  # nothing of it is the admin's to change (``get_form``)
        data = form.cleaned_data
        changes = {name: data[name] for name in form.changed_data if name in edits.EDITABLE}
        if {"task", "task_row_id"} & set(changes):
            changes.update(task=obj.task, task_table=obj.task_table, task_row_id=obj.task_row_id)
        existing = data.get("existing_schedule")
        timing = {name: data[name] for name in edits.TIMING_FIELDS if name in form.changed_data}
        if not (data.get("cron") or data.get("rrule")):
            timing.pop("timezone", None)  # ignored without cron, as the form validated it
        edits.edit_job(
            job=obj,
            now=now,
            schedule=existing,
            timing=None if existing else timing,
            by=audit.Actor.user(request.user),
            **changes,
        )
        obj.refresh_from_db()

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        """The job's page, with buttons for the actions that apply to it now."""
        job = self.get_object(request, object_id)
        buttons = []
        if job is not None and self.has_change_permission(request, job):
            buttons.append(("run_now", "Run now"))
            if job.status == JobStatus.ACTIVE:
                buttons.append(("pause_jobs", "Pause…"))
            if job.status == JobStatus.PAUSED:
                buttons.append(("resume_jobs", "Resume"))
        context = {**(extra_context or {}), "job_actions": buttons}
        return super().change_view(request, object_id, form_url, context)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        """A job's history goes with it. Executions are never deleted one by one
        (``ExecutionAdmin``), so their missing delete permission must not refuse the job's."""
        to_delete, model_count, perms_needed, protected = super().get_deleted_objects(objs, request)
        perms_needed.discard(Execution._meta.verbose_name)
        for job in objs:
            if job.declared:  # the delete page and the bulk action refuse, naming why
                perms_needed.add(f"{job.name} ({removals.removal_refusal(job)})")
        return to_delete, model_count, perms_needed, protected

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        removals.remove_job(job=obj, now=timezone.now(), by=audit.Actor.user(request.user))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        now, by = timezone.now(), audit.Actor.user(request.user)
        for job in queryset.select_related("schedule"):
            removals.remove_job(job=job, now=now, by=by)

    # --- columns

    @admin.display(description="status", ordering="status")
    def status_badge(self, job: Job) -> str:
        """The job's state; under it, for an active job whose last runs all ended without
        completing (``selectors.unfinished_runs``), a warning saying so."""
        shown = self._state_badge(job)
        warning = selectors.job_warning(job)
        if warning is None:
            return shown
        return format_html(
            '{}<div class="duecourse-why duecourse-warning">{}</div>', shown, warning
        )

    def _state_badge(self, job: Job) -> str:
        if job.status == JobStatus.PAUSED:
            return format_html("{}{}", badge("paused", title=job.pause_reason), pause_note(job))
        if job.status == JobStatus.ACTIVE and getattr(job, "last_status", None) in (
            selectors.FAILING
        ):
            return badge("failing", title=f"last run {job.last_status}")
        if job.status == JobStatus.ACTIVE and getattr(job, "is_late", False):
            return badge("late", title="an occurrence is overdue")
        return badge(job.status)

    @admin.display(description="name", ordering="name")
    def job_name(self, job: Job) -> str:
        """The job's name; a job its app made without one, by the row it serves in words."""
        title = getattr(job, "title", None)
        return title if title is not None else selectors.job_titles([job])[job.pk]

    @admin.display(description="schedule")
    def schedule_in_words(self, job: Job) -> str:
        return breakable(selectors.describe_schedule(job.schedule))

    @admin.display(description="next due", ordering="next_due_at")
    def next_due(self, job: Job) -> str:
        """When the job fires next; a paused job is not due (``stages.pauses``)."""
        due = pauses.next_due(job)
        return pauses.not_due_word(job) if due is None else shown(due)

    @admin.display(description="next occurrence (without jitter)")
    def next_occurrence(self, job: Job) -> str:
        """The next occurrence's nominal time; a paused job is not due until resumed."""
        if job.status != JobStatus.ACTIVE:
            return pauses.not_due_word(job)
        return shown(job.next_occurrence_at) if job.next_occurrence_at else "-"

    @admin.display(description="paused")
    def paused_by(self, job: Job) -> str:
        """Who or what paused the job, and when (``stages.pauses``); "-" for a job that runs."""
        return pause_note(job) if job.status == JobStatus.PAUSED else "-"

    @admin.display(description="last run", ordering="last_scheduled_for")
    def last_run(self, job: Job) -> str:
        status = getattr(job, "last_status", None)
        if status is None:
            return "never"
        due: datetime = job.last_scheduled_for
        started: datetime | None = job.last_started_at
        lag = f" · lag {readable.lag(started - due)}" if started else ""
        return format_html("{} {}{}", badge(status), shown(due), lag)

    @admin.display(description="runs")
    def target(self, job: Job) -> str:
        """What the job runs: its task, or its task-table row by the row's own name."""
        return breakable(selectors.describe_target(job))

    # Not sortable: sorting by it would count every job's last day of history.
    @admin.display(description="failures 24 h")
    def failures(self, job: Job) -> int:
        return int(getattr(job, "failures_24h", 0) or 0)

    @admin.display(description="retries (last run)")
    def retries(self, job: Job) -> Any:
        value = getattr(job, "last_retry_count", None)
        return "-" if value is None else value

    # --- the preview of upcoming occurrences (``scheduling.web.admin.previews``)

    def get_urls(self) -> list[Any]:
        info = self.opts.app_label, self.opts.model_name
        own = [
            path(
                "preview/",
                self.admin_site.admin_view(with_csp(self.preview_view, policy=DATA_POLICY)),
                name=f"{info[0]}_{info[1]}_preview",
            ),
            path(
                "<path:object_id>/preview/",
                self.admin_site.admin_view(with_csp(self.preview_view, policy=DATA_POLICY)),
                name=f"{info[0]}_{info[1]}_preview_job",
            ),
        ]
        return own + super().get_urls()

    def preview_view(self, request: HttpRequest, object_id: str | None = None) -> HttpResponse:
        """The next occurrences of the timing in the query string, as JSON (never saves)."""
        job = None
        if object_id is not None:
            job = self.get_object(request, unquote(object_id))
            if job is None:
                return JsonResponse({"errors": {"job": ["no such job"]}}, status=404)
        if not self.has_view_permission(request, job):
            raise PermissionDenied
        return preview_response(request, job=job, now=timezone.now())

    @admin.display(description="next occurrences")
    def upcoming(self, job: Job) -> str:
        if job.pk is None:
            return render_list(None, url=reverse("admin:scheduling_job_preview"))
        url = reverse("admin:scheduling_job_preview_job", args=[quote(job.pk)])
        try:
            found = stage_previews.job_preview(job, count=DEFAULT_COUNT, now=timezone.now())
        except ScheduleError as exc:  # a row saved around the rules
            return format_html("{}", str(exc))
        return render_list(found, url=url, status=job.status)

    @admin.display(description="recent executions")
    def recent_executions(self, job: Job) -> str:
        if job.pk is None:
            return "-"
        return render_to_string(
            "admin/scheduling/job/recent_executions.html",
            {"executions": selectors.recent_executions(job, limit=20)},
        )

    @admin.display(description="changes (newest first)")
    def change_trail(self, job: Job) -> str:
        if job.pk is None:
            return "-"
        return render_to_string(
            "admin/scheduling/job/change_trail.html",
            {
                "changes": [
                    (change, audit.fields_in_words(change))
                    for change in audit.trail(job_id=job.pk, limit=TRAIL_SHOWN)
                ],
                "shown": TRAIL_SHOWN,
            },
        )

    # --- actions

    def _report(self, request: HttpRequest, count: int, singular: str, plural: str) -> None:
        level = messages.SUCCESS if count else messages.WARNING
        self.message_user(request, say(count, singular, plural), level)

    @admin.action(description="Run one occurrence of the selected jobs now", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        count = 0
        for job in queryset:
            try:
                execution_id = api.run_now(job.pk, by=audit.Actor.user(request.user))
            except ValidationError as exc:
                self.message_user(request, f"{job.name}: {' '.join(exc.messages)}", messages.ERROR)
                continue
            self.log_change(request, job, f"Ran now (execution {execution_id}).")
            count += 1
        self._report(
            request, count, "%(count)d job queued to run now.", "%(count)d jobs queued to run now."
        )

    @admin.action(description="Pause the selected jobs (with a reason)", permissions=["change"])
    def pause_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> TemplateResponse | None:
        form = PauseForm(request.POST if "apply" in request.POST else None)
        if form.is_bound and form.is_valid():
            reason = form.cleaned_data["reason"]
            now = timezone.now()
            count = 0
            for job in queryset:
                if controls.pause_job(
                    job=job, now=now, reason=reason, by=audit.Actor.user(request.user)
                ):
                    self.log_change(request, job, f"Paused: {reason}")
                    count += 1
            self._report(request, count, "%(count)d job paused.", "%(count)d jobs paused.")
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Pause jobs",
            "opts": self.model._meta,
            "jobs": list(queryset.select_related("owner")),
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/scheduling/job/pause.html", context)

    @admin.action(description="Resume the selected jobs", permissions=["change"])
    def resume_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        now = timezone.now()
        count = 0
        for job in queryset:
            if controls.resume_job(job=job, now=now, by=audit.Actor.user(request.user)):
                self.log_change(request, job, "Resumed.")
                count += 1
        self._report(request, count, "%(count)d job resumed.", "%(count)d jobs resumed.")

    @admin.action(
        description="Retry the failed executions of the selected jobs", permissions=["change"]
    )
    def retry_failed_executions(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        now = timezone.now()
        count = 0
        for job in queryset:
            retried = controls.retry_failed(job=job, now=now, by=audit.Actor.user(request.user))
            if retried:
                self.log_change(request, job, f"Retried {retried} failed execution(s).")
                count += retried
        self._report(
            request,
            count,
            "%(count)d failed execution retried.",
            "%(count)d failed executions retried.",
        )

    @admin.action(
        description="Cancel the running and queued executions of the selected jobs",
        permissions=["change"],
    )
    def cancel_unfinished_executions(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        count = 0
        reason = f"cancelled in the admin by {request.user.get_username()}"
        for job in queryset:
            cancelled = api.cancel(job.pk, reason=reason, by=audit.Actor.user(request.user))
            if cancelled:
                self.log_change(request, job, f"Cancelled {cancelled} execution(s).")
                count += cancelled
        self._report(
            request, count, "%(count)d execution cancelled.", "%(count)d executions cancelled."
        )
