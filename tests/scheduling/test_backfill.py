"""Backfill: the past occurrences of a range, made once each, run by the scheduler's own path.

``jobs backfill NAME --from --to`` (and ``scheduling.api.backfill``, and the admin's
*Backfill…* action) makes one execution per occurrence of the job's timing in ``[from, to)``
that the ledger does not hold, WAITING; the scheduler releases them oldest first under the
job's overlap policy and running limits. The processes that run them are proved in
``test_backfill_processes.py``.
"""

from __future__ import annotations

import io
import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.admin.models import LogEntry
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections, transaction
from django.test import Client
from django.utils import timezone

from scheduling import api
from scheduling.models import Execution, ExecutionStatus, Job
from scheduling.stages import attempts, claims, limits
from scheduling.stages.backfill import BACKFILLED
from scheduling.timing import ranges, schedules
from scheduling.timing.cron import CronExpression
from scheduling.timing.schedules import FiringRule
from tests.conftest import wait_for
from tests.factories import create_job
from tests.scheduling.test_admin_permissions import logged_in, staff
from tests.tasktable_app.models import ChoreBatch

pytestmark = pytest.mark.specification

HOUR = timedelta(hours=1)
JOBS = "/admin/scheduling/job/"
NOOP = "scheduling.diagnostics.noop"
ANCHOR = datetime(2030, 1, 1, tzinfo=UTC)
db = pytest.mark.django_db


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


# --- the instants (pure) --------------------------------------------------------------------


def test_an_interval_s_instants_are_those_of_the_range_start_included_end_excluded() -> None:
    rule = FiringRule(interval=HOUR)
    found = ranges.occurrences_in(
        rule, anchor=ANCHOR, start=ANCHOR + HOUR, end=ANCHOR + 4 * HOUR, limit=100
    )
    assert found == [ANCHOR + HOUR, ANCHOR + 2 * HOUR, ANCHOR + 3 * HOUR]
    between = ranges.occurrences_in(
        rule, anchor=ANCHOR, start=ANCHOR + HOUR / 2, end=ANCHOR + HOUR * 1.5, limit=100
    )
    assert between == [ANCHOR + HOUR], "off the grid: only the step inside"


def test_an_interval_counts_back_on_its_own_grid_before_the_job_existed() -> None:
    rule = FiringRule(interval=HOUR)
    before = ranges.grid_anchor(rule, anchor=ANCHOR, start=ANCHOR - 3 * HOUR - HOUR / 2)
    assert ranges.occurrences_in(
        rule, anchor=before, start=ANCHOR - 3 * HOUR - HOUR / 2, end=ANCHOR, limit=100
    ) == [ANCHOR - 3 * HOUR, ANCHOR - 2 * HOUR, ANCHOR - HOUR]
    assert ranges.count_interval(rule, anchor=before, start=ANCHOR - 3 * HOUR, end=ANCHOR) == 3
    started = FiringRule(interval=HOUR, start=ANCHOR)
    assert ranges.grid_anchor(started, anchor=ANCHOR, start=ANCHOR - 5 * HOUR) == ANCHOR


def test_a_daily_cron_follows_its_wall_clock_across_a_change_of_the_clocks() -> None:
    # Berlin moves from UTC+1 to UTC+2 on 31 March 2030: 09:00 there is 08:00, then 07:00 UTC.
    rule = FiringRule(cron=CronExpression.parse("0 9 * * *"), zone=ZoneInfo("Europe/Berlin"))
    found = ranges.occurrences_in(
        rule, anchor=ANCHOR, start=at("2030-03-29T00:00Z"), end=at("2030-04-02T00:00Z"), limit=100
    )
    assert found == [
        at("2030-03-29T08:00Z"),
        at("2030-03-30T08:00Z"),
        at("2030-03-31T07:00Z"),
        at("2030-04-01T07:00Z"),
    ]


def test_an_hourly_cron_across_the_clocks_going_back_is_the_claim_s_own_walk() -> None:
    rule = FiringRule(cron=CronExpression.parse("30 * * * *"), zone=ZoneInfo("Europe/Berlin"))
    start, end = at("2030-10-26T22:00Z"), at("2030-10-27T04:00Z")
    found = ranges.occurrences_in(rule, anchor=ANCHOR, start=start, end=end, limit=100)
    walked = []
    for moment in rule.occurrences(start, anchor=ANCHOR):
        if moment >= end:
            break
        walked.append(moment)
    assert found == walked and len(found) == len(set(found)), "never one instant twice"
    assert found[0] == at("2030-10-26T22:30Z") and found[-1] == at("2030-10-27T03:30Z")


