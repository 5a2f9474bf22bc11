"""Every timing has a bounded cost: the rules that stalled the scheduler are answered or refused
within ``SCHEDULING_TIMING_BUDGET_MS``, wherever they are evaluated.

Work is counted where it can be (a budget whose clock ticks once per check counts the steps of
an expansion); the promises that are about time (the preview answers within a second) are
asserted with a generous margin.
"""

from __future__ import annotations

import gc
import itertools
import time
from datetime import UTC, date, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from scheduling.models import Job, JobChange, JobChangeAction, JobStatus, Schedule
from scheduling.stages import claims
from scheduling.timing import calendars
from scheduling.timing.budgets import Budget, OverBudget
from scheduling.timing.calendar_words import describe_calendar
from scheduling.timing.calendars import CalendarError, CalendarOverBudget, CalendarRule
from scheduling.timing.previews import preview
from scheduling.timing.schedules import (
    OverTimingBudget,
    ScheduleError,
    check_savable,
    timing_from,
)
from tests.factories import create_job
from tests.scheduling.test_admin_jobs import form_data

pytestmark = pytest.mark.specification

NOW = datetime(2026, 5, 3, 12, 0, tzinfo=UTC)  # a Sunday, which the schedbomb rule leaves out
SECONDS = ",".join(str(s) for s in range(60))
NOOP = "scheduling.diagnostics.noop"


def exdates(days: list[date]) -> list[str]:
    return [
        "EXDATE:" + ",".join(f"{d:%Y%m%d}" for d in days[i : i + 50])
        for i in range(0, len(days), 50)
    ]


def schedbomb(now: datetime) -> str:
    """An RDATE soon, then a rule of every second of Monday to Saturday, every one of those
    days excluded for about sixteen months (3,989 characters in the report)."""
    days = [now.date() + timedelta(days=i) for i in range(1, 500)]
    weekdays = [d for d in days if d.weekday() != 6][:410]
    rdate = f"RDATE:{now + timedelta(seconds=100):%Y%m%dT%H%M%S}"
    rule = f"FREQ=MINUTELY;BYDAY=MO,TU,WE,TH,FR,SA;BYSECOND={SECONDS}"
    return "\n".join([rule, rdate, *exdates(weekdays)])


def every_second_excluded(now: datetime, days: int = 412) -> str:
    """Every second, every day excluded for 412 days."""
    listed = [now.date() + timedelta(days=i) for i in range(days)]
    return "\n".join([f"FREQ=MINUTELY;BYSECOND={SECONDS}", *exdates(listed)])


