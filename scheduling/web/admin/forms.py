"""The job's form (its target, its timing and its policies on one page) and the pause form.

A job's form holds its whole definition: the target is picked from what is declared
(schedulable tasks and task tables), and the timing is typed on the job itself, or an existing
schedule is chosen to share it. Forms validate through the models' ``clean`` (the same rules and
messages as the command line). The targets the form offers, and accepts when saved, are the
ones the user may target (``scheduling.rules.permissions``).
"""

from __future__ import annotations

import zoneinfo
from typing import Any

from django import forms
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db.models import QuerySet
from django.forms.fields import InvalidJSONInput
from django.utils.html import format_html

from scheduling.admintimes import ZonedSplitDateTime
from scheduling.models import Job, Schedule
from scheduling.rules import permissions, validation
from scheduling.rules.arguments import ArgumentsFormField
from scheduling.rules.tasktables import TASK_ROW_TASK
from scheduling.stages import jobs, selectors

TABLE_PREFIX = "table:"


def target_choices(current: Job | None, user: Any) -> list[Any]:
    """Grouped choices: the schedulable tasks, then the task tables, that ``user`` may target
    (``scheduling.rules.permissions``); an existing job's own target is kept so its page shows
    it."""
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
    "pause_after_failures",
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
        widget=ZonedSplitDateTime,
        label="Once at",
        help_text="A single instant, instead of an interval or a cron expression.",
    )
    starts_at = forms.SplitDateTimeField(
        required=False, widget=ZonedSplitDateTime, label="Start", help_text="No occurrence before."
    )
    ends_at = forms.SplitDateTimeField(
        required=False, widget=ZonedSplitDateTime, label="End", help_text="No occurrence after."
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