def test_the_schedule_s_window_bounds_the_range_start_and_end_included() -> None:
    start, end = ANCHOR + 10 * HOUR, ANCHOR + 13 * HOUR
    rule = FiringRule(interval=HOUR, start=start, end=end)
    wide = ranges.occurrences_in(
        rule, anchor=ANCHOR, start=ANCHOR, end=ANCHOR + 48 * HOUR, limit=100
    )
    assert wide == [start, start + HOUR, start + 2 * HOUR, end], "the window's end is included"
    inside = ranges.occurrences_in(rule, anchor=ANCHOR, start=start, end=end, limit=100)
    assert inside == [start, start + HOUR, start + 2 * HOUR], "the range's end is not"


def test_a_one_off_has_its_instant_in_range_or_nothing() -> None:
    rule = FiringRule(at=ANCHOR + HOUR)
    assert ranges.occurrences_in(
        rule, anchor=ANCHOR, start=ANCHOR, end=ANCHOR + 2 * HOUR, limit=9
    ) == [ANCHOR + HOUR]
    assert (
        ranges.occurrences_in(rule, anchor=ANCHOR, start=ANCHOR, end=ANCHOR + HOUR, limit=9) == []
    )


def test_the_walk_stops_one_past_the_cap() -> None:
    rule = FiringRule(interval=timedelta(seconds=1))
    found = ranges.occurrences_in(
        rule, anchor=ANCHOR, start=ANCHOR, end=ANCHOR + timedelta(days=3650), limit=1000
    )
    assert len(found) == 1001


@pytest.mark.parametrize(
    ("window", "start", "end"),
    [
        ((None, None), 0, 10),
        ((None, None), 0.5, 9.5),
        ((2, 6), 0, 10),
        ((2, 6), 3, 6),
        ((2, 6), 6, 7),
        ((2, 6), 7, 9),
        ((None, None), -5, 0.25),
    ],
)
def test_an_interval_s_count_by_arithmetic_is_the_walk_s(
    window: Any, start: float, end: float
) -> None:
    low, high = (ANCHOR + HOUR * w if w is not None else None for w in window)
    rule = FiringRule(interval=HOUR, start=low, end=high)
    walked = ranges.occurrences_in(
        rule, anchor=ANCHOR, start=ANCHOR + HOUR * start, end=ANCHOR + HOUR * end, limit=1000
    )
    counted = ranges.count_interval(
        rule, anchor=ANCHOR, start=ANCHOR + HOUR * start, end=ANCHOR + HOUR * end
    )
    assert counted == len(walked)


# --- the verb and the ledger ----------------------------------------------------------------


def hourly(owner: Any, name: str = "nightly-report", **options: Any) -> Job:
    """A job every hour since ten hours before now; its own next occurrence is ahead."""
    now = timezone.now()
    options.setdefault("task", NOOP)
    return create_job(owner=owner, name=name, every="PT1H",
                      start=now.replace(minute=0, second=0, microsecond=0) - 10 * HOUR,
                      now=now, **options)  # fmt: skip


def held(job: Job) -> list[datetime]:
    return list(
        Execution.objects.filter(job=job)
        .order_by("scheduled_for")
        .values_list("scheduled_for", flat=True)
    )


@db
def test_a_backfill_makes_each_missing_occurrence_waiting_and_a_second_makes_none(
    owner: Any,
) -> None:
    job = hourly(owner)
    first = job.schedule.starts_at
    now = timezone.now()
    made = api.backfill(job.pk, start=first, end=first + 5 * HOUR, now=now)
    assert list(made.instants) == [first + i * HOUR for i in range(5)]
    rows = list(Execution.objects.filter(job=job).order_by("scheduled_for"))
    assert [row.status for row in rows] == [ExecutionStatus.WAITING] * 5
    assert {row.last_error for row in rows} == {BACKFILLED}
    assert {row.task for row in rows} == {NOOP}

    again = api.backfill(job.pk, start=first, end=first + 5 * HOUR, now=now)
    assert again.count == 0 and again.held == 5
    assert Execution.objects.filter(job=job).count() == 5


