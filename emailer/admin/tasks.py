"""The pages of send-email tasks: their form, the preview in a sandboxed frame with its own
headers, and their schedules and runs.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.functional import lazy
from django.utils.html import format_html, format_html_join
from django.views.decorators.clickjacking import xframe_options_sameorigin

from emailer import mailers, sending, services
from emailer.admin.common import outcome, reasons, shown
from emailer.models import Participant, ParticipantStatus, SendEmailTask
from scheduling.api import (
    ADMIN_STYLESHEET,
    ContentSecurityPolicyAdmin,
    ReadableTimesAdmin,
    SafeListAdmin,
    TaskTableAdmin,
    jobs_for_row,
)

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


def preview_for(task: SendEmailTask, viewer: Any) -> Any:
    """The task rendered for ``viewer``: for its first due participant when the viewer may
    see the project's people, else for the sample participant; never with a participant's
    live unsubscribe link, which would unsubscribe them for whoever clicks it."""
    sample = not (
        viewer.has_perm(f"{Participant._meta.app_label}.view_participant")
        or viewer.has_perm(f"{Participant._meta.app_label}.change_participant")
    )
    return services.preview(task, sample=sample, live_link=False)


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
            rendered = preview_for(obj, viewer)
        except ValidationError as exc:
            return format_html('<span class="errornote">{}</span>', reasons(exc))
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
            html = preview_for(task, request.user).html_body
        except ValidationError as exc:
            response = HttpResponse(reasons(exc), content_type="text/plain; charset=utf-8")
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
        return shown(min(due)) if due else "-"

    @admin.display(description="last run")
    def last_run(self, task: SendEmailTask) -> str:
        return outcome(task.history.order_by("-scheduled_batch_start_time", "-id").first())

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
                (j.title, j.schedule, shown(j.next_due) if j.next_due else j.not_due_word)
                for j in found
            ),
        )
