"""The admin: jobs and schedules are edited here; the execution history is read-only.

A job's form holds its whole definition: the target is picked from what is declared
(schedulable tasks and task tables), and the timing is typed on the job itself, or an existing
schedule is chosen to share it. Forms validate through the models' ``clean`` (the same rules and
messages as the command line); saves go through ``scheduling.jobs`` (``create_job``,
``edit_job``), which re-plan the next occurrence. The job list answers "is it healthy?" from
one query (``selectors.with_health``). Actions call one service per row, report counts and
write the admin log.

Ownership: a staff user who is not a superuser sees, changes and acts on only the jobs and
schedules they own and those jobs' history. Every way in (list, change page, delete, history,
bulk actions, autocomplete and raw-id popups) goes through ``get_queryset``, and the object
permissions say the same, so a crafted URL or a posted id of another owner's row finds
nothing.

Permissions: the targets a job's form offers, and accepts when saved, are the ones the user may
target (``scheduling.permissions``); every action that changes state needs the change
permission on jobs (executions' cancel and retry too) and is written to the admin log.
"""

from __future__ import annotations

import re
import zoneinfo
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.widgets import AdminSplitDateTime
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.forms.fields import InvalidJSONInput
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import ngettext

from scheduling import (
    api,
    attempts,
    jobs,
    permissions,
    readable,
    selectors,
    tasktables,
    validation,
)
from scheduling.arguments import ArgumentsFormField
from scheduling.csp import ContentSecurityPolicyAdmin
from scheduling.models import (
    EXECUTION_UNFINISHED,
    Attempt,
    Execution,
    ExecutionStatus,
    Job,
    JobStatus,
    Schedule,
)
from scheduling.tasktables import TASK_ROW_TASK

TABLE_PREFIX = "table:"
#: Badges with a colour of their own in ``scheduling/duecourse.css``; any other is grey.
BADGE_KINDS = frozenset({"active", "failing", "late", "completed", "failed", "retry", "running"})


def badge(text: str, *, title: str = "") -> str:
    """A status as a coloured badge: a class, never a ``style`` attribute, so the page needs no
    inline style under its Content-Security-Policy."""
    kind = text if text in BADGE_KINDS else "other"
    return format_html(
        '<span class="duecourse-badge duecourse-badge-{}" title="{}">{}</span>', kind, title, text
    )


def sees_everything(request: HttpRequest) -> bool:
    return bool(request.user.is_superuser)


def owned_jobs(request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
    """``queryset`` narrowed to the jobs the user may see (all of them for a superuser)."""
    return queryset if sees_everything(request) else queryset.filter(owner=request.user)


def usable_schedules(request: HttpRequest) -> QuerySet[Schedule]:
    """Schedules the user may pick or open: their own (every one, for a superuser)."""
    schedules = Schedule.objects.all()
    return schedules if sees_everything(request) else schedules.filter(owner=request.user)


def describe_target(job: Job) -> str:
    """What a job runs, as a person reads it: the task's name, or the task-table row by its
    own name ("SendEmailTask: invitation"), or why the row cannot be found."""
    if not job.task_table:
        return job.task
    try:
        model = tasktables.get(job.task_table).model
    except LookupError:
        return f"{job.task_table} #{job.task_row_id} (not a task table)"
    row = model._default_manager.filter(pk=job.task_row_id).first()
    name = model._meta.verbose_name
    if row is None:
        return f"{name} #{job.task_row_id} (gone)"
    return f"{name}: {row}"


def _say(count: int, singular: str, plural: str) -> str:
    return ngettext(singular, plural, count) % {"count": count}


#: A date hierarchy walks to the next year, month or day: the calendar's last one has none.
LAST_LISTED_YEAR = 9998


class LedgerAdmin(ContentSecurityPolicyAdmin, admin.ModelAdmin):
    """The engine's admin pages: whatever a list's URL or an action's POST holds, the answer
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

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> Any:
        """Run the chosen action, unless a selected id is not an id at all (a crafted POST)."""
        pk = self.model._meta.pk
        try:
            for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
                pk.to_python(value)
        except ValidationError:
            self.message_user(
                request,
                "The selection holds something that is not an id; nothing was done.",
                messages.WARNING,
            )
            return None
        return super().response_action(request, queryset, *args, **kwargs)


# --- schedules -------------------------------------------------------------------------------


@admin.register(Schedule)
class ScheduleAdmin(LedgerAdmin):
    """Schedules, scoped to their owner as jobs are: a staff user who is not a superuser sees
    only their own, by any URL, and makes schedules that are theirs."""

    list_display = ("__str__", "in_words", "timezone", "job_count")
    search_fields = ("name", "cron", "interval")
    raw_id_fields = ("owner",)  # the owner's name shows beside the field

    def get_list_display(self, request: HttpRequest) -> Any:
        shown = super().get_list_display(request)
        return (*shown, "owner") if sees_everything(request) else shown

    def get_list_filter(self, request: HttpRequest) -> tuple[Any, ...]:
        found: tuple[Any, ...] = (InternalScheduleFilter,)
        return (*found, "owner") if sees_everything(request) else found

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if sees_everything(request) else ("owner",)

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        """A superuser's new schedule is their own unless they name another owner."""
        return {"owner": request.user.pk, **super().get_changeform_initial_data(request)}

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
        return selectors.describe_schedule(schedule)

    @admin.display(description="jobs", ordering="job_total")
    def job_count(self, schedule: Schedule) -> int:
        return int(getattr(schedule, "job_total", 0))

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        if not change and not sees_everything(request):
            obj.owner = request.user
        super().save_model(request, obj, form, change)
        if change:
            now = timezone.now()
            for job in obj.jobs.all():
                jobs.replan_job(job=job, now=now)


# --- the job form ----------------------------------------------------------------------------


def target_choices(current: Job | None, user: Any) -> list[Any]:
    """Grouped choices: the schedulable tasks, then the task tables, that ``user`` may target
    (``scheduling.permissions``); an existing job's own target is kept so its page shows it."""
    tasks = permissions.allowed_task_names(user)
    tables = permissions.allowed_table_labels(user)
    if current is not None and current.task_table and current.task_table not in tables:
        tables.append(current.task_table)
    elif current is not None and current.task and current.task not in tasks:
        tasks.append(current.task)
    return [
        ("", "---------"),
        ("Schedulable tasks", [(name, name) for name in tasks]),
        (
            "Task tables (give the row id below)",
            [(f"{TABLE_PREFIX}{label}", f"a row of {label}") for label in tables],
        ),
    ]


def _zone_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(zoneinfo.available_timezones())]