@db
def test_a_backfill_s_task_ids_are_uuidv7_rising_oldest_occurrence_first(owner: Any) -> None:
    job = hourly(owner)
    first = job.schedule.starts_at
    api.backfill(job.pk, start=first, end=first + 50 * HOUR, now=first + 50 * HOUR)
    drawn = list(
        Execution.objects.filter(job=job)
        .order_by("scheduled_for")
        .values_list("task_id", flat=True)
    )
    assert len(drawn) == 50
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in drawn)
    assert drawn == sorted(set(drawn))


@db
def test_a_dry_run_writes_nothing_and_skips_what_the_ledger_holds(owner: Any) -> None:
    job = hourly(owner)
    first = job.schedule.starts_at
    Execution.objects.create(job=job, task=NOOP, scheduled_for=first + HOUR,
                             status=ExecutionStatus.COMPLETED)  # fmt: skip
    preview = api.backfill(job.pk, start=first, end=first + 3 * HOUR, now=timezone.now(),
                           dry_run=True)  # fmt: skip
    assert list(preview.instants) == [first, first + 2 * HOUR] and preview.held == 1
    assert held(job) == [first + HOUR]


@db
def test_occurrences_whose_jittered_due_time_is_ahead_are_left_to_the_scheduler(
    owner: Any,
) -> None:
    job = hourly(owner, jitter=timedelta(minutes=59))
    first = job.schedule.starts_at
    last = first + 9 * HOUR
    # The instant at which the last occurrence falls due, and a moment just before it.
    due = schedules.due_time(job.pk, last, job.jitter)
    assert due > last, "the hash gives this occurrence some jitter"
    result = api.backfill(job.pk, start=first, end=last + timedelta(seconds=1),
                          now=due - timedelta(microseconds=1), dry_run=True)  # fmt: skip
    assert last not in result.instants and result.not_due == 1
    result = api.backfill(job.pk, start=first, end=last + timedelta(seconds=1), now=due,
                          dry_run=True)  # fmt: skip
    assert last in result.instants and result.not_due == 0


@db
@pytest.mark.parametrize(
    ("start", "end", "field", "words"),
    [
        (datetime(2030, 1, 1), datetime(2030, 1, 2, tzinfo=UTC), "start", "time zone offset"),
        (datetime(2030, 1, 2, tzinfo=UTC), datetime(2030, 1, 2, tzinfo=UTC), "start", "not before"),
        (datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 1, 8, tzinfo=UTC), "end", "after now"),
    ],
)
def test_the_verb_refuses_a_range_it_cannot_backfill_naming_the_field(
    owner: Any, now: datetime, start: datetime, end: datetime, field: str, words: str
) -> None:
    job = hourly(owner)
    with pytest.raises(ValidationError) as caught:
        api.backfill(job.pk, start=start, end=end, now=now)
    assert words in " ".join(caught.value.message_dict[field])
    assert not Execution.objects.filter(job=job).exists()


@db
def test_a_range_over_the_cap_is_refused_with_its_count(owner: Any, settings: Any) -> None:
    settings.SCHEDULING_BACKFILL_MAX = 4
    job = hourly(owner)
    first = job.schedule.starts_at
    with pytest.raises(ValidationError) as caught:
        api.backfill(job.pk, start=first, end=first + 9 * HOUR, now=timezone.now())
    assert caught.value.message_dict["range"] == [
        "9 occurrences exceed SCHEDULING_BACKFILL_MAX (4); narrow the range or raise the setting"
    ]
    made = api.backfill(job.pk, start=first, end=first + 4 * HOUR, now=timezone.now())
    assert made.count == 4, "the cap itself is allowed"


@db
def test_a_cron_range_over_the_cap_says_more_than_without_walking_it_all(
    owner: Any, settings: Any
) -> None:
    settings.SCHEDULING_BACKFILL_MAX = 1000
    now = timezone.now()
    job = create_job(owner=owner, name="minutely", task=NOOP, cron="* * * * *", now=now)
    with pytest.raises(ValidationError) as caught:
        api.backfill(job.pk, start=now - timedelta(days=3000), end=now, now=now)
    assert caught.value.message_dict["range"] == [
        "more than 1,000 occurrences exceed SCHEDULING_BACKFILL_MAX (1,000); "
        "narrow the range or raise the setting"
    ]