HOURLY_EVERY_SECOND = f"FREQ=HOURLY;BYMINUTE={SECONDS};BYSECOND={SECONDS}"
HOURS = ",".join(str(h) for h in range(24))
EVERY_SECOND_OF_THE_DAY = f"BYHOUR={HOURS};BYMINUTE={SECONDS};BYSECOND={SECONDS}"
LEAP_MONDAY = "BYMONTH=2;BYMONTHDAY=29;BYDAY=MO"  # 2044-02-29, then 2072
#: BYSETPOS picks among a period's whole set (3,600 times an hour, 31 million a year), which
#: dateutil builds for each period, matching or not: 5.5 s of CPU before these were refused.
HOURLY_FIRST_OF_A_LEAP_MONDAY = (
    f"FREQ=HOURLY;{LEAP_MONDAY};BYMINUTE={SECONDS};BYSECOND={SECONDS};BYSETPOS=1"
)
HOURLY_FIRST_OF_FEBRUARY_30 = HOURLY_FIRST_OF_A_LEAP_MONDAY.replace("=29;", "=30;")
YEARLY_LAST_OF_A_LEAP_MONDAY = f"FREQ=YEARLY;{LEAP_MONDAY};{EVERY_SECOND_OF_THE_DAY};BYSETPOS=-1"
#: Every 1,000th minute counted from midnight is a multiple of 40 minutes into some day; these
#: minutes never are, so the rule never fires, which only walking every day of the horizon,
#: 1,368 times a day, would prove: refused when the proof runs out of its budget.
OFF_THE_GRID = "FREQ=MINUTELY;INTERVAL=1000;BYMINUTE=" + ",".join(
    str(m) for m in range(60) if m % 20
)
#: Shapes that pick from large sets, or walk long for few days, with their next occurrence
#: after NOW, or what their one-line refusal says.
BYSETPOS_AND_SPARSE_RULES = {
    "hourly, leap monday": (HOURLY_FIRST_OF_A_LEAP_MONDAY, datetime(2044, 2, 29, tzinfo=UTC)),
    "hourly, february 30": (HOURLY_FIRST_OF_FEBRUARY_30, "never fires"),
    "yearly, leap monday": (
        YEARLY_LAST_OF_A_LEAP_MONDAY,
        datetime(2044, 2, 29, 23, 59, 59, tzinfo=UTC),
    ),
    "daily, every second": (
        f"FREQ=DAILY;{EVERY_SECOND_OF_THE_DAY};BYSETPOS=1,-1",
        datetime(2026, 5, 3, 23, 59, 59, tzinfo=UTC),
    ),
    "yearly, mondays": (
        f"FREQ=YEARLY;BYDAY=MO;{EVERY_SECOND_OF_THE_DAY};BYSETPOS=-2",
        datetime(2026, 12, 28, 23, 59, 58, tzinfo=UTC),
    ),
    "minutely, leap monday": (
        f"FREQ=MINUTELY;{LEAP_MONDAY};BYSECOND={SECONDS};BYSETPOS=-1",
        datetime(2044, 2, 29, 0, 0, 59, tzinfo=UTC),
    ),
    "monthly, week 53": (
        f"FREQ=MONTHLY;BYWEEKNO=53;BYDAY=MO;BYMINUTE={SECONDS};BYSECOND={SECONDS};BYSETPOS=3",
        datetime(2026, 12, 28, 0, 0, 2, tzinfo=UTC),
    ),
    "week 53 of february": ("FREQ=YEARLY;BYWEEKNO=53;BYMONTH=2;BYDAY=MO;BYHOUR=9", "never fires"),
    "first day of a leap year, a monday": (
        f"FREQ=YEARLY;BYYEARDAY=-366;BYDAY=MO;{EVERY_SECOND_OF_THE_DAY}",
        datetime(2052, 1, 1, tzinfo=UTC),
    ),
    "interval 1000, count": (
        f"FREQ=MINUTELY;INTERVAL=1000;COUNT=10000;{LEAP_MONDAY};BYSECOND={SECONDS}",
        datetime(2044, 2, 29, 2, 40, tzinfo=UTC),
    ),
    "a position past every minute": ("FREQ=MINUTELY;BYSECOND=0,30;BYSETPOS=3", "never fires"),
    "minutely, never on its grid": (OFF_THE_GRID, "timing budget"),
}
#: Counted from the anchor's midnight: every second from noon, 10,000 of them.
COUNTED = f"FREQ=MINUTELY;BYHOUR=12,13,14,15;BYSECOND={SECONDS};COUNT=10000"


class Steps:
    """A clock for a Budget that ticks once per check: the budget counts steps, not time."""

    def __init__(self) -> None:
        self.count = itertools.count()

    def __call__(self) -> float:
        return float(next(self.count))


def steps_to_next(text: str, after: datetime, *, limit: int = 10**9) -> tuple[datetime | None, int]:
    clock = Steps()
    budget = Budget(limit, clock=clock)
    found = CalendarRule.parse(text).next_after(after, UTC, anchor=after, budget=budget)
    return found, next(clock.count)


