"""Schedules: when a job's occurrences fall, the one timing of one or more jobs.

A schedule is an interval, a cron expression, a calendar or a single instant, checked by the
timing rules in ``scheduling.timing`` when it is saved, so a bad timing never reaches a claim.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator
from django.db import models
from django.db.models import Max, Q
from django.utils.timezone import now as current_time

from scheduling import conf
from scheduling.models.checks import OneQueryChecks
from scheduling.rules import validation
from scheduling.timing import calendars, readable, schedules
from scheduling.timing.calendars import MAX_TEXT as CALENDAR_MAX_TEXT
from scheduling.timing.schedules import FiringRule, ScheduleError


def _timing_error(exc: ScheduleError) -> ValidationError:
    return ValidationError({exc.field: exc.reason})


class Schedule(OneQueryChecks, models.Model):
    """*When*: an interval, a cron expression or a calendar in a zone, or one instant; shared by
    many jobs.

    A schedule has an owner, as a job has: the user whose job made it (the system owner for
    jobs made from code). Staff users who are not superusers see, share, retime and delete
    only their own (``scheduling.web.admin``); a job whose timing is edited while its schedule is
    shared, or owned by someone else, gets a copy of its own (``edits.edit_job``).
    """

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="owned_schedules"
    )
    name = models.CharField(max_length=200, blank=True, help_text="Optional label for reuse.")
    interval = models.CharField(
        max_length=64, blank=True, help_text="ISO-8601 duration such as PT3H (exact elapsed time)."
    )
    cron = models.CharField(
        max_length=200, blank=True, help_text="Five-field cron expression, in the zone below."
    )
    rrule = models.TextField(
        blank=True,
        validators=[MaxLengthValidator(CALENDAR_MAX_TEXT)],
        help_text="A calendar in the zone below: an RRULE line such as "
        '"FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9", RDATE lines to add dates and EXDATE lines to '
        "drop them (RFC 5545).",
    )
    timezone = models.CharField(
        max_length=64, default="UTC", help_text="IANA zone for cron and calendars."
    )
    run_at = models.DateTimeField(null=True, blank=True, help_text="A single instant (one-off).")
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=current_time, editable=False)

    #: Not stored. Whether a one-off already past may be saved (it runs at once), and the
    #: sentence a refusal ends with: set by the door that saves it (``jobs add --allow-past``,
    #: ``Once(at, allow_past=True)``, the job form's hint); ``validation.past_run_at_error``.
    allow_past = False
    past_hint = validation.PAST_RUN_AT_HINT
    #: The ``run_at`` this row held when read (None for a new row): the rule applies to a
    #: new or changed instant only, so an old one-off stays saveable for other edits.
    saved_run_at: datetime | None = None

    class Meta:
        constraints = [
            models.CheckConstraint(
                name="schedule_exactly_one_kind",
                condition=(
                    Q(~Q(interval=""), cron="", rrule="", run_at__isnull=True)
                    | Q(~Q(cron=""), interval="", rrule="", run_at__isnull=True)
                    | Q(~Q(rrule=""), interval="", cron="", run_at__isnull=True)
                    | Q(interval="", cron="", rrule="", run_at__isnull=False)
                ),
            ),
            models.CheckConstraint(
                name="schedule_end_after_start",
                condition=Q(starts_at__isnull=True)
                | Q(ends_at__isnull=True)
                | Q(ends_at__gt=models.F("starts_at")),
            ),
        ]

    def __str__(self) -> str:
        return self.name or self.describe()

    def save(self, *args: Any, **kwargs: Any) -> None:
        super().save(*args, **kwargs)
        self.saved_run_at = self.run_at

    @classmethod
    def from_db(cls, db: Any, field_names: Any, values: Any, **kwargs: Any) -> Schedule:
        instance = super().from_db(db, field_names, values, **kwargs)
        instance.saved_run_at = instance.__dict__.get("run_at")
        return instance

    def describe(self) -> str:
        if self.interval:
            text = readable.describe_interval(self.interval)
        elif self.cron:
            text = f"cron {self.cron!r} ({self.timezone})"
        elif self.rrule:
            text = f"calendar {' '.join(self.rrule.split())!r} ({self.timezone})"
        else:
            text = f"once at {readable.instant(self.run_at)}" if self.run_at else "once"
        return text

    @property
    def kind(self) -> str:
        if self.rrule:
            return "calendar"
        return "interval" if self.interval else "cron" if self.cron else "once"

    def timing(self) -> FiringRule:
        """The pure view of this schedule; raises ScheduleError naming the bad field."""
        return schedules.timing_from(
            self.interval,
            self.cron,
            self.timezone,
            self.run_at,
            self.starts_at,
            self.ends_at,
            rrule=self.rrule,
            budget=conf.timing_budget(),
        )

    def clean(self) -> None:
        """The schedule's own rules, held against the jitter of every job already on it."""
        errors: dict[str, str] = {}
        if self.name and (found := validation.control_character(self.name)) is not None:
            errors["name"] = f"holds a control character ({found}); a name is one line of text"
        largest = timedelta(0)
        if self.pk is not None:
            largest = self.jobs.aggregate(largest=Max("jitter"))["largest"] or timedelta(0)
        try:
            self.check_timing(jitter=largest)
        except ValidationError as exc:
            errors.update({field: " ".join(found) for field, found in exc.message_dict.items()})
        if errors:
            raise ValidationError(errors)

    def check_timing(self, *, jitter: timedelta) -> None:
        """Raise ValidationError naming the field when this timing cannot be saved for a job
        with ``jitter`` (``schedules.check_savable``)."""
        self.interval = (self.interval or "").strip()
        self.cron = " ".join((self.cron or "").split())
        # Times given in UTC or with TZID are stored as wall times of the job's zone.
        self.rrule = calendars.normalise(self.rrule or "", zone=self.timezone or "UTC")
        try:
            schedules.check_savable(
                self.interval,
                self.cron,
                self.timezone,
                self.run_at,
                self.starts_at,
                self.ends_at,
                now=current_time(),
                jitter=jitter,
                rrule=self.rrule,
                budget=conf.timing_budget(),
            )
        except ScheduleError as exc:
            raise _timing_error(exc) from None
        passed = validation.past_run_at_error(
            self.run_at, now=current_time(), previous=self.saved_run_at, allow_past=self.allow_past
        )
        if passed is not None:
            raise ValidationError({"run_at": f"{passed}; {self.past_hint}"})
