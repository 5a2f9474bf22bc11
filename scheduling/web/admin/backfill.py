"""The job list's *Backfill…* action: a range, a preview of what it makes, then the backfill.

Three steps on one page, as Django's delete confirmation does: the action asks for ``From``
and ``To`` (ISO-8601 instants with an offset, read by the commands' own parser, so naive
input is refused here as on the command line); *Preview* lists, per selected job, the
occurrences the backfill would make (a dry run of ``scheduling.api.backfill``, nothing
written); *Backfill* makes them and reports the count per job ("12 occurrences backfilled
for nightly-report").

Every step is checked server-side: the change permission on jobs (the action's own), the
change permission on each job (a staff user's own jobs only, ``JobAdmin.has_change_permission``),
and the rules that bind a job made by hand (``scheduling.rules.permissions``): no internal
task table, and only a target the user may point a job at. A job that fails a check is
named and left out; nothing is made for it.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import ngettext

from scheduling import api
from scheduling.models import Job
from scheduling.rules import permissions
from scheduling.stages.audit import Actor
from scheduling.stages.backfill import check_range
from scheduling.timing import readable
from scheduling.timing.values import parse_instant

#: How each field of the verb is named on this page.
LABELS = {"start": "From", "end": "To", "range": "From/To"}
INSTANT_HELP = "An ISO-8601 instant with an offset, such as 2030-01-01T00:00Z."


class BackfillForm(forms.Form):
    start = forms.CharField(
        label="From",
        max_length=64,
        help_text=f"{INSTANT_HELP} Included.",
        widget=forms.TextInput(attrs={"size": 30}),
    )
    end = forms.CharField(
        label="To",
        max_length=64,
        help_text=f"{INSTANT_HELP} Excluded; not later than now (the scheduler owns the future).",
        widget=forms.TextInput(attrs={"size": 30}),
    )

    def clean_start(self) -> Any:
        return _instant(self.cleaned_data["start"], "start")

    def clean_end(self) -> Any:
        return _instant(self.cleaned_data["end"], "end")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("start") and data.get("end"):
            try:
                check_range(start=data["start"], end=data["end"], now=timezone.now())
            except ValidationError as exc:
                for field, errors in exc.message_dict.items():
                    self.add_error(field, errors)
        return data


def _instant(raw: str, field: str) -> Any:
    try:
        return parse_instant(raw, field=field)
    except ValidationError as exc:
        raise ValidationError(exc.message_dict[field]) from None


def refusal(user: Any, job: Job) -> str | None:
    """Why ``user`` may not backfill ``job`` beyond the change permission, or None."""
    if job.task_table:
        internal = permissions.internal_refusal(job.task_table)
        if internal is not None:
            return internal
    errors = permissions.target_errors(
        user, task=job.task, task_table=job.task_table, task_row_id=job.task_row_id
    )
    return "; ".join(errors.values()) or None


def said(error: ValidationError) -> str:
    """A refusal of the verb in this page's words."""
    return "; ".join(
        f"{LABELS.get(field, field)}: {' '.join(reasons)}"
        for field, reasons in error.message_dict.items()
    )


@admin.action(description="Backfill…", permissions=["change"])
def backfill_jobs(
    modeladmin: Any, request: HttpRequest, queryset: QuerySet[Job]
) -> TemplateResponse | None:
    """Ask for the range, preview it, then backfill each selected job (module docstring)."""
    allowed: list[Job] = []
    for job in queryset.select_related("owner", "schedule"):
        refused = (
            "you may not change it"
            if not modeladmin.has_change_permission(request, job)
            else refusal(request.user, job)
        )
        if refused is None:
            allowed.append(job)
        else:
            modeladmin.message_user(request, f"{job.name}: {refused}", messages.ERROR)
    if not allowed:
        return None
    stepping = "preview" in request.POST or "apply" in request.POST
    form = BackfillForm(request.POST if stepping else None)
    previews: list[dict[str, Any]] = []
    if form.is_bound and form.is_valid():
        start, end = form.cleaned_data["start"], form.cleaned_data["end"]
        now = timezone.now()
        if "apply" in request.POST:
            _apply(modeladmin, request, allowed, start=start, end=end, now=now)
            return None
        for job in allowed:
            try:
                result = api.backfill(job.pk, start=start, end=end, now=now, dry_run=True)
            except ValidationError as exc:
                previews.append({"job": job, "error": said(exc)})
            else:
                previews.append({"job": job, "result": result})
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Backfill jobs",
        "opts": modeladmin.model._meta,
        "jobs": allowed,
        "form": form,
        "previews": previews,
        "confirmable": any("result" in item and item["result"].count for item in previews),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "admin/scheduling/job/backfill.html", context)


def _apply(
    modeladmin: Any, request: HttpRequest, jobs: list[Job], *, start: Any, end: Any, now: Any
) -> None:
    for job in jobs:
        try:
            result = api.backfill(
                job.pk, start=start, end=end, now=now, by=Actor.user(request.user)
            )
        except ValidationError as exc:
            modeladmin.message_user(request, f"{job.name}: {said(exc)}", messages.ERROR)
            continue
        text = ngettext(
            "%(count)d occurrence backfilled for %(job)s",
            "%(count)d occurrences backfilled for %(job)s",
            result.count,
        ) % {"count": result.count, "job": job.name}
        if result.held:
            text += f" ({result.held} already in the ledger)"
        if result.count:
            modeladmin.log_change(
                request,
                job,
                f"Backfilled {result.count} occurrence(s) from {readable.instant(start)} "
                f"to {readable.instant(end)}.",
            )
        modeladmin.message_user(
            request, text, messages.SUCCESS if result.count else messages.WARNING
        )
