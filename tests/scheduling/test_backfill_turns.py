"""A backfilled occurrence of a job that is behind its schedule, and the tick's order.

Found by the fault campaign (docs/reliability.md, *Found: backfilled runs wait while their job
is behind*): a backfilled row of a job under any overlap but ``allow`` is released only while
nothing else of its job is unfinished, and each tick claims before it releases
(``Dispatcher._tick``). When the job's run ends after its next occurrence fell due, the next
tick's claim takes the job's turn, so a job that stays behind never lets its backfill run,
although docs/commands.md says they run oldest first.

The test runs the tick's two steps in the tick's order and states what the documentation
promises; it is expected to fail until the release comes first (``strict``: once it passes,
the marker must go).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from scheduling import api
from scheduling.models import Execution, ExecutionStatus
from scheduling.stages import attempts, claims, limits
from tests.factories import create_job

HOUR = timedelta(hours=1)


@pytest.mark.django_db
@pytest.mark.xfail(
    strict=True,
    reason="each tick claims before it releases: a job already due again takes the turn",
)
def test_a_job_due_again_when_its_run_ends_lets_its_oldest_backfilled_run_go_first(
    owner: Any,
) -> None:
    now = timezone.now()
    start = now.replace(minute=0, second=0, microsecond=0) - 10 * HOUR
    job = create_job(owner=owner, name="behind", task="scheduling.diagnostics.noop",
                     every="PT1H", start=start, overlap="forbid", now=now)  # fmt: skip
    api.backfill(job.pk, start=start, end=start + 2 * HOUR, now=now)
    oldest = Execution.objects.filter(job=job).order_by("scheduled_for").first()
    assert oldest is not None and oldest.status == ExecutionStatus.WAITING

    due = job.next_due_at
    claims.claim_due_jobs(now=due, limit=10)
    own = Execution.objects.get(job=job, scheduled_for=job.next_occurrence_at)
    attempts.start_execution(execution_id=own.pk, worker="w@h", pid=1, now=due)
    # The run ends after the job's next occurrence fell due: the job is behind.
    late = due + HOUR + timedelta(seconds=1)
    attempts.complete_execution(execution_id=own.pk, now=late)

    claims.claim_due_jobs(now=late, limit=10)  # the tick's order: the claim first,
    released = limits.release_waiting(now=late, limit=100)  # then the release
    assert released == [oldest.pk], "the oldest backfilled run takes the job's turn"