JOB_POLICY_FIELDS = (
    "misfire",
    "overlap",
    "jitter",
    "timeout",
    "max_retries",
    "max_running",
    "retry_backoff",
    "retry_backoff_max",
    "expires",
    "queue",
    "priority",
)


def _schedule_label(schedule: Schedule) -> str:
    words = selectors.describe_schedule(schedule)
    return f"{schedule.name}: {words}" if schedule.name else f"#{schedule.pk}: {words}"


CRON_HELP = 'Five fields, minute hour day month weekday, such as "0 9 * * 1-5".'
#: Where an error about a field the form does not show is displayed.
ERROR_HOME = {"task_table": "task", "schedule": "existing_schedule"}


class StorableJSONField(ArgumentsFormField):
    """A job's arguments as typed JSON; what PostgreSQL cannot keep is shown again as typed.

    ``validate_job`` refuses JSON text holding NUL or a lone surrogate, naming the field. The
    page that says so shows the field as it was typed, not re-encoded from the parsed value: a
    lone surrogate cannot be written into a UTF-8 page, and the answer would be a 500.
    """

    def bound_data(self, data: Any, initial: Any) -> Any:
        value = super().bound_data(data, initial)
        if not isinstance(value, InvalidJSONInput) and validation.unstorable_text(value):
            return InvalidJSONInput(data)
        return value