# --- the attacks, pure


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("schedbomb", schedbomb(NOW), NOW + timedelta(seconds=100)),
        ("every second excluded", every_second_excluded(NOW), datetime(2027, 6, 19, tzinfo=UTC)),
        ("hourly every second", HOURLY_EVERY_SECOND, NOW + timedelta(seconds=1)),
    ],
)
def test_the_reported_rules_find_their_next_occurrence_in_a_few_hundred_steps(
    name: str, text: str, expected: datetime
) -> None:
    """They generated every second of the excluded days (35 million for 412 days); excluded
    days now cost a step each."""
    assert len(text) <= 4000
    found, steps = steps_to_next(text, NOW)
    assert found == expected
    assert steps < 5_000, name


def test_after_the_schedbombs_rdate_the_rule_skips_sixteen_months_of_excluded_days() -> None:
    text = schedbomb(NOW)
    found, steps = steps_to_next(text, NOW + timedelta(seconds=100))
    assert found is not None and found.date() > NOW.date() + timedelta(days=470)
    assert found.weekday() != 6
    assert steps < 5_000


@pytest.mark.parametrize(
    "text",
    [
        schedbomb(NOW),
        every_second_excluded(NOW),
        HOURLY_EVERY_SECOND,
        COUNTED,
        "FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO",  # 2044-02-29, 18 years on
        "FREQ=HOURLY;BYMONTH=12",  # asked in May: seven months of days without a match
        f"FREQ=DAILY;BYHOUR=12;BYMINUTE={SECONDS};BYSECOND={SECONDS}",  # 3,600 a day
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=17",
    ],
    ids=["schedbomb", "412 days", "hourly", "count", "rare", "december", "noon", "bysetpos"],
)
def test_accepted_rules_are_saved_and_previewed_within_the_budget(text: str) -> None:
    timing = check_savable("", "", "UTC", None, None, None, now=NOW, rrule=text)
    listed = preview(timing, now=NOW, anchor=NOW, count=10)
    assert listed.error is None and not listed.cut_short
    assert len(listed.occurrences) == 10 or listed.ended


def test_a_count_rule_expands_once_per_anchor_and_asks_little_after() -> None:
    rule = CalendarRule.parse(COUNTED)
    near_end = NOW + timedelta(seconds=9_990)
    rule.next_after(near_end, UTC, anchor=NOW)
    clock = Steps()
    found = rule.next_after(near_end, UTC, anchor=NOW, budget=Budget(10**9, clock=clock))
    assert found == NOW + timedelta(seconds=9_991)
    assert next(clock.count) < 50
    assert rule.next_after(NOW + timedelta(seconds=9_999), UTC, anchor=NOW) is None


def test_a_rule_past_its_budget_raises_over_budget_naming_the_rrule_field() -> None:
    timing = timing_from("", "", "UTC", None, None, None, rrule=HOURLY_EVERY_SECOND)
    with pytest.raises(OverTimingBudget) as caught:
        timing.next_after(NOW, anchor=NOW, budget=Budget(0, clock=Steps()))
    assert caught.value.field == "rrule"
    assert str(caught.value).startswith("rrule: its next occurrence cannot be found within")
    with pytest.raises(OverBudget):
        CalendarRule.parse(HOURLY_EVERY_SECOND).next_after(
            NOW, UTC, anchor=NOW, budget=Budget(0, clock=Steps())
        )


def test_a_rule_that_needs_more_than_the_budget_is_refused_at_save_in_one_line() -> None:
    with pytest.raises(OverTimingBudget) as caught:
        check_savable("", "", "UTC", None, None, None, now=NOW, rrule=COUNTED, budget=1e-7)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith("rrule: ")


def test_the_preview_stops_when_its_time_is_spent_and_says_so() -> None:
    timing = timing_from("", "", "UTC", None, None, None, rrule="FREQ=DAILY")
    listed = preview(timing, now=NOW, anchor=NOW, count=100, total=Budget(0, clock=Steps()))
    assert len(listed.occurrences) == 1
    assert listed.cut_short and "finding more would take longer" in listed.note


