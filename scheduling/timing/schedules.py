"""Schedule arithmetic: when occurrences fall; what a claim does about missed ones is
``scheduling.timing.claim_plans``.

Pure by design: plain values in, aware UTC datetimes out; no ORM and no clock. Everything that
decides *when* lives here so it can be tested exhaustively with a fixed ``now``.

Rules worth knowing:

- Interval schedules count exact elapsed time from their anchor (the schedule's start, or the
  job's creation), so daylight-saving changes never make them run twice or skip a run.
  ``P1D`` is 24 hours, not "the same wall time tomorrow"; use cron for wall-clock times.
  Months and years have no fixed length and are refused.
- Cron schedules follow the wall clock of their zone; see ``scheduling.timing.cron`` for what
  they do when the clocks change. Calendar schedules (RFC 5545 ``RRULE``/``RDATE``/``EXDATE``,
  ``scheduling.timing.calendars``) are read in their zone the same way. The zone belongs to
  cron and calendars alone: an interval counts elapsed time and an instant carries its own
  offset, so a schedule saved with either and another zone is refused rather than silently
  read in UTC.
- A window ``[start, end]`` bounds every kind: nothing before start, nothing after end.
- Occurrences stay within the calendar (up to the year 9999). A schedule whose next occurrence
  would fall beyond it is refused when saved (``check_savable``); asked anyway,
  ``FiringRule.next_after`` raises ScheduleError naming the field rather than OverflowError.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scheduling.conf import RETRY_DELAY_LIMIT
from scheduling.timing.budgets import DEFAULT_SECONDS, Budget, OverBudget
from scheduling.timing.calendars import CalendarError, CalendarOverBudget, CalendarRule
from scheduling.timing.cron import CronError, CronExpression

_EPSILON = timedelta(microseconds=1)
#: Longer text is not a duration anyone means (``P1DT12H30M15.5S`` is 15 characters).
MAX_DURATION_TEXT = 64

_DURATION = re.compile(
    r"^P(?!$)(?:(?P<years>\d+(?:[.,]\d+)?)Y)?(?:(?P<months>\d+(?:[.,]\d+)?)M)?"
    r"(?:(?P<weeks>\d+(?:[.,]\d+)?)W)?(?:(?P<days>\d+(?:[.,]\d+)?)D)?"
    r"(?:T(?=\d)(?:(?P<hours>\d+(?:[.,]\d+)?)H)?(?:(?P<minutes>\d+(?:[.,]\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:[.,]\d+)?)S)?)?$"
)


class ScheduleError(ValueError):
    """Invalid schedule input; ``field`` names the offending field for forms and commands."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class OverTimingBudget(ScheduleError):
    """Working out the timing took longer than its budget (``budgets.Budget``): refused when
    saved, and a job whose timing does this at run time is paused (``claims``)."""

    def __init__(self, field: str, seconds: float) -> None:
        super().__init__(
            field,
            f"its next occurrence cannot be found within the timing budget of "
            f"{seconds * 1000:g} ms of CPU (SCHEDULING_TIMING_BUDGET_MS); simplify the rule "
            "(fewer BYxxx values, fewer dates)",
        )
        self.seconds = seconds


ONE_KIND = "give exactly one of an interval, a cron expression, a calendar (rrule) or one instant"


class Misfire(StrEnum):
    CATCH_UP = "catch_up"
    COALESCE = "coalesce"
    SKIP = "skip"


class Backlog(StrEnum):
    """What a claim does with the occurrences that came due while the job waited.

    The job's overlap policy picks it (``models.OVERLAP_BACKLOG``): ``forbid`` and ``allow``
    leave it to the misfire policy, ``buffer_all`` runs each in turn, ``buffer_one`` and
    ``cancel_other`` run the newest only.
    """

    MISFIRE = "misfire"  # the misfire policy decides
    ALL = "all"  # every one runs, one claim (and one run) at a time, in order
    LATEST = "latest"  # the newest due one runs; the ones before it are superseded