@pytest.mark.django_db(transaction=True)
def test_two_backfills_of_the_same_range_at_once_make_each_occurrence_once(owner: Any) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("row locks between two connections: PostgreSQL")
    job = hourly(owner)
    first = job.schedule.starts_at
    now = timezone.now()
    results: dict[str, Any] = {}
    committed = threading.Event()

    def hold_open() -> None:
        try:
            with transaction.atomic():
                results["first"] = api.backfill(job.pk, start=first, end=first + 5 * HOUR, now=now)
                committed.wait(timeout=60)
        finally:
            connections.close_all()

    def second() -> None:
        try:
            results["second"] = api.backfill(job.pk, start=first, end=first + 5 * HOUR, now=now)
        finally:
            connections.close_all()

    one = threading.Thread(target=hold_open)
    one.start()
    wait_for(
        lambda: "first" in results, timeout=30, message="the first backfill wrote, uncommitted"
    )
    two = threading.Thread(target=second)
    two.start()
    # The second insert waits on the first's uncommitted rows under the unique key.
    with connection.cursor() as cursor:
        wait_for(
            lambda: (
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                )
                or cursor.fetchone()[0] > 0
            ),
            timeout=30,
            message="the second backfill waits for the first",
        )
    committed.set()
    one.join(timeout=60)
    two.join(timeout=60)
    assert results["first"].count == 5
    assert results["second"].count == 0 and results["second"].held == 5
    assert Execution.objects.filter(job=job).count() == 5


@pytest.mark.django_db(transaction=True)
def test_backfills_racing_from_several_threads_make_each_occurrence_once(owner: Any) -> None:
    if connection.vendor == "sqlite":
        # SQLite's test database is in memory with a shared cache, whose table locks fail at
        # once instead of waiting; the embedded default's file waits (BEGIN IMMEDIATE).
        pytest.skip("concurrent writers: PostgreSQL, MySQL, MariaDB")
    job = hourly(owner)
    first = job.schedule.starts_at
    now = timezone.now()
    gate = threading.Barrier(4)
    made: list[int] = []

    def race() -> None:
        try:
            gate.wait(timeout=30)
            result = api.backfill(job.pk, start=first, end=first + 8 * HOUR, now=now)
            made.append(result.count)
        finally:
            connections.close_all()

    racers = [threading.Thread(target=race) for _ in range(4)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=60)
    assert sorted(made)[-1] <= 8 and sum(made) == 8 and len(made) == 4
    assert Execution.objects.filter(job=job).count() == 8


@db
def test_a_forbid_job_s_backfill_is_released_one_at_a_time_oldest_first(owner: Any) -> None:
    job = hourly(owner, overlap="forbid")
    first = job.schedule.starts_at
    api.backfill(job.pk, start=first, end=first + 3 * HOUR, now=timezone.now())
    oldest, middle, _newest = Execution.objects.filter(job=job).order_by("scheduled_for")

    assert limits.release_waiting(now=timezone.now(), limit=100) == [oldest.pk]
    job.refresh_from_db()
    assert job.current_execution_id == oldest.pk, "the job's own next occurrence waits for it"
    assert limits.release_waiting(now=timezone.now(), limit=100) == []

    attempts.start_execution(execution_id=oldest.pk, worker="w@h", pid=1, now=timezone.now())
    attempts.complete_execution(execution_id=oldest.pk, now=timezone.now())
    job.refresh_from_db()
    assert job.current_execution_id is None
    assert limits.release_waiting(now=timezone.now(), limit=100) == [middle.pk]


@db
def test_a_forbid_job_s_own_occurrence_and_its_backfill_never_run_side_by_side(
    owner: Any,
) -> None:
    job = hourly(owner, overlap="forbid")
    first = job.schedule.starts_at
    api.backfill(job.pk, start=first, end=first + 2 * HOUR, now=timezone.now())
    due = job.next_due_at
    claims.claim_due_jobs(now=due, limit=10)
    own = Execution.objects.get(job=job, scheduled_for=job.next_occurrence_at)
    assert limits.release_waiting(now=due, limit=100) == [], "the claimed run goes first"

    attempts.start_execution(execution_id=own.pk, worker="w@h", pid=1, now=due)
    attempts.complete_execution(execution_id=own.pk, now=due)
    (released,) = limits.release_waiting(now=due, limit=100)
    assert Execution.objects.get(pk=released).scheduled_for == first
    later = due + HOUR
    claims.claim_due_jobs(now=later, limit=10)
    assert not Execution.objects.filter(job=job, scheduled_for__gt=own.scheduled_for).exists(), (
        "the job's next occurrence waits for the backfilled run"
    )
    attempts.start_execution(execution_id=released, worker="w@h", pid=1, now=later)
    attempts.complete_execution(execution_id=released, now=later)
    claims.claim_due_jobs(now=later, limit=10)
    assert Execution.objects.filter(job=job, scheduled_for=own.scheduled_for + HOUR).count() == 1, (
        "then it runs, once: nothing lost, nothing doubled"
    )