@pytest.mark.parametrize(
    ("text", "expected"), BYSETPOS_AND_SPARSE_RULES.values(), ids=BYSETPOS_AND_SPARSE_RULES
)
def test_bysetpos_and_sparse_rules_are_refused_or_answered_within_the_budget(
    text: str, expected: datetime | str
) -> None:
    """Each is refused in one line or saved and previewed, every step within the default
    50 ms budget; BYSETPOS picks its positions by arithmetic, never building a period's set."""
    try:
        timing = check_savable("", "", "UTC", None, None, None, now=NOW, rrule=text)
    except ScheduleError as exc:
        assert isinstance(expected, str), exc
        assert exc.field == "rrule" and expected in exc.reason and "\n" not in str(exc)
        return
    assert timing.next_after(NOW, anchor=NOW) == expected
    listed = preview(timing, now=NOW, anchor=NOW, count=10)
    assert listed.error is None and not listed.cut_short
    assert len(listed.occurrences) == 10


@pytest.mark.parametrize(
    "text",
    [HOURLY_FIRST_OF_A_LEAP_MONDAY, HOURLY_FIRST_OF_FEBRUARY_30, YEARLY_LAST_OF_A_LEAP_MONDAY],
    ids=["leap monday", "february 30", "yearly"],
)
def test_bysetpos_rules_are_parsed_and_proved_in_a_few_hundred_steps(text: str) -> None:
    """Eighteen (or fifty, proving it never fires) years of days, a step a year or a day."""
    clock = Steps()
    budget = Budget(10**9, clock=clock)
    try:
        CalendarRule.parse(text + "\nEXDATE:20000101", budget=budget).next_after(
            NOW, UTC, anchor=NOW, budget=budget
        )
    except CalendarError as exc:
        assert "never fires" in str(exc)
    assert next(clock.count) < 2_000


def test_a_set_over_the_budget_when_parsed_is_a_calendar_error_every_caller_reports() -> None:
    """The proof that a set fires is bounded too; its refusal is a CalendarError, so the
    callers that explain a set (``describe_calendar``) give the text back, and the ones that
    check it refuse it naming rrule, never raising OverBudget. A refusal is kept: asking
    again costs nothing."""
    text = OFF_THE_GRID + "\nEXDATE:20010101"
    started = time.thread_time()
    with pytest.raises(CalendarOverBudget):
        CalendarRule.parse(text)
    assert time.thread_time() - started < 1.0  # the proof's 250 ms, with a generous margin
    assert describe_calendar(text, "UTC") == " ".join(text.split())
    with pytest.raises(OverTimingBudget) as caught:
        timing_from("", "", "UTC", None, None, None, rrule=text)
    assert str(caught.value).startswith("rrule: its next occurrence cannot be found within")
    clock = Steps()
    with pytest.raises(CalendarOverBudget):
        CalendarRule.parse(text, budget=Budget(0.1, clock=clock))
    assert next(clock.count) == 1  # read once, when the budget was made


def test_garbage_collection_in_the_thread_is_not_spent_from_the_budget() -> None:
    """A full collection of a large heap takes longer than a whole budget; it is the
    process's debt, so a cheap rule whose allocation sets one off is neither refused nor
    paused. The CPU the rule's own work takes still counts."""
    heap: list[dict[str, Any]] = []
    collected = 0.0
    while collected < 0.02 and len(heap) < 4_000_000:
        heap.extend({"n": [i]} for i in range(len(heap), len(heap) * 2 + 100_000))
        started = time.thread_time()
        gc.collect()
        collected = time.thread_time() - started
    assert collected >= 0.02, "a collection long enough to outlast the budget"
    budget = Budget(collected / 2)
    gc.collect()
    assert not budget.exceeded
    budget.check()
    spin = time.thread_time() + collected
    while time.thread_time() < spin:
        pass
    assert budget.exceeded
    del heap


# --- the doors


