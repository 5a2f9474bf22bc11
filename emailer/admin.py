"""The emailer's admin: projects and participants (with CSV import), tasks (with a preview),
and the read-only run history and delivery ledger.

Every write goes through ``emailer.services`` or the model's ``clean``, so the admin refuses
what the command line refuses, with the same reason beside the same field.
"""

from __future__ import annotations

from functools import wraps
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.functional import lazy
from django.utils.html import format_html, format_html_join
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.csrf import csrf_exempt, csrf_protect

from emailer import conf, mailers, sending, services
from emailer.models import (
    Delivery,
    HistoryStatus,
    Participant,
    ParticipantStatus,
    Project,
    SendEmailHistory,
    SendEmailTask,
)
from scheduling.api import (
    ADMIN_STYLESHEET,
    ContentSecurityPolicyAdmin,
    ReadableTimesAdmin,
    SafeListAdmin,
    TaskTableAdmin,
    jobs_for_row,
    shown_time,
)


class EngineStyles:
    """Every page here loads the engine's admin stylesheet: badges, and lists that fit their
    box with Django's navigation sidebar open (``scheduling.api.ADMIN_STYLESHEET``)."""

    css = {"all": (ADMIN_STYLESHEET,)}


def _when(moment: Any) -> str:
    """A time as the engine's pages show it: the instant to the second, its zone named, and
    the time from now beside it (``scheduling.api.shown_time``)."""
    return shown_time(moment)


def _outcome(history: SendEmailHistory | None) -> str:
    """A run in a few words: "completed 12 s ago: 3 sent, 1 failed"."""
    if history is None:
        return "never"
    counts = [
        f"{value} {name}"
        for name in ("sent", "failed", "uncertain", "deferred")
        if (value := getattr(history, name))
    ]
    runs = f" ({history.runs} runs)" if history.runs > 1 else ""
    when = history.last_batch_start_time or history.scheduled_batch_start_time
    return format_html(
        "{}{} {}{}",
        history.status,
        runs,
        _when(when),
        f": {', '.join(counts)}" if counts else "",
    )


#: The HTML preview's own response headers: no fetch but inline styles and ``data:`` images,
#: no script, no form, no plugin, framed only by the admin's own pages, nothing cached, no
#: referrer and no DNS prefetch for links.
PREVIEW_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'self'; sandbox"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-DNS-Prefetch-Control": "off",
    "Cache-Control": "private, no-store",
}


def _preview_for(task: SendEmailTask, viewer: Any) -> Any:
    """The task rendered for ``viewer``: for its first due participant when the viewer may
    see the project's people, else for the sample participant; never with a participant's
    live unsubscribe link, which would unsubscribe them for whoever clicks it."""
    sample = not (
        viewer.has_perm(f"{Participant._meta.app_label}.view_participant")
        or viewer.has_perm(f"{Participant._meta.app_label}.change_participant")
    )
    return services.preview(task, sample=sample, live_link=False)


def _reasons(exc: ValidationError) -> str:
    return "; ".join(f"{field}: {' '.join(why)}" for field, why in exc.message_dict.items())


#: Above this many participants a project page links to them instead of listing them inline.
INLINE_LIMIT = 200
#: Refused import rows shown one per message; the rest are counted.
SHOWN_REFUSALS = 50


class ParticipantInline(ReadableTimesAdmin, admin.TabularInline):
    model = Participant
    fields = ("email", "name", "status", "unsubscribed_at")
    readonly_fields = ("unsubscribed_at",)
    extra = 0


class BoundedUpload(FileUploadHandler):
    """Stops reading an upload past ``EMAILER_IMPORT_MAX_BYTES``: a huge file is neither held
    in memory nor spooled to disk (the rest of the request is read and dropped), and the
    import form says why. The limit itself is the import service's (``read_limited``)."""

    def __init__(self, request: HttpRequest, *, most: int) -> None:
        super().__init__(request)
        self.most = most
        self.stopped = False

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        if start + len(raw_data) > self.most:
            self.stopped = True
            raise StopUpload(connection_reset=False)
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None  # the handlers after this one make the file


def bounded_upload(view: Any) -> Any:
    """``view`` with ``BoundedUpload`` in front of the upload handlers. Handlers can only be
    changed before the request's body is read, and the CSRF check reads it, so the view is
    exempt from the middleware's check and makes the same check itself, afterwards."""
    protected = csrf_protect(view)

    @csrf_exempt
    @wraps(view)
    def bounded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        most = int(conf.get("IMPORT_MAX_BYTES"))
        request.upload_handlers.insert(0, BoundedUpload(request, most=most))
        return protected(request, *args, **kwargs)

    return bounded


