"""On a real scheduler and worker: one owner's costliest calendar never delays another's claims.

A calendar once stalled the scheduler for 50 s when it fell due, and another owner's job due
every few seconds started up to 46 s late at every occurrence. Every evaluation of a timing is
now bounded (``SCHEDULING_TIMING_BUDGET_MS``), and a rule that needs more is refused at save.
This runs the heaviest rule the save still accepts beside a job due every two seconds, on
PostgreSQL with the scheduler and a worker in their own processes at their shipped settings,
and reads from the ledger when each occurrence was claimed.
"""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from scheduling.models import Execution, ExecutionStatus, Job, JobStatus, SchedulerState
from tests.conftest import Processes, celery_worker_command, scheduler_command, wait_for
from tests.factories import create_job
from tests.scheduling.test_worker_lifecycle import SLOW, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NOOP = "scheduling.diagnostics.noop"
STEP = timedelta(seconds=2)
#: The occurrences of the two-second job the test watches: twelve seconds, the calendar's two
#: among them.
WATCHED = 7
#: The promise: every claim within a second of its due time.
BOUND = timedelta(seconds=1)
#: A Monday that is 29 February: the next is seventeen years or more away, and finding it
#: walks the days between. After its last RDATE a claim spends half to three quarters of the
#: default budget of CPU working out where the job goes next: ten times what the reported rule
#: of every second with sixteen months of excluded days costs now that an excluded day is one
#: step, and the costliest evaluation found among rules the save accepts (excluding 2044-02-29
#: as well makes the save refuse it). A claim that needs more than the budget pauses the job instead
#: (tests/scheduling/test_timing_budget.py), so no job costs a claim much more than this one.
RARE = "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO"


def next_monday_february_29(after: datetime) -> datetime:
    """The first 29 February after ``after`` that falls on a Monday, at midnight UTC."""
    for year in itertools.count(after.year):
        if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
            day = datetime(year, 2, 29, tzinfo=UTC)
            if day.weekday() == 0 and day > after:
                return day
    raise AssertionError("unreachable")


def heaviest_accepted(rdates: list[datetime]) -> str:
    """``RARE`` with ``rdates``. The save works out the first two occurrences within one
    budget: with two RDATEs those are cheap, and the heavy evaluation comes at the claim of the
    second (with one RDATE the save would make it too, and accept the rule only by a hair)."""
    listed = ",".join(f"{at:%Y%m%dT%H%M%S}" for at in rdates)
    return f"{RARE}\nRDATE:{listed}"


def test_a_two_second_job_is_claimed_within_a_second_while_the_heaviest_accepted_calendar_falls_due(
    django_user_model: Any, processes: Processes, process_env: dict[str, str]
) -> None:
    """Every occurrence of the two-second job in the window is claimed once, within a second of
    its due time, and runs once; the calendar's occurrences (due at the same instants as two of
    them, so the costly evaluation is in the same claim) run once and the job stays active: it
    was accepted, so it is served."""
    alice = django_user_model.objects.create(username="alice")
    bob = django_user_model.objects.create(username="bob")
    worker = processes.start(celery_worker_command(name="budget"), env=process_env, name="worker")
    scheduler = processes.start(scheduler_command(), env=process_env, name="scheduler")
    wait_for(SchedulerState.objects.exists, timeout=SLOW, message="the scheduler ticks")
    wait_ready(processes, worker)

    # Whole seconds, at least two ahead: the scheduler (asleep for up to a second) sees both
    # jobs before anything is due, so no occurrence waits for its start-up.
    first = datetime.fromtimestamp(math.ceil(timezone.now().timestamp()), UTC) + STEP
    due = [first + i * STEP for i in range(WATCHED)]
    rdates = [due[2], due[4]]
    call_command("jobs", "add", "schedbomb", "--owner", alice.username, "--task", NOOP,
                 "--tz", "UTC", "--rrule", heaviest_accepted(rdates))  # fmt: skip
    bomb = Job.objects.get(name="schedbomb")
    assert bomb.next_occurrence_at == rdates[0]
    beat = create_job(owner=bob, name="heartbeat", task=NOOP, every="PT2S", start=first,
                      now=timezone.now())  # fmt: skip
    assert beat.next_occurrence_at == first

    def all_ran() -> bool:
        done = Execution.objects.filter(status=ExecutionStatus.COMPLETED)
        beats = done.filter(job=beat, scheduled_for__lte=due[-1]).count()
        return beats >= WATCHED and done.filter(job=bomb).count() >= len(rdates)

    window = (due[-1] - timezone.now()).total_seconds()
    wait_for(all_ran, timeout=window + SLOW / 4, message="the window's occurrences all ran")
    assert scheduler.poll() is None and worker.poll() is None

    runs = list(
        Execution.objects.filter(job=beat, scheduled_for__lte=due[-1]).order_by("scheduled_for")
    )
    assert [run.scheduled_for for run in runs] == due, "none lost, none doubled"
    late = {
        run.scheduled_for.isoformat(): (
            run.created_at - run.scheduled_for,
            run.queued_at - run.scheduled_for,
            run.started_at - run.scheduled_for,
        )
        for run in runs
    }
    # created_at is the claim's time; queued_at is written after the claim's transaction
    # committed and its messages reached the broker, so it also counts a slow evaluation of
    # another job in the same claim.
    assert all(max(claimed, queued) < BOUND for claimed, queued, _ in late.values()), late
    assert all(run.attempts.count() == 1 for run in runs), "each ran once"

    bomb.refresh_from_db()
    ran = list(Execution.objects.filter(job=bomb).order_by("scheduled_for"))
    assert [run.scheduled_for for run in ran] == rdates
    assert all(run.status == ExecutionStatus.COMPLETED and run.attempts.count() == 1
               for run in ran)  # fmt: skip
    assert bomb.status == JobStatus.ACTIVE and not bomb.pause_reason
    assert bomb.next_occurrence_at == next_monday_february_29(rdates[-1])
