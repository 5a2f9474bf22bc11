"""Every timing has a bounded cost: the rules that stalled the scheduler are answered or refused
within ``SCHEDULING_TIMING_BUDGET_MS``, wherever they are evaluated.

Work is counted where it can be (a budget whose clock ticks once per check counts the steps of
an expansion); the promises that are about time (the preview answers within a second) are
asserted with a generous margin.
"""

from __future__ import annotations

import itertools
import time
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone

from scheduling.models import Job, JobChange, JobChangeAction, JobStatus, Schedule
from scheduling.stages import claims
from scheduling.timing.budgets import Budget, OverBudget
from scheduling.timing.calendars import CalendarRule
from scheduling.timing.previews import preview
from scheduling.timing.schedules import OverTimingBudget, check_savable, timing_from
from tests.factories import create_job

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
    rare = "FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO"  # 2044: thousands of days on
    with pytest.raises(OverTimingBudget) as caught:
        check_savable("", "", "UTC", None, None, None, now=NOW, rrule=rare, budget=1e-7)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith("rrule: ")


def test_the_preview_stops_when_its_time_is_spent_and_says_so() -> None:
    timing = timing_from("", "", "UTC", None, None, None, rrule="FREQ=DAILY")
    listed = preview(timing, now=NOW, anchor=NOW, count=100, total=Budget(0, clock=Steps()))
    assert len(listed.occurrences) == 1
    assert listed.cut_short and "finding more would take longer" in listed.note


# --- the doors


@pytest.mark.django_db
def test_the_model_refuses_a_rule_over_the_setting_naming_rrule(owner: Any, settings: Any) -> None:
    settings.SCHEDULING_TIMING_BUDGET_MS = 1
    schedule = Schedule(rrule="FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO", timezone="UTC")
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
        started = time.monotonic()
        response = client.get(
            "/admin/scheduling/job/preview/",
            {"interval": "", "cron": "", "rrule": text, "timezone": "UTC"},
        )
        assert time.monotonic() - started < 1.0
        assert response.status_code == 200, response.content[:300]
        assert response.json()["occurrences"]


@pytest.mark.django_db
def test_a_job_whose_timing_outgrows_the_budget_at_run_time_runs_what_was_due_and_is_paused(
    owner: Any, settings: Any
) -> None:
    """Saved under a larger budget (or before a deploy made it slower): the claim runs the
    occurrence that was due, pauses the job naming the reason, records the pause on the audit
    trail, and serves the other jobs of the batch."""
    now = timezone.now().replace(microsecond=0)
    soon = now + timedelta(seconds=30)
    rare = f"FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO\nRDATE:{soon:%Y%m%dT%H%M%S}"
    heavy = create_job(owner=owner, name="heavy", task=NOOP, rrule=rare, now=now)
    light = create_job(owner=owner, name="light", task=NOOP, every="PT2S", now=now)
    settings.SCHEDULING_TIMING_BUDGET_MS = 1
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