class JobForm(forms.ModelForm):
    """A job with its target and its timing on one page (see the module docstring)."""

    #: Set by ``JobAdmin.get_form``: the schedules this user may share, a new job's owner,
    #: and the user whose permissions decide the targets offered and accepted.
    schedule_queryset: QuerySet[Schedule] = Schedule.objects.none()
    owner_for_new: Any = None
    user: Any = AnonymousUser()  # nobody, until the admin says who is asking

    task = forms.ChoiceField(
        label="Target",
        help_text="A schedulable task, or a task table (then give the row id).",
    )
    existing_schedule = forms.ModelChoiceField(
        queryset=Schedule.objects.none(),
        required=False,
        label="Use an existing schedule",
        help_text="Share one schedule between jobs; then leave the timing below as it is.",
    )
    interval = forms.CharField(
        required=False,
        max_length=Schedule._meta.get_field("interval").max_length,
        label="Every",
        help_text="An ISO-8601 duration: PT30S, PT10M, PT3H, P1D.",
    )
    cron = forms.CharField(
        required=False, max_length=Schedule._meta.get_field("cron").max_length, help_text=CRON_HELP
    )
    timezone = forms.ChoiceField(
        choices=_zone_choices, initial="UTC", help_text="The zone the cron expression is read in."
    )
    run_at = forms.SplitDateTimeField(
        required=False,
        widget=AdminSplitDateTime,
        label="Once at",
        help_text="A single instant, instead of an interval or a cron expression.",
    )
    starts_at = forms.SplitDateTimeField(
        required=False, widget=AdminSplitDateTime, label="Start", help_text="No occurrence before."
    )
    ends_at = forms.SplitDateTimeField(
        required=False, widget=AdminSplitDateTime, label="End", help_text="No occurrence after."
    )

    class Meta:
        model = Job
        field_classes = {"args": StorableJSONField, "kwargs": StorableJSONField}
        widgets = {
            "note": forms.Textarea(attrs={"rows": 2, "cols": 60}),
            "args": forms.Textarea(attrs={"rows": 1, "cols": 60}),
            "kwargs": forms.Textarea(attrs={"rows": 1, "cols": 60}),
        }
        fields = (
            "owner",
            "name",
            "note",
            "task",
            "args",
            "kwargs",
            "task_row_id",
            *JOB_POLICY_FIELDS,
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        job = self.instance
        self.fields["task"].choices = target_choices(job if job.pk else None, self.user)
        self.fields["existing_schedule"].queryset = self.schedule_queryset
        self.fields["existing_schedule"].label_from_instance = _schedule_label
        zone = timezone.get_current_timezone_name()
        for name in ("run_at", "starts_at", "ends_at"):
            self.fields[name].help_text += f" In {zone}."
        if job.pk is None and self.owner_for_new is not None:
            job.owner = self.owner_for_new
        if job.task_table:
            self.initial["task"] = f"{TABLE_PREFIX}{job.task_table}"
        if job.schedule_id:
            schedule = job.schedule
            for name in jobs.TIMING_FIELDS:
                self.initial[name] = getattr(schedule, name)
            if schedule.cron:
                words = selectors.describe_cron(schedule.cron)
                # The admin shows help text unescaped; the words may be the expression itself.
                self.fields["cron"].help_text = format_html("{} Reads: {}.", CRON_HELP, words)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        choice = data.get("task") or ""
        if choice.startswith(TABLE_PREFIX):
            self.instance.task_table = choice.removeprefix(TABLE_PREFIX)
            data["task"] = TASK_ROW_TASK
        else:
            self.instance.task_table = ""
            data["task_row_id"] = None
        existing = data.get("existing_schedule")
        retimed = [name for name in jobs.TIMING_FIELDS if name in self.changed_data]
        if existing is not None and retimed:
            self.add_error(
                "existing_schedule",
                "choose an existing schedule or change the timing below, not both",
            )
        elif existing is not None:
            self.instance.schedule = existing
        else:
            cron = " ".join((data.get("cron") or "").split())
            if cron:
                # The bound field copied its help text when fields were cleaned.
                words = selectors.describe_cron(cron)
                self["cron"].help_text = format_html("{} Reads: {}.", CRON_HELP, words)
            self.instance.schedule = Schedule(
                interval=(data.get("interval") or "").strip(),
                cron=cron,
                # The zone belongs to cron alone; the select always holds one.
                timezone=(data.get("timezone") or "UTC") if cron else "UTC",
                run_at=data.get("run_at"),
                starts_at=data.get("starts_at"),
                ends_at=data.get("ends_at"),
            )
        name = data.get("name")
        owner_id = self.instance.owner_id
        if "owner" not in self.fields and name and owner_id is not None:
            taken = Job.objects.filter(owner_id=owner_id, name=name).exclude(pk=self.instance.pk)
            if taken.exists():
                self.add_error("name", f"you already have a job named {name!r}")
        return data

    def _post_clean(self) -> None:
        super()._post_clean()
        self._check_target_permission()

    def _check_target_permission(self) -> None:
        """Refuse a target the user may not point a job at, whatever the POST held.

        Asked for a new job and whenever the target or its arguments differ from the saved
        row (not ``changed_data``, which trusts the posted initial values); a job kept as it was
        (its policies edited, say) keeps the target a superuser or its app's code gave it. A
        target already refused (not among the choices, a missing row) is not asked again.
        """
        job = self.instance
        target = ("task", "task_table", "task_row_id", "args", "kwargs")
        saved = Job.objects.filter(pk=job.pk).values(*target).first() if job.pk else None
        if saved is not None and all(saved[name] == getattr(job, name) for name in target):
            return
        errors = permissions.target_errors(
            self.user, task=job.task, task_table=job.task_table, task_row_id=job.task_row_id
        )
        for field, message in errors.items():
            home = field if field in self.fields else ERROR_HOME[field]
            if home not in self.errors and "task" not in self.errors:
                self.add_error(home, message)

    def _update_errors(self, errors: ValidationError) -> None:
        """Show a model error about a field this form lacks beside the field that sets it."""
        if hasattr(errors, "error_dict"):
            placed: dict[str, list[Any]] = {}
            for field, found in errors.error_dict.items():
                home = field if field in self.fields else ERROR_HOME.get(field, NON_FIELD_ERRORS)
                placed.setdefault(home, []).extend(found)
            errors = ValidationError(placed)
        super()._update_errors(errors)


class PauseForm(forms.Form):
    reason = forms.CharField(
        max_length=validation.MAX_REASON,
        widget=forms.TextInput(attrs={"size": 60}),
        help_text="Shown on the job's page until it is resumed.",
    )

    def clean_reason(self) -> str:
        reason = self.cleaned_data["reason"]
        try:
            validation.check_reason(reason)
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["reason"]) from None
        return reason