@pytest.mark.django_db
def test_the_model_refuses_a_rule_over_the_setting_naming_rrule(owner: Any, settings: Any) -> None:
    """The RDATE fires, so the set is parsed; its occurrence after that is the one no walk
    of the rule finds within the budget."""
    settings.SCHEDULING_TIMING_BUDGET_MS = 1
    soon = timezone.now() + timedelta(days=1)
    schedule = Schedule(rrule=f"{OFF_THE_GRID}\nRDATE:{soon:%Y%m%dT%H%M%S}", timezone="UTC")
    with pytest.raises(ValidationError) as caught:
        schedule.full_clean(exclude=["owner", "name"])
    assert list(caught.value.message_dict) == ["rrule"]
    assert "timing budget of 1 ms" in caught.value.message_dict["rrule"][0]


@pytest.mark.django_db
def test_a_view_only_user_gets_the_preview_of_any_reported_rule_within_a_second(
    client: Client, django_user_model: Any
) -> None:
    staff = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(staff)
    now = timezone.now()
    for text in (every_second_excluded(now), schedbomb(now), HOURLY_EVERY_SECOND):
        started = time.thread_time()
        response = client.get(
            "/admin/scheduling/job/preview/",
            {"interval": "", "cron": "", "rrule": text, "timezone": "UTC"},
        )
        assert time.thread_time() - started < 1.0  # CPU: what a busy machine does not inflate
        assert response.status_code == 200, response.content[:300]
        assert response.json()["occurrences"]