@db
def test_an_allow_job_s_backfill_is_released_side_by_side_within_max_running(
    owner: Any,
) -> None:
    job = hourly(owner, overlap="allow", max_running=2)
    first = job.schedule.starts_at
    api.backfill(job.pk, start=first, end=first + 5 * HOUR, now=timezone.now())
    runs = list(Execution.objects.filter(job=job).order_by("scheduled_for"))
    assert limits.release_waiting(now=timezone.now(), limit=100) == [runs[0].pk, runs[1].pk]
    assert Job.objects.get(pk=job.pk).current_execution_id is None


# --- the command line -----------------------------------------------------------------------


def backfill(*args: str) -> str:
    out = io.StringIO()
    call_command("jobs", "backfill", *args, stdout=out)
    return out.getvalue()


@db
def test_the_command_backfills_and_says_how_many(owner: Any) -> None:
    job = hourly(owner)
    first = job.schedule.starts_at
    start, end = first.isoformat(), (first + 3 * HOUR).isoformat()
    preview = backfill(job.name, "--from", start, "--to", end, "--dry-run")
    assert preview.splitlines()[0] == "would backfill 3 occurrences for nightly-report"
    assert not Execution.objects.filter(job=job).exists()
    assert backfill(job.name, "--from", start, "--to", end).strip() == (
        "3 occurrences backfilled for nightly-report"
    )
    assert backfill(job.name, "--from", start, "--to", end).strip() == (
        "0 occurrences backfilled for nightly-report (3 already in the ledger)"
    )


@db
def test_the_command_s_json_has_the_counts_and_the_instants_in_utc(owner: Any) -> None:
    job = hourly(owner)
    first = job.schedule.starts_at
    paris = first.astimezone(ZoneInfo("Europe/Paris")).isoformat()
    data = json.loads(
        backfill(job.name, "--from", paris, "--to", (first + 2 * HOUR).isoformat(), "--json")
    )
    assert data == {
        "job": "nightly-report",
        "owner": "owner",
        "from": first.isoformat(),
        "to": (first + 2 * HOUR).isoformat(),
        "dry_run": False,
        "made": 2,
        "would_make": 0,
        "already_held": 0,
        "not_yet_due": 0,
        "instants": [first.isoformat(), (first + HOUR).isoformat()],
    }
    assert data["instants"][0].endswith("+00:00")


@db
@pytest.mark.parametrize(
    ("options", "line"),
    [
        (
            ["--from", "2030-01-01T00:00", "--to", "2030-01-02T00:00Z"],
            "--from: '2030-01-01T00:00' has no offset; add a time zone offset such as Z or +01:00",
        ),
        (["--from", "yesterday", "--to", "2030-01-02T00:00Z"], "--from: 'yesterday' is not"),
        (
            ["--from", "2020-01-01T00:00Z", "--to", "2999-01-01T00:00Z"],
            "--to: 2999-01-01T00:00:00+00:00 is after now",
        ),
        (["--from", "2020-01-02T00:00Z", "--to", "2020-01-01T00:00Z"], "--from: 2020-01-02"),
        (["--to", "2020-01-01T00:00Z"], "--from: is required"),
    ],
)
def test_the_command_refuses_in_one_line_naming_the_option(
    owner: Any, options: list[str], line: str
) -> None:
    job = hourly(owner)
    with pytest.raises(CommandError) as caught:
        backfill(job.name, *options)
    assert str(caught.value).startswith(line) and "\n" not in str(caught.value)


@db
def test_the_command_names_the_count_the_cap_and_the_setting(owner: Any, settings: Any) -> None:
    settings.SCHEDULING_BACKFILL_MAX = 1000
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    job = create_job(owner=owner, name="often", task=NOOP, every="PT1M",
                     start=now - timedelta(days=10), now=timezone.now())  # fmt: skip
    with pytest.raises(CommandError) as caught:
        backfill(job.name, "--from", (now - timedelta(days=3)).isoformat(), "--to", now.isoformat())
    assert str(caught.value) == (
        "--from/--to: 4,320 occurrences exceed SCHEDULING_BACKFILL_MAX (1,000); "
        "narrow the range or raise the setting"
    )