# --- the job list ----------------------------------------------------------------------------


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


def _ago(moment: datetime, now: datetime) -> str:
    return readable.ago(moment, now)


@admin.register(Job)
class JobAdmin(LedgerAdmin):
    form = JobForm
    change_list_template = "admin/scheduling/job/change_list.html"
    # What decides a click; failures in 24 h and the last run's retries are on the job's page.
    list_display = (
        "name",
        "target",
        "status_badge",
        "schedule_in_words",
        "next_due",
        "last_run",
    )
    list_display_links = ("name",)
    search_fields = ("name", "task", "note", "owner__username")
    list_select_related = ("owner", "schedule")
    ordering = ("name",)
    raw_id_fields = ("owner",)  # the owner's name shows beside the field
    actions = (
        "run_now",
        "pause_jobs",
        "resume_jobs",
        "retry_failed_executions",
        "cancel_unfinished_executions",
    )
    state_fields = (
        "status",
        "pause_reason",
        "schedule_in_words",
        "failures",
        "retries",
        "next_due_at",
        "next_occurrence_at",
        "current_execution",
        "execute_count",
        "last_keepalive_at",
        "created_at",
        "updated_at",
    )
    readonly_fields = (*state_fields, "recent_executions")
    policy_fields = JOB_POLICY_FIELDS

    # --- who sees what

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        mine = owned_jobs(request, super().get_queryset(request))
        return selectors.with_health(mine, now=timezone.now())

    def _owns(self, request: HttpRequest, obj: Job | None) -> bool:
        return obj is None or sees_everything(request) or obj.owner_id == request.user.pk

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_view_permission(request, obj) and self._owns(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_change_permission(request, obj) and self._owns(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_delete_permission(request, obj) and self._owns(request, obj)

    def get_list_filter(self, request: HttpRequest) -> tuple[Any, ...]:
        found: tuple[Any, ...] = (HealthFilter, InternalFilter, QueueFilter)
        return (*found, "owner") if sees_everything(request) else found

    # --- the form

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list[Any]:
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
                        "run_at",
                        "starts_at",
                        "ends_at",
                    ),
                    "description": "Give an interval, a cron expression or one instant.",
                },
            ),
            ("Policies", {"fields": self.policy_fields, "classes": ("collapse",)}),
        ]
        if obj is not None:
            sets.append(("State", {"fields": self.state_fields}))
            if permissions.may_view(request.user, Execution):  # their errors, workers, attempts
                sets.append(("Recent executions", {"fields": ("recent_executions",)}))
        return sets

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kw: Any):
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
            )
            obj.pk = created.pk
            obj.refresh_from_db()
            return
        data = form.cleaned_data
        changes = {name: data[name] for name in form.changed_data if name in jobs.EDITABLE}
        if {"task", "task_row_id"} & set(changes):
            changes.update(task=obj.task, task_table=obj.task_table, task_row_id=obj.task_row_id)
        existing = data.get("existing_schedule")
        timing = {name: data[name] for name in jobs.TIMING_FIELDS if name in form.changed_data}
        if not data.get("cron"):
            timing.pop("timezone", None)  # ignored without cron, as the form validated it
        jobs.edit_job(
            job=obj, now=now, schedule=existing, timing=None if existing else timing, **changes
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
        to_delete, model_count, perms_needed, protected = super().get_deleted_objects(
            objs, request
        )
        perms_needed.discard(Execution._meta.verbose_name)
        return to_delete, model_count, perms_needed, protected

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        jobs.remove_job(job=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        for job in queryset.select_related("schedule"):
            jobs.remove_job(job=job)

    # --- columns

    @admin.display(description="status", ordering="status")
    def status_badge(self, job: Job) -> str:
        if job.status == JobStatus.PAUSED:
            return badge("paused", title=job.pause_reason)
        if job.status == JobStatus.ACTIVE and getattr(job, "last_status", None) in (
            selectors.FAILING
        ):
            return badge("failing", title=f"last run {job.last_status}")
        if job.status == JobStatus.ACTIVE and getattr(job, "is_late", False):
            return badge("late", title="an occurrence is overdue")
        return badge(job.status)

    @admin.display(description="schedule")
    def schedule_in_words(self, job: Job) -> str:
        return selectors.describe_schedule(job.schedule)

    @admin.display(description="next due", ordering="next_due_at")
    def next_due(self, job: Job) -> str:
        due = job.next_due_at
        if due is None or job.status != JobStatus.ACTIVE:
            return "-"
        words = _ago(due, timezone.now())
        return format_html('<span title="{}">{}</span>', readable.instant(due), words)

    @admin.display(description="last run", ordering="last_scheduled_for")
    def last_run(self, job: Job) -> str:
        status = getattr(job, "last_status", None)
        if status is None:
            return "never"
        due: datetime = job.last_scheduled_for
        started: datetime | None = job.last_started_at
        lag = f" · lag {readable.lag(started - due)}" if started else ""
        return format_html(
            '{} <span title="{}">{}</span>{}',
            badge(status),
            readable.instant(due),
            _ago(due, timezone.now()),
            lag,
        )

    @admin.display(description="runs")
    def target(self, job: Job) -> str:
        """What the job runs: its task, or its task-table row by the row's own name."""
        return describe_target(job)

    # Not sortable: sorting by it would count every job's last day of history.
    @admin.display(description="failures 24 h")
    def failures(self, job: Job) -> int:
        return int(getattr(job, "failures_24h", 0) or 0)

    @admin.display(description="retries (last run)")
    def retries(self, job: Job) -> Any:
        value = getattr(job, "last_retry_count", None)
        return "-" if value is None else value

    @admin.display(description="recent executions")
    def recent_executions(self, job: Job) -> str:
        if job.pk is None:
            return "-"
        return render_to_string(
            "admin/scheduling/job/recent_executions.html",
            {"executions": selectors.recent_executions(job, limit=20)},
        )

    # --- actions

    def _report(self, request: HttpRequest, count: int, singular: str, plural: str) -> None:
        level = messages.SUCCESS if count else messages.WARNING
        self.message_user(request, _say(count, singular, plural), level)

    @admin.action(description="Run one occurrence of the selected jobs now", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        count = 0
        for job in queryset:
            try:
                execution_id = api.run_now(job.pk)
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
                if jobs.pause_job(job=job, now=now, reason=reason):
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
            if jobs.resume_job(job=job, now=now):
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
            retried = jobs.retry_failed(job=job, now=now)
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
            cancelled = api.cancel(job.pk, reason=reason)
            if cancelled:
                self.log_change(request, job, f"Cancelled {cancelled} execution(s).")
                count += cancelled
        self._report(
            request, count, "%(count)d execution cancelled.", "%(count)d executions cancelled."
        )


# --- the history -----------------------------------------------------------------------------


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    fields = ("number", "worker", "pid", "started_at", "finished_at", "outcome", "error")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Execution)
class ExecutionAdmin(LedgerAdmin):
    # What decides a click; the worker, the exact times and the heartbeat are on its page.
    list_display = (
        "job",
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
        return badge(execution.status, title=(execution.last_error or "")[:200])

    @admin.display(description="due", ordering="scheduled_for")
    def due(self, execution: Execution) -> str:
        when = execution.scheduled_for
        return format_html(
            '<span title="{}">{}</span>', readable.instant(when), _ago(when, timezone.now())
        )

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
            if attempts.cancel_execution(execution_id=execution.pk, now=now, reason=reason):
                self.log_change(request, execution, "Cancelled.")
                count += 1
        self.message_user(
            request,
            _say(count, "%(count)d execution cancelled.", "%(count)d executions cancelled."),
            messages.SUCCESS if count else messages.WARNING,
        )

    @admin.action(description="Retry the selected failed executions", permissions=["operate"])
    def retry_executions(self, request: HttpRequest, queryset: QuerySet[Execution]) -> None:
        now = timezone.now()
        count = 0
        for execution in queryset.filter(status=ExecutionStatus.FAILED):
            if jobs.retry_execution(execution_id=execution.pk, now=now):
                self.log_change(request, execution, "Retried.")
                count += 1
        self.message_user(
            request,
            _say(count, "%(count)d execution retried.", "%(count)d executions retried."),
            messages.SUCCESS if count else messages.WARNING,
        )
