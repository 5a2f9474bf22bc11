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

from scheduling.models import JOB_POLICY_FIELDS, Job, Schedule
from scheduling.pages.times import ZonedSplitDateTime
from scheduling.rules import permissions, tasktables, validation
from scheduling.rules.arguments import ArgumentsFormField
from scheduling.rules.tasktables import TASK_ROW_TASK
from scheduling.stages import edits, selectors
from scheduling.timing.calendar_words import describe_calendar
from scheduling.timing.calendars import MAX_TEXT as CALENDAR_MAX_TEXT
from scheduling.timing.calendars import normalise as normalise_calendar

TABLE_PREFIX = "table:"
#: Rows of a task table offered by name in the target's dropdown; a bigger table's other rows
#: are reached by their id (its "another row" choice and the row id box).
ROWS_OFFERED = 200


def row_choice(label: str, row_id: Any) -> str:
    """The target's value for one row of a task table: ``table:<label>:<id>``."""
    return f"{TABLE_PREFIX}{label}:{row_id}"


def _table_choices(label: str, user: Any, current: Job | None) -> list[tuple[str, str]]:
    """A task table's rows that ``user`` may target, by name, then any row by its id."""
    try:
        rows = list(permissions.targetable_rows(user, label)[: ROWS_OFFERED + 1])
        name = tasktables.get(label).model._meta.verbose_name
    except LookupError:  # an existing job's table that is no longer declared
        rows, name = [], label
    choices = [(row_choice(label, row.pk), f"{name}: {row}") for row in rows[:ROWS_OFFERED]]
    if current is not None and current.task_table == label and current.task_row_id is not None:
        mine = row_choice(label, current.task_row_id)
        if mine not in dict(choices):
            choices.append((mine, f"{name} #{current.task_row_id}"))
    more = "another row" if len(rows) > ROWS_OFFERED else "a row"
    return [*choices, (f"{TABLE_PREFIX}{label}", f"{more} of {label}, by its id (below)")]


def target_choices(current: Job | None, user: Any) -> list[Any]:
    """Grouped choices: the schedulable tasks, then each task table's rows, that ``user`` may
    target (``scheduling.rules.permissions``), rows by their name; an existing job's own target
    is kept so its page shows it."""
    tasks = permissions.allowed_task_names(user)
    tables = permissions.allowed_table_labels(user)
    if current is not None and current.task_table and current.task_table not in tables:
        tables.append(current.task_table)
    elif current is not None and current.task and current.task not in tasks:
        tasks.append(current.task)
    return [
        ("", "---------"),
        ("Schedulable tasks", [(name, name) for name in tasks]),
        *((f"Rows of {label}", _table_choices(label, user, current)) for label in tables),
    ]


def _zone_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(zoneinfo.available_timezones())]




def _schedule_label(schedule: Schedule) -> str:
    words = selectors.describe_schedule(schedule)
    return f"{schedule.name}: {words}" if schedule.name else f"#{schedule.pk}: {words}"