# --- the admin ------------------------------------------------------------------------------


def action(client: Client, job: Job, *, listed: str = JOBS, **fields: str) -> Any:
    return client.post(
        listed, {"action": "backfill_jobs", "_selected_action": [job.pk], **fields}, follow=True
    )


@db
def test_the_admin_asks_previews_then_backfills_and_reports_the_count(
    admin_client: Client, owner: Any
) -> None:
    job = hourly(owner)
    first = job.schedule.starts_at
    span = {"start": first.isoformat(), "end": (first + 3 * HOUR).isoformat()}

    asked = action(admin_client, job).content.decode()
    assert 'name="start"' in asked and 'name="preview"' in asked and 'name="apply"' not in asked

    preview = action(admin_client, job, preview="Preview", **span).content.decode()
    assert "3 occurrences would be made" in preview
    assert preview.count("<li>20") == 3 and 'name="apply"' in preview
    assert not Execution.objects.filter(job=job).exists(), "a preview writes nothing"

    done = action(admin_client, job, apply="Backfill", **span).content.decode()
    assert "3 occurrences backfilled for nightly-report" in done
    assert Execution.objects.filter(job=job, status=ExecutionStatus.WAITING).count() == 3
    assert LogEntry.objects.filter(object_id=str(job.pk)).exists()


@db
def test_the_admin_refuses_a_future_end_on_the_form(admin_client: Client, owner: Any) -> None:
    job = hourly(owner)
    page = action(admin_client, job, preview="Preview", start="2020-01-01T00:00Z",
                  end="2999-01-01T00:00Z").content.decode()  # fmt: skip
    assert "is after now" in page and not Execution.objects.exists()
    naive = action(admin_client, job, apply="Backfill", start="2020-01-01T00:00",
                   end="2020-01-02T00:00Z").content.decode()  # fmt: skip
    assert "has no offset" in naive and not Execution.objects.exists()


@db
def test_the_admin_backfills_nothing_for_a_user_without_the_change_permission(
    django_user_model: Any,
) -> None:
    vera = staff(django_user_model, "vera", "view_job", "view_schedule", "view_execution")
    alice = staff(django_user_model, "alice", apps=("scheduling",))
    hers, others = hourly(vera, name="hers"), hourly(owner=alice, name="alices")
    first = hers.schedule.starts_at
    span = {"start": first.isoformat(), "end": (first + 3 * HOUR).isoformat()}
    for client, job in ((logged_in(vera), hers), (logged_in(vera), others)):
        page = action(client, job, apply="Backfill", **span)
        assert page.status_code in (200, 403)
    bob = staff(django_user_model, "bob", apps=("scheduling",))
    action(logged_in(bob), others, apply="Backfill", **span)
    assert not Execution.objects.exists(), "view only, or another owner's job: nothing made"
    action(logged_in(alice), others, apply="Backfill", **span)
    assert Execution.objects.filter(job=others).count() == 3, "the owner with change may"


@db
def test_the_admin_page_escapes_names_and_typed_values(admin_client: Client, owner: Any) -> None:
    job = hourly(owner, name="<script>alert(1)</script>")
    page = action(admin_client, job, preview="Preview", start='"><script>x()</script>',
                  end="2020-01-01T00:00Z").content.decode()  # fmt: skip
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)" in page
    assert "<script>x()" not in page and "&quot;&gt;&lt;script&gt;x()" in page


@db
def test_no_one_backfills_a_job_of_an_internal_table_by_hand(admin_client: Client) -> None:
    now = timezone.now()
    start = now.replace(minute=0, second=0, microsecond=0) - 10 * HOUR
    info = api.schedule_row(
        ChoreBatch.objects.create(name="monday"), timing=api.Every("PT1H", start=start)
    )
    job = Job.objects.get(pk=info.id)
    span = {"start": start.isoformat(), "end": (start + 3 * HOUR).isoformat()}
    listed = f"{JOBS}?made_by=internal"  # the list leaves internal jobs out unless asked
    page = action(admin_client, job, listed=listed, apply="Backfill", **span).content.decode()
    assert "never by a job made by hand" in page
    with pytest.raises(CommandError) as caught:
        backfill(job.name, "--from", span["start"], "--to", span["end"])
    assert str(caught.value) == (
        "name: tasktable_app.ChoreBatch rows are run by their app's own jobs, never by a job made "
        "by hand"
    )
    assert not Execution.objects.filter(job=job).exists()
