"""Jobs for tests, from the flag-shaped values ``manage.py jobs add`` takes.

Tests make many jobs and name only what they care about (``every="PT1H"``, ``max_retries=0``);
this turns those few values into the engine's one constructor call, ``jobs.create_job``, so
each job still passes every rule and is planned as any other.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from scheduling.models import Job, Schedule
from scheduling.stages import jobs


def create_job(
    *,
    owner: Any,
    name: str,
    task: str = "",
    args: list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    every: str = "",
    cron: str = "",
    rrule: str = "",
    tz: str = "UTC",
    at: datetime | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    task_table: str = "",
    task_row_id: int | None = None,
    schedule: Schedule | None = None,
    now: datetime,
    allow_past: bool = False,
    **policies: Any,
) -> Job:
    """A saved job; ``schedule`` shares an existing one, else the timing flags make one.

    ``allow_past`` lets ``at`` be already past (a one-off made back then, say)."""
    if schedule is None:
        schedule = Schedule(
            interval=every or "",
            cron=cron or "",
            rrule=rrule or "",
            timezone=tz or "UTC",
            run_at=at,
            starts_at=start,
            ends_at=end,
        )
        schedule.allow_past = allow_past
    return jobs.create_job(
        owner=owner,
        name=name,
        schedule=schedule,
        target=jobs.Target(
            task=task,
            args=[] if args is None else args,
            kwargs={} if kwargs is None else kwargs,
            task_table=task_table,
            task_row_id=task_row_id,
        ),
        policies=jobs.Policies.given(**policies),
        now=now,
    )
