"""The pages of projects and their participants: the project's participants inline up to a
limit, and their CSV import through a bounded upload.
"""

from __future__ import annotations

from functools import wraps
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.views.decorators.csrf import csrf_exempt, csrf_protect

from emailer import conf, services
from emailer.admin.common import EngineStyles
from emailer.models import Participant, Project
from scheduling.api import (
    ContentSecurityPolicyAdmin,
    ReadableTimesAdmin,
    SafeListAdmin,
    TaskTableAdmin,
)

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
