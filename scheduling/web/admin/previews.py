"""The job page's preview of upcoming occurrences, and its JSON endpoint.

The page lists the next ``DEFAULT_COUNT`` occurrences of the saved timing; while the timing
fields are edited, ``scheduling/static/scheduling/timing_preview.js`` asks the endpoint for
those of the unsaved timing and replaces the list. The endpoint reads and never saves: it runs
the posted timing fields through the job form's own fields and the schedule's own rules
(``Schedule.check_timing``), answers their errors by field, and otherwise the occurrences
(``scheduling.stages.previews``). It needs the view permission on jobs (on the job, for a
job's page).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.http import HttpRequest, JsonResponse
from django.template.loader import render_to_string

from scheduling.models import Job, JobStatus
from scheduling.stages import edits, previews
from scheduling.timing import readable
from scheduling.timing.previews import DEFAULT_COUNT, Preview
from scheduling.web.admin.forms import JobForm, timing_schedule


class TimingForm(forms.Form):
    """The job form's timing fields alone, with the same fields and the same rules."""

    #: The job's jitter, held against the calendar's end as saving does.
    jitter = Job._meta.get_field("jitter").get_default()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in edits.TIMING_FIELDS:
            self.fields[name] = copy.deepcopy(JobForm.base_fields[name])

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        schedule = timing_schedule(data)
        try:
            schedule.clean_fields(exclude=["owner", "name"])
            schedule.check_timing(jitter=self.jitter)
        except ValidationError as exc:
            for field, messages in exc.message_dict.items():
                self.add_error(field if field in self.fields else None, messages)
        self.schedule = schedule
        return data


def occurrence_rows(preview: Preview) -> list[dict[str, str]]:
    """Each occurrence in the timing's zone and in UTC, as every time an operator reads
    ("2026-11-30 18:00:00 CET", ``scheduling.timing.readable``), with its UTC offset and the instant
    in ISO 8601 for machines (the ``<time>`` element's ``datetime``)."""
    return [
        {
            "local": readable.instant(moment, preview.zone),
            "utc": readable.instant(moment, UTC),
            "offset": moment.strftime("%z"),
            "machine": moment.astimezone(UTC).isoformat(timespec="seconds"),
        }
        for moment in preview.occurrences
    ]


def notes(preview: Preview, *, status: str = JobStatus.ACTIVE) -> list[str]:
    """What the list leaves out: a job that is not active, the schedule's end, an error."""
    found = []
    if status != JobStatus.ACTIVE:
        found.append(f"The job is {status}: it runs these only if it is resumed.")
    if preview.ended:
        found.append(f"The schedule ends after {len(preview.occurrences)} more.")
    if preview.error is not None:
        found.append(str(preview.error))
    if preview.note:
        found.append(preview.note)
    return found


def render_list(preview: Preview | None, *, url: str, status: str = JobStatus.ACTIVE) -> str:
    """The list as the job page shows it, inside the element the script refreshes."""
    return render_to_string(
        "admin/scheduling/job/timing_preview.html",
        {
            "url": url,
            "rows": occurrence_rows(preview) if preview is not None else [],
            "notes": notes(preview, status=status) if preview is not None else [],
            "zone": str(preview.zone) if preview is not None else "",
        },
    )


def preview_response(request: HttpRequest, *, job: Job | None, now: datetime) -> JsonResponse:
    """The endpoint's answer for the posted (query string) timing fields."""
    form = TimingForm(request.GET)
    if job is not None:
        form.jitter = job.jitter
    if not form.is_valid():
        errors = {field: [str(m) for m in found] for field, found in form.errors.items()}
        return JsonResponse({"errors": errors}, status=400)
    preview = previews.timing_preview(
        form.schedule,
        count=DEFAULT_COUNT,
        now=now,
        anchor=job.created_at if job is not None else None,
    )
    status = job.status if job is not None else JobStatus.ACTIVE
    return JsonResponse(
        {
            "zone": str(preview.zone),
            "occurrences": occurrence_rows(preview),
            "notes": notes(preview, status=status),
        }
    )