def parse_duration(text: str, *, field: str = "interval") -> timedelta:
    """Parse an ISO-8601 duration such as ``PT3H`` or ``P1DT12H`` into a positive timedelta.

    A duration longer than Python can hold (``P9999999999D``) is refused naming the field,
    as is text longer than any duration needs (``MAX_DURATION_TEXT``).
    """
    if len(text) > MAX_DURATION_TEXT:
        raise ScheduleError(
            field, f"is {len(text)} characters long; a duration is at most {MAX_DURATION_TEXT}"
        )
    raw = text.strip().upper()
    if raw.startswith("-"):
        raise ScheduleError(field, f"{text!r} is negative; an interval must be positive")
    match = _DURATION.match(raw)
    if not match:
        raise ScheduleError(
            field, f"{text!r} is not an ISO-8601 duration (examples: PT30S, PT3H, P1DT12H, P1W)"
        )
    parts = {k: float(v.replace(",", ".")) for k, v in match.groupdict().items() if v}
    if parts.get("years") or parts.get("months"):
        raise ScheduleError(
            field,
            f"{text!r} uses months or years, which have no fixed length; "
            "use a cron expression for calendar schedules",
        )
    try:
        value = timedelta(
            weeks=parts.get("weeks", 0),
            days=parts.get("days", 0),
            hours=parts.get("hours", 0),
            minutes=parts.get("minutes", 0),
            seconds=parts.get("seconds", 0),
        )
    except OverflowError:
        raise ScheduleError(
            field, f"{text!r} is longer than any calendar ({timedelta.max.days:,} days at most)"
        ) from None
    if value < timedelta(seconds=1):
        raise ScheduleError(field, f"{text!r} is shorter than one second; it must be at least PT1S")
    return value