class ImportForm(forms.Form):
    file = forms.FileField(help_text="CSV in UTF-8 with the columns email,name[,status].")


@admin.register(Project)
class ProjectAdmin(
    SafeListAdmin, ReadableTimesAdmin, ContentSecurityPolicyAdmin, TaskTableAdmin, admin.ModelAdmin
):
    Media = EngineStyles
    list_display = ("name", "state", "participant_count", "task_count", "created_at")
    list_filter = ("state",)
    search_fields = ("name",)
    readonly_fields = ("participants_link", "tasks_link")
    change_form_template = "admin/emailer/project/change_form.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Project]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                participant_total=Count("participants", distinct=True),
                task_total=Count("tasks", distinct=True),
            )
        )

    @admin.display(description="participants", ordering="participant_total")
    def participant_count(self, obj: Project) -> int:
        return getattr(obj, "participant_total", 0)

    @admin.display(description="tasks", ordering="task_total")
    def task_count(self, obj: Project) -> int:
        return getattr(obj, "task_total", 0)

    def get_inlines(self, request: HttpRequest, obj: Project | None) -> list[Any]:
        if obj is not None and obj.participants.count() > INLINE_LIMIT:
            return []
        return [ParticipantInline]

    @admin.display(description="participants")
    def participants_link(self, obj: Project) -> str:
        if obj.pk is None:
            return "-"
        # The import is the page's "Import participants (CSV)" button, shown to who may import.
        url = reverse("admin:emailer_participant_changelist") + f"?project__id__exact={obj.pk}"
        return format_html('<a href="{}">{} participants</a>', url, obj.participants.count())

    @admin.display(description="tasks")
    def tasks_link(self, obj: Project) -> str:
        if obj.pk is None:
            return "-"
        return format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            (
                (reverse("admin:emailer_sendemailtask_change", args=[t.pk]), t.name)
                for t in obj.tasks.all()
            ),
        ) or "-"

    def get_urls(self) -> list[Any]:
        return [
            path(
                "<path:object_id>/import/",
                self.admin_site.admin_view(bounded_upload(self.import_view)),
                name="emailer_project_import",
            ),
            *super().get_urls(),
        ]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        project = self.get_object(request, unquote(object_id))
        may_import = project is not None and self.may_import(request, project)
        context = {**(extra_context or {}), "may_import": may_import}
        return super().change_view(request, object_id, form_url, context)

    def may_import(self, request: HttpRequest, project: Project) -> bool:
        """An import adds participants and changes existing ones: it needs those permissions
        on participants, as their own pages and the inline ask, and the change permission on
        the project."""
        return (
            self.has_change_permission(request, project)
            and request.user.has_perm(f"{Participant._meta.app_label}.add_participant")
            and request.user.has_perm(f"{Participant._meta.app_label}.change_participant")
        )

    def import_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Upload participants: rows added or updated by email, refused rows by line number."""
        # Like the change page, a malformed id is "no such project" (404), never a 500.
        project = self.get_object(request, unquote(object_id))
        if project is None:
            raise Http404(f"no project with id {object_id!r}")
        if not self.may_import(request, project):
            raise PermissionDenied  # a view-only user is refused the form and the upload alike
        posted = request.method == "POST"
        form = ImportForm(request.POST if posted else None, request.FILES if posted else None)
        stopped = [h for h in request.upload_handlers if getattr(h, "stopped", False)]
        if stopped:  # the upload went past the limit: say so, not "this field is required"
            form.is_valid()
            form.errors.pop("file", None)
            form.add_error("file", services.too_large(stopped[0].most))
        elif posted and form.is_valid():
            try:
                report = services.import_participants_file(
                    project=project, data=services.read_limited(form.cleaned_data["file"])
                )
            except ValidationError as exc:
                form.add_error("file", exc.message_dict.get("file", exc.messages))
            else:
                level = messages.WARNING if report.refused else messages.SUCCESS
                said = (
                    f"{report.added} added, {report.updated} updated, "
                    f"{report.unchanged} unchanged, {len(report.refused)} refused"
                )
                self.message_user(request, said, level)
                self.log_change(request, project, f"Imported participants: {said}.")
                for line, reason in report.refused[:SHOWN_REFUSALS]:
                    self.message_user(request, f"line {line}: {reason}", messages.ERROR)
                if len(report.refused) > SHOWN_REFUSALS:
                    self.message_user(
                        request,
                        f"… and {len(report.refused) - SHOWN_REFUSALS} more refused rows",
                        messages.ERROR,
                    )
                return HttpResponseRedirect(
                    reverse("admin:emailer_project_change", args=[project.pk])
                )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Import participants into {project}",
            "opts": self.model._meta,
            "original": project,
            "form": form,
        }
        return TemplateResponse(request, "admin/emailer/project/import.html", context)


@admin.register(Participant)
class ParticipantAdmin(
    SafeListAdmin, ReadableTimesAdmin, ContentSecurityPolicyAdmin, admin.ModelAdmin
):
    Media = EngineStyles
    list_display = ("email", "name", "status", "project", "unsubscribed_at")
    list_filter = ("project", "status", ("unsubscribed_at", admin.EmptyFieldListFilter))
    search_fields = ("email", "name")
    list_select_related = ("project",)
    readonly_fields = ("unsubscribed_at", "created_at")
    actions = ["unsubscribe"]

    @admin.action(description="Unsubscribe the selected participants", permissions=["change"])
    def unsubscribe(self, request: HttpRequest, queryset: QuerySet[Participant]) -> None:
        now = timezone.now()
        changed = 0
        for participant in queryset:
            if services.unsubscribe_participant(participant=participant, now=now):
                self.log_change(request, participant, "Unsubscribed.")
                changed += 1
        self.message_user(request, f"{changed} participants unsubscribed")


class SendEmailTaskForm(forms.ModelForm):
    statuses = forms.MultipleChoiceField(
        choices=ParticipantStatus.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Participant statuses to mail; none ticked means all.",
    )

    class Meta:
        model = SendEmailTask
        fields = (
            "project",
            "name",
            "from_email",
            "mailer",
            "note",
            "subject",
            "body",
            "html_body",
            "statuses",
            "requires_state",
            "batch_size",
            "rate",
            "once_per_participant",
            "on_uncertain",
        )
        help_texts = {"mailer": lazy(mailers.help_text, str)()}


@admin.register(SendEmailTask)
class SendEmailTaskAdmin(
    SafeListAdmin, ReadableTimesAdmin, ContentSecurityPolicyAdmin, TaskTableAdmin, admin.ModelAdmin
):
    form = SendEmailTaskForm

    class Media:
        css = {"all": (ADMIN_STYLESHEET, "emailer/emailer.css")}

    # What decides a click; the sending knobs are on the task's page.
    list_display = ("name", "project", "schedule", "next_run", "last_run")
    list_filter = ("project",)
    search_fields = ("name", "subject")
    list_select_related = ("project",)
    readonly_fields = ("preview", "schedules", "audience")
    fieldsets = (
        (None, {"fields": ("project", "name", "from_email", "mailer", "note", "audience")}),
        ("Message", {"fields": ("subject", "body", "html_body", "preview")}),
        (
            "Who and how much",
            {
                "fields": (
                    "statuses",
                    "requires_state",
                    "batch_size",
                    "rate",
                    "once_per_participant",
                    "on_uncertain",
                )
            },
        ),
        ("Schedules", {"fields": ("schedules",)}),
    )

    @admin.display(description="preview")
    def preview(self, obj: SendEmailTask) -> str:
        """The saved task rendered for its first due participant: subject and text body as
        text, the HTML part in a sandboxed frame loaded from ``html_preview_view``."""
        if obj.pk is None:
            return "Save the task to see it rendered for a participant."
        viewer = getattr(obj, "viewer", None) or AnonymousUser()  # set by ``get_object``
        try:
            rendered = _preview_for(obj, viewer)
        except ValidationError as exc:
            return format_html('<span class="errornote">{}</span>', _reasons(exc))
        html = format_html(
            '<div class="emailer-preview"><p><strong>Subject:</strong> {}</p>'
            '<pre class="emailer-text-part">{}</pre></div>',
            rendered.subject,
            rendered.body,
        )
        if rendered.html_body:
            html += format_html(
                '<p><strong>HTML:</strong></p><iframe class="emailer-html-preview" sandbox '
                'src="{}" referrerpolicy="no-referrer" title="The HTML part" width="100%" '
                'height="240"></iframe>',
                reverse("admin:emailer_sendemailtask_preview", args=[obj.pk]),
            )
        return html

    def get_urls(self) -> list[Any]:
        return [
            path(
                "<path:object_id>/preview.html",
                self.admin_site.admin_view(self.html_preview_view),
                name="emailer_sendemailtask_preview",
            ),
            *super().get_urls(),
        ]

    @method_decorator(xframe_options_sameorigin)  # framed by the task's own page, no other
    def html_preview_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The task's HTML part as its own document, under a policy of its own.

        A mail's HTML may load remote images, styles and scripts; opened in the admin, they
        would tell the author (or anyone whose address is in it) who looked and when. This
        response forbids every fetch but inline styles and ``data:`` images, runs no script
        (the policy's ``sandbox``, and the frame's), and is shown only framed by the admin's
        own pages. The header is set here, on this response, so a project's own policy
        (Django 6's ``SECURE_CSP``) neither loosens nor replaces it.
        """
        task = self.get_object(request, unquote(object_id))
        if task is None:
            raise Http404(f"no task with id {object_id!r}")
        if not self.has_view_or_change_permission(request, task):
            raise PermissionDenied
        try:
            html = _preview_for(task, request.user).html_body
        except ValidationError as exc:
            response = HttpResponse(_reasons(exc), content_type="text/plain; charset=utf-8")
        else:
            if not html:
                raise Http404("this task has no HTML part")
            response = HttpResponse(html, content_type="text/html; charset=utf-8")
        for header, value in PREVIEW_HEADERS.items():
            response[header] = value
        return response

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """Each listed task carries the jobs this request's user may see, for the schedule
        columns (the admin object is shared by every request: nothing per user is kept on it).
        """
        changelist = super().get_changelist_instance(request)
        for task in changelist.result_list:  # evaluated once, and the page renders these rows
            task.jobs_seen = jobs_for_row(task, visible_to=request.user)
        return changelist

    def _jobs(self, task: SendEmailTask) -> list[Any]:
        return list(getattr(task, "jobs_seen", ()))

    @admin.display(description="schedule")
    def schedule(self, task: SendEmailTask) -> str:
        found = self._jobs(task)
        return "; ".join(j.schedule for j in found) if found else "not scheduled"

    @admin.display(description="next run")
    def next_run(self, task: SendEmailTask) -> str:
        due = [j.next_due for j in self._jobs(task) if j.next_due is not None]
        return _when(min(due)) if due else "-"

    @admin.display(description="last run")
    def last_run(self, task: SendEmailTask) -> str:
        return _outcome(task.history.order_by("-scheduled_batch_start_time", "-id").first())

    @admin.display(description="audience")
    def audience(self, task: SendEmailTask) -> str:
        """Whether anybody is left to mail now, and if not, why."""
        if task.pk is None:
            return "-"
        reason = sending.why_not_due(task, sending.selection_for(task, timezone.now()))
        if reason is None:
            return "participants are due: the next run mails them"
        return format_html('<strong class="emailer-exhausted">Exhausted</strong>: {}', reason)

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        task = super().get_object(request, object_id, from_field)
        if task is not None:
            task.viewer = request.user  # whose jobs "jobs that run this task" lists
        return task

    @admin.display(description="jobs that run this task")
    def schedules(self, obj: SendEmailTask) -> str:
        if obj.pk is None:
            return "-"
        # Only the jobs the viewer may see (``get_object`` says who is looking).
        found = jobs_for_row(obj, visible_to=getattr(obj, "viewer", None) or AnonymousUser())
        if not found:
            return "none yet: `manage.py emailer task schedule NAME --cron ...`"
        # Each job by its name in words (a job made for this task without a name reads as
        # the task does, "email "welcome" of project Acme"), as the engine's pages name it.
        return format_html_join(
            "",
            "<div>{} · {} · next {}</div>",
            (
                (j.title, j.schedule, _when(j.next_due) if j.next_due else j.not_due_word)
                for j in found
            ),
        )


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
                _when(history.scheduled_batch_start_time),
                _when(history.last_batch_start_time),
            )
        return _when(history.scheduled_batch_start_time)

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
        return _when(delivery.occurrence)

    # Append-only for everyone, superusers too: the next run reads the ledger to know who has
    # had the mail, so a delivery deleted here would mail that participant again.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