CRON_HELP = 'Five fields, minute hour day month weekday, such as "0 9 * * 1-5".'
RRULE_HELP = (
    "RFC 5545 lines in the zone beside cron: an RRULE such as "
    '"FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9", RDATE lines to add dates and EXDATE lines to '
    'drop them ("EXDATE:20261225" drops that day).'
)
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
        help_text="A schedulable task, or a task-table row by its name (another row: by its id).",
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
    rrule = forms.CharField(
        required=False,
        max_length=CALENDAR_MAX_TEXT,
        label="Calendar",
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=RRULE_HELP,
    )
    timezone = forms.ChoiceField(
        choices=_zone_choices,
        initial="UTC",
        help_text="The zone the cron expression or the calendar is read in.",
    )
    run_at = forms.SplitDateTimeField(
        required=False,
        widget=ZonedSplitDateTime,
        label="Once at",
        help_text="A single instant, instead of an interval, a cron expression or a calendar.",
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
            self.initial["task"] = row_choice(job.task_table, job.task_row_id)
        if job.schedule_id:
            schedule = job.schedule
            for name in edits.TIMING_FIELDS:
                self.initial[name] = getattr(schedule, name)
            if schedule.cron:
                words = selectors.describe_cron(schedule.cron)
                # The admin shows help text unescaped; the words may be the expression itself.
                self.fields["cron"].help_text = format_html("{} Reads: {}.", CRON_HELP, words)
            if schedule.rrule:
                words = describe_calendar(schedule.rrule, schedule.timezone)
                self.fields["rrule"].help_text = format_html("{} Reads: {}.", RRULE_HELP, words)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        choice = data.get("task") or ""
        if choice.startswith(TABLE_PREFIX):
            label, _, row_id = choice.removeprefix(TABLE_PREFIX).partition(":")
            self.instance.task_table = label
            data["task"] = TASK_ROW_TASK
            if row_id:  # a row picked by name (the choices offered were only allowed rows)
                data["task_row_id"] = int(row_id)
        else:
            self.instance.task_table = ""
            data["task_row_id"] = None
        existing = data.get("existing_schedule")
        retimed = [name for name in edits.TIMING_FIELDS if name in self.changed_data]
        if existing is not None and retimed:
            self.add_error(
                "existing_schedule",
                "choose an existing schedule or change the timing below, not both",
            )
        elif existing is not None:
            self.instance.schedule = existing
        else:
            previous = self.instance.schedule.run_at if self.instance.schedule_id else None
            self.instance.schedule = timing_schedule(data)
            if "timezone" in self.changed_data:
                # A zone chosen for an interval or an instant is refused beside the zone
                # (``schedules.zone_error``), as ``--tz`` is on the command line; one left as
                # it was (a cron job retimed to an interval) goes with the cron expression.
                self.instance.schedule.timezone = data.get("timezone") or "UTC"
            # A one-off already past is refused (validation.past_run_at_error) when it is new
            # or changed, beside "Once at", with this page's way to run a job now.
            self.instance.schedule.saved_run_at = previous
            self.instance.schedule.past_hint = validation.PAST_RUN_AT_ADMIN_HINT
            cron, rrule = self.instance.schedule.cron, self.instance.schedule.rrule
            if cron:
                # The bound field copied its help text when fields were cleaned.
                words = selectors.describe_cron(cron)
                self["cron"].help_text = format_html("{} Reads: {}.", CRON_HELP, words)
            if rrule:
                words = describe_calendar(rrule, self.instance.schedule.timezone)
                self["rrule"].help_text = format_html("{} Reads: {}.", RRULE_HELP, words)
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
        """Show a model error about a field this form lacks beside the field that sets it.

        A field the form refused already (a name too long, a required one left empty) never
        reached the model, which judged the value it had instead: its error about that field
        would describe what was not typed ("must not be empty" under a 300-character name).
        """
        if hasattr(errors, "error_dict"):
            placed: dict[str, list[Any]] = {}
            for field, found in errors.error_dict.items():
                home = field if field in self.fields else ERROR_HOME.get(field, NON_FIELD_ERRORS)
                if home != NON_FIELD_ERRORS and home in self._errors:
                    continue
                placed.setdefault(home, []).extend(found)
            errors = ValidationError(placed)
        super()._update_errors(errors)


def timing_schedule(data: dict[str, Any]) -> Schedule:
    """An unsaved schedule from a form's cleaned timing fields (the job's form, the preview)."""
    cron = " ".join((data.get("cron") or "").split())
    rrule = normalise_calendar(data.get("rrule") or "")
    return Schedule(
        interval=(data.get("interval") or "").strip(),
        cron=cron,
        rrule=rrule,
        # The zone belongs to cron and calendars alone; the select always holds one.
        timezone=(data.get("timezone") or "UTC") if cron or rrule else "UTC",
        run_at=data.get("run_at"),
        starts_at=data.get("starts_at"),
        ends_at=data.get("ends_at"),
    )


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