def format_duration(value: timedelta) -> str:
    """The canonical ISO-8601 spelling of ``value`` (``PT3H``, ``P1DT30M``)."""
    total = value.total_seconds()
    days, rest = divmod(int(total), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    fraction = total - int(total)
    out = "P" + (f"{days}D" if days else "")
    time = ""
    if hours:
        time += f"{hours}H"
    if minutes:
        time += f"{minutes}M"
    if seconds or fraction:
        time += f"{seconds + fraction:g}S"
    return out + ("T" + time if time else "") if (days or time) else "PT0S"


def parse_zone(name: str, *, field: str = "timezone") -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(field, f"{name!r} is not a known IANA time zone") from None


def parse_cron(text: str, *, field: str = "cron") -> CronExpression:
    try:
        return CronExpression.parse(text)
    except CronError as exc:
        raise ScheduleError(field, str(exc)) from None


def parse_rrule(
    text: str, *, field: str = "rrule", budget: float = DEFAULT_SECONDS
) -> CalendarRule:
    """The calendar ``text``; ``budget`` (seconds of CPU) bounds the check that it fires."""
    try:
        return CalendarRule.parse(text, budget=Budget(budget))
    except CalendarOverBudget:
        raise OverTimingBudget(field, budget) from None
    except CalendarError as exc:
        raise ScheduleError(field, str(exc)) from None


def require_aware(value: datetime, *, field: str) -> datetime:
    """Reject naive datetimes at the boundary and normalise to UTC.

    An instant whose UTC time falls outside the calendar (``0001-01-01T00:00+09:00`` is in the
    year 0 in UTC) is refused naming the field; Python cannot hold it, nor can a due time.
    """
    if not isinstance(value, datetime):
        raise ScheduleError(field, f"must be a date and time, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ScheduleError(
            field, "must include a time zone offset (for example 2030-01-01T09:00Z)"
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ScheduleError(
            field, f"{value.isoformat()} falls outside the years 1 to 9999 in UTC"
        ) from None


@dataclass(frozen=True)
class FiringRule:
    """Everything that decides when a schedule fires, in plain values.

    Exactly one of ``interval``, ``cron``, ``calendar`` and ``at`` is set. ``anchor`` is where
    interval counting starts when the schedule has no start of its own (the job's creation
    time); a calendar counts its ``INTERVAL`` and ``COUNT`` from there too. ``budget`` is the
    CPU time (seconds) one ``next_after`` may take unless its caller gives a ``Budget``.
    """

    interval: timedelta | None = None
    cron: CronExpression | None = None
    zone: ZoneInfo = field(default_factory=lambda: ZoneInfo("UTC"))
    at: datetime | None = None
    start: datetime | None = None
    end: datetime | None = None
    calendar: CalendarRule | None = None
    budget: float = DEFAULT_SECONDS

    def __post_init__(self) -> None:
        kinds = sum(x is not None for x in (self.interval, self.cron, self.calendar, self.at))
        if kinds != 1:
            raise ScheduleError("schedule", ONE_KIND)
        for name in ("at", "start", "end"):
            value = getattr(self, name)
            if value is not None:
                # Stored in UTC: Python adds timedeltas to a zoned datetime in wall-clock time
                # and compares same-zone datetimes ignoring the fold, so a zoned start would
                # make intervals follow DST (23- or 25-hour days, or the same instant twice).
                object.__setattr__(self, name, require_aware(value, field=name))
        if self.start and self.end and self.end <= self.start:
            raise ScheduleError("end", "must be after start")
        if self.at and self.start and self.at < self.start:
            raise ScheduleError("at", "is before the schedule's start")
        if self.at and self.end and self.at > self.end:
            raise ScheduleError("at", "is after the schedule's end")

    def occurrence_at_or_after(
        self, when: datetime, *, anchor: datetime, budget: Budget | None = None
    ) -> datetime | None:
        """The first occurrence at or after ``when``, or None when the schedule is over."""
        return self.next_after(when - _EPSILON, anchor=anchor, budget=budget)

    def next_after(
        self, after: datetime, *, anchor: datetime, budget: Budget | None = None
    ) -> datetime | None:
        """The first occurrence strictly after ``after``, or None when the schedule is over.

        Raises ScheduleError (field ``interval`` or ``cron``) when that occurrence would fall
        beyond the calendar, and OverTimingBudget (field ``rrule``) when a calendar needs more
        than ``budget`` (a fresh one of ``self.budget`` seconds when not given) to find it.
        """
        if self.start is not None and after < self.start:
            after = self.start - _EPSILON
        candidate: datetime | None
        if self.interval is not None:
            base = (self.start if self.start is not None else anchor).astimezone(UTC)
            if after < base:
                candidate = base
            else:
                steps = (after - base) // self.interval + 1
                try:
                    candidate = base + self.interval * steps
                except OverflowError:
                    raise ScheduleError(
                        "interval",
                        f"{format_duration(self.interval)} puts the next occurrence "
                        "beyond the year 9999",
                    ) from None
        elif self.cron is not None:
            try:
                candidate = self.cron.next_after(after, self.zone)
            except CronError as exc:
                raise ScheduleError("cron", str(exc)) from None
        elif self.calendar is not None:
            base = self.start if self.start is not None else anchor
            spend = budget or Budget(self.budget)
            try:
                candidate = self.calendar.next_after(after, self.zone, anchor=base, budget=spend)
            except CalendarError as exc:
                raise ScheduleError("rrule", str(exc)) from None
            except OverBudget:
                raise OverTimingBudget("rrule", spend.seconds) from None
        else:
            assert self.at is not None
            candidate = self.at if self.at > after else None
        if candidate is None or (self.end is not None and candidate > self.end):
            return None
        return candidate.astimezone(UTC)

    def occurrences(self, after: datetime, *, anchor: datetime) -> Iterator[datetime]:
        """Occurrences strictly after ``after``, in order, until the schedule ends."""
        current = self.next_after(after, anchor=anchor)
        while current is not None:
            yield current
            current = self.next_after(current, anchor=anchor)


def timing_from(
    interval: str,
    cron: str,
    zone: str,
    at: datetime | None,
    start: datetime | None,
    end: datetime | None,
    *,
    rrule: str = "",
    budget: float = DEFAULT_SECONDS,
) -> FiringRule:
    """Build a FiringRule from a schedule's stored values; errors name the schedule's fields.

    ``budget`` is the CPU time (seconds) parsing the calendar and each ``next_after`` may take
    (the engine passes ``SCHEDULING_TIMING_BUDGET_MS``).
    """
    if sum(bool(x) for x in (interval, cron, rrule, at)) != 1:
        raise ScheduleError("interval", ONE_KIND)
    for name, value in (("run_at", at), ("starts_at", start), ("ends_at", end)):
        if value is not None:
            require_aware(value, field=name)
    if start and end and end <= start:
        raise ScheduleError("ends_at", "must be after starts_at")
    try:
        return FiringRule(
            interval=parse_duration(interval) if interval else None,
            cron=parse_cron(cron) if cron else None,
            calendar=parse_rrule(rrule, budget=budget) if rrule else None,
            zone=parse_zone(zone or "UTC"),
            budget=budget,
            at=at,
            start=start,
            end=end,
        )
    except ScheduleError as exc:
        renamed = {"at": "run_at", "start": "starts_at", "end": "ends_at"}
        if exc.field not in renamed:
            raise
        raise ScheduleError(renamed[exc.field], exc.reason) from None


def check_savable(
    interval: str,
    cron: str,
    zone: str,
    at: datetime | None,
    start: datetime | None,
    end: datetime | None,
    *,
    now: datetime,
    jitter: timedelta = timedelta(0),
    rrule: str = "",
    budget: float = DEFAULT_SECONDS,
) -> FiringRule:
    """``timing_from`` plus the rules for saving a schedule; errors name the stored field.

    Kept apart from ``timing_from``, which the claim also runs on rows already saved, so that
    a rule added here never turns an existing job into a failing one. ``jitter`` is the
    largest jitter of the jobs that use the schedule: their first two due times (occurrence
    plus jitter) must stay within the calendar too, or saving the job would overflow.

    ``budget`` (seconds of CPU) bounds the whole check: a calendar whose first two occurrences
    cannot be found within it is refused (OverTimingBudget, one line naming ``rrule``), since
    every claim of the job would have to find them again.
    """
    timing = timing_from(interval, cron, zone, at, start, end, rrule=rrule, budget=budget)
    wrong_zone = zone_error(interval, cron, zone, rrule=rrule)
    if wrong_zone is not None:
        raise ScheduleError("timezone", wrong_zone)
    # The first occurrence from now and the one after it: a schedule whose next occurrence
    # cannot be computed would otherwise fail on every claim.
    spend = Budget(budget)
    first = timing.at
    if first is None:
        first = timing.occurrence_at_or_after(now, anchor=now, budget=spend)
    second = None
    if first is not None and timing.at is None:
        second = timing.next_after(first, anchor=now, budget=spend)
    if first is None and timing.calendar is not None:
        raise ScheduleError(
            "rrule", "has no occurrence from now on (its COUNT, UNTIL or the end has passed)"
        )
    for occurrence in (first, second):
        if occurrence is not None and jitter and not fits_after(occurrence, jitter):
            field = "run_at" if timing.at is not None else kind_field(timing)
            raise ScheduleError(
                field,
                f"the occurrence at {occurrence.isoformat()} plus {jitter.total_seconds():g} s "
                "of jitter falls beyond the year 9999",
            )
    return timing


def kind_field(timing: FiringRule) -> str:
    """The stored field that holds the timing's kind (``interval``, ``cron``, ``rrule``)."""
    if timing.cron is not None:
        return "cron"
    if timing.calendar is not None:
        return "rrule"
    return "run_at" if timing.at is not None else "interval"


def zone_error(interval: str, cron: str, zone: str, *, rrule: str = "") -> str | None:
    """Why ``zone`` cannot go with this kind of schedule, or None: a zone other than UTC
    belongs to a cron expression or a calendar alone (the model's rule, and the command
    lines' before it)."""
    if cron or rrule or (zone or "UTC") == "UTC":
        return None
    kind = "an interval counts elapsed time" if interval else "an instant carries its offset"
    return f"{zone!r} applies to a cron expression or a calendar only; {kind}, so leave it UTC"


#: The longest a process waits before it looks again at an occurrence whose task it does not
#: know: short enough that a new release's scheduler takes it within a minute of starting.
AWAIT_TASK_LONGEST = timedelta(seconds=60)


def awaiting_delay(*, waited: timedelta, grace: timedelta) -> timedelta:
    """How long an occurrence whose task this process does not know is left alone.

    As long as it has waited already (at least a second, at most ``AWAIT_TASK_LONGEST``), so
    a process that never learns the task looks at it a few times in the first seconds of a
    deploy and then once a minute, never past the end of its ``grace``.
    """
    delay = min(max(waited, timedelta(seconds=1)), AWAIT_TASK_LONGEST)
    return max(min(delay, grace - waited), timedelta(0))


def fits_after(moment: datetime, span: timedelta) -> bool:
    """Whether ``moment + span`` is still a time Python can hold (before the year 10000)."""
    try:
        moment + span
    except OverflowError:
        return False
    return True


def due_time(job_id: int, occurrence: datetime, jitter: timedelta) -> datetime:
    """When an occurrence is dispatched: its nominal time plus the job's stable jitter."""
    return occurrence + jitter_offset(job_id, occurrence, jitter)


def jitter_offset(job_id: int, occurrence: datetime, jitter: timedelta) -> timedelta:
    """A stable offset in ``[0, jitter)`` for one occurrence of one job.

    Derived from a hash, not a random draw, so every scheduler process (and every restart of
    one) agrees on when a jittered occurrence is due.
    """
    span = int(jitter.total_seconds() * 1_000_000)
    if span <= 0:
        return timedelta(0)
    key = f"{job_id}:{occurrence.astimezone(UTC).isoformat()}".encode()
    digest = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
    return timedelta(microseconds=digest % span)


#: Doublings past this change nothing: 2**64 times the smallest base outgrows any cap.
_MAX_DOUBLINGS = 64


def retry_delay(*, attempt: int, base: float, cap: float, key: int) -> timedelta:
    """Capped exponential backoff with deterministic jitter before retry number ``attempt``.

    The delay is ``min(cap, base * 2**(attempt-1))`` scaled into ``[50%, 100%]`` by a hash of
    ``key`` (the execution), so a burst of failures does not come back as a burst.

    It cannot overflow, whatever the row holds: the doublings stop at 64, and the delay is
    held to ``[0, conf.RETRY_DELAY_LIMIT]`` (a base or cap of 1e308, NaN or a negative number
    written behind the model), so the failure handler that calls it always records the task's
    error and its retry.
    """
    raw = base * 2.0 ** min(max(0, attempt - 1), _MAX_DOUBLINGS)
    digest = hashlib.blake2b(f"{key}:{attempt}".encode(), digest_size=4).digest()
    spread = int.from_bytes(digest, "big") / 2**32
    return bounded_delay(min(cap, raw) * (0.5 + spread / 2))


def bounded_delay(seconds: float) -> timedelta:
    """``seconds`` as a delay of zero to ``conf.RETRY_DELAY_LIMIT`` (NaN counts as zero)."""
    if not seconds > 0:  # also NaN
        return timedelta(0)
    return timedelta(seconds=min(float(seconds), RETRY_DELAY_LIMIT))