@pytest.mark.django_db
def test_a_job_whose_timing_outgrows_the_budget_at_run_time_runs_what_was_due_and_is_paused(
    owner: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saved under a larger budget (or before a deploy made it slower): the claim runs the
    occurrence that was due, pauses the job naming the reason, records the pause on the audit
    trail, and serves the other jobs of the batch. The scheduler is a process of its own,
    which has not expanded the rule's 10,000 occurrences of 2044-02-29 when it claims."""
    now = timezone.now().replace(microsecond=0)
    soon = now + timedelta(seconds=30)
    counted = f"FREQ=MINUTELY;{LEAP_MONDAY};BYSECOND={SECONDS};COUNT=10000"
    rrule = f"{counted}\nRDATE:{soon:%Y%m%dT%H%M%S}"
    heavy = create_job(owner=owner, name="heavy", task=NOOP, rrule=rrule, now=now)
    light = create_job(owner=owner, name="light", task=NOOP, every="PT2S", now=now)
    settings.SCHEDULING_TIMING_BUDGET_MS = 1
    monkeypatch.setattr(calendars, "_PARSED", {})
    calendars._parse.cache_clear()
    claims.claim_due_jobs(now=soon + timedelta(seconds=1), limit=10)
    heavy.refresh_from_db()
    light.refresh_from_db()
    assert heavy.status == JobStatus.PAUSED
    assert "timing budget of 1 ms" in heavy.pause_reason
    assert heavy.executions.filter(scheduled_for=soon).exists()
    change = JobChange.objects.filter(job_id=heavy.pk, action=JobChangeAction.PAUSED).get()
    assert change.changes["pause_reason"]["to"] == heavy.pause_reason
    assert light.status == JobStatus.ACTIVE and light.executions.exists()
    assert not Job.objects.filter(status=JobStatus.PAUSED).exclude(pk=heavy.pk).exists()


@pytest.mark.django_db
def test_a_job_whose_calendar_parse_outgrows_the_budget_at_claim_time_runs_and_is_paused(
    owner: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its calendar was saved when proving that it fires cost less (or the row was written
    behind the model); a fresh scheduler process cannot prove it within the budget now. The
    occurrence that was due runs, the job is paused naming the budget, and the pause is on
    the audit trail, never an occurrence failed as an invalid schedule."""
    now = timezone.now().replace(microsecond=0)
    heavy = create_job(owner=owner, name="heavy", task=NOOP, every="PT10S", now=now)
    Schedule.objects.filter(pk=heavy.schedule_id).update(
        interval="", rrule=OFF_THE_GRID + "\nEXDATE:20010101"
    )
    settings.SCHEDULING_TIMING_BUDGET_MS = 1
    monkeypatch.setattr(calendars, "_PARSED", {})
    monkeypatch.setattr(calendars, "_REFUSED", {})
    calendars._parse.cache_clear()
    due = heavy.next_occurrence_at
    claims.claim_due_jobs(now=heavy.next_due_at + timedelta(seconds=1), limit=10)
    heavy.refresh_from_db()
    assert heavy.status == JobStatus.PAUSED
    assert heavy.pause_reason.startswith("paused by the scheduler: rrule: ")
    assert "timing budget of 1 ms" in heavy.pause_reason
    [execution] = heavy.executions.all()
    assert (execution.scheduled_for, execution.status) == (due, "pending")
    assert heavy.consecutive_failures == 0
    change = JobChange.objects.filter(job_id=heavy.pk, action=JobChangeAction.PAUSED).get()
    assert change.changes["pause_reason"]["to"] == heavy.pause_reason


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("text", "expected"), BYSETPOS_AND_SPARSE_RULES.values(), ids=BYSETPOS_AND_SPARSE_RULES
)
def test_a_view_only_user_gets_the_preview_of_any_bysetpos_rule_within_a_second(
    client: Client, django_user_model: Any, text: str, expected: datetime | str
) -> None:
    """They answered after 8.4 s (50 s for February 30). An EXDATE of its own makes each text
    new to the process, so nothing parsed before helps."""
    staff = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(staff)
    started = time.thread_time()
    response = client.get(
        "/admin/scheduling/job/preview/",
        {"interval": "", "cron": "", "rrule": f"{text}\nEXDATE:19990101", "timezone": "UTC"},
    )
    assert time.thread_time() - started < 1.0  # CPU: what a busy machine does not inflate
    if isinstance(expected, str):
        assert response.status_code == 400
        assert expected in response.json()["errors"]["rrule"][0]
    else:
        assert response.status_code == 200, response.content[:300]
        assert response.json()["occurrences"]


@pytest.fixture
def staff_owner(django_user_model: Any) -> Any:
    """A staff user (not a superuser) with every permission on the scheduling models."""
    user = django_user_model.objects.create_user("alice", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="scheduling"))
    return user


@pytest.mark.django_db
def test_the_admin_add_form_saves_the_yearly_bysetpos_rule(client: Client, staff_owner: Any):
    client.force_login(staff_owner)
    data = form_data(interval="", rrule=YEARLY_LAST_OF_A_LEAP_MONDAY)
    response = client.post("/admin/scheduling/job/add/", data)
    assert response.status_code == 302, response.content[-2000:]
    job = Job.objects.get(name="report")
    assert job.next_due_at == datetime(2044, 2, 29, 23, 59, 59, tzinfo=UTC)


@pytest.mark.django_db
def test_the_admin_add_form_refuses_a_rule_over_the_budget_beside_rrule(
    client: Client, staff_owner: Any
) -> None:
    """Proving that a set fires at all over budget was an OverBudget the form let through
    (HTTP 500, from the words it shows beside the field); it is the field's one-line
    refusal."""
    client.force_login(staff_owner)
    text = OFF_THE_GRID + "\nEXDATE:19980101"
    response = client.post("/admin/scheduling/job/add/", form_data(interval="", rrule=text))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["rrule"]
    assert errors["rrule"][0].startswith("its next occurrence cannot be found within the timing")
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_jobs_add_takes_the_yearly_bysetpos_rule_at_once(owner: Any) -> None:
    """Refused after 39.6 s of wall time before; now planned within the budget."""
    call_command(
        "jobs",
        "add",
        "leap",
        "--task",
        NOOP,
        "--owner",
        owner.username,
        "--tz",
        "UTC",
        "--rrule",
        YEARLY_LAST_OF_A_LEAP_MONDAY,
        stdout=StringIO(),
    )
    job = Job.objects.get(name="leap")
    assert job.next_due_at == datetime(2044, 2, 29, 23, 59, 59, tzinfo=UTC)
