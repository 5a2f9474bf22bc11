"""The fault campaign's workload: the jobs, the Django-task producer and the backfills.

``job_specs`` draws the jobs from the seed alone, so a run is repeated by its seed: intervals
from 1 s to 1 min, calendars (rrule) and cron, every overlap policy with every misfire policy,
short bodies and some longer than the lease, and jobs whose first attempt of every occurrence
fails on purpose (their retries are checked against their policy).

Run inside the cluster (``python bench/faultload.py jobs|produce ...`` on the producer host);
Django is set up before the engine is imported, as in any script run outside ``manage.py``.

The producer enqueues a Django task at a steady rate and notes each enqueue it saw committed
(``Q <result id> <wall>``) or refused (``X <wall> <error>``) in its own file: the checker's
account of what was promised, kept apart from the ledger.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

OVERLAPS = ("forbid", "allow", "buffer_one", "buffer_all", "cancel_other")
MISFIRES = ("catch_up", "coalesce", "skip")
#: Interval (seconds) and how many jobs in a hundred take it.
INTERVALS = ((1, 1), (2, 2), (5, 8), (10, 17), (15, 15), (20, 15), (30, 20), (60, 22))
#: A job that runs every missed occurrence one at a time (buffer_all under any misfire
#: policy, and catch_up under forbid) falls behind for good if one run's round trip (claim,
#: publish, start, end, release) takes longer than its interval, which a frozen worker or a
#: busy machine makes seconds long: those jobs are given at least this interval.
SERIAL_MIN = 10
CALENDARS = (
    "FREQ=MINUTELY;BYSECOND=0,15,30,45",
    "FREQ=MINUTELY;BYSECOND=5,25,45",
    "FREQ=MINUTELY;BYSECOND=7,37",
)
MAX_RETRIES = 12


def job_specs(seed: int, count: int) -> list[dict[str, Any]]:
    """The jobs of a run: every overlap policy crossed with every misfire policy, round-robin,
    and the rest drawn from ``seed``."""
    rng = random.Random(seed)
    intervals = [every for every, weight in INTERVALS for _ in range(weight)]
    specs = []
    for n in range(count):
        overlap = OVERLAPS[n % len(OVERLAPS)]
        misfire = MISFIRES[(n // len(OVERLAPS)) % len(MISFIRES)]
        kind = rng.random()
        spec: dict[str, Any] = {"name": f"f{n:03d}", "overlap": overlap, "misfire": misfire}
        if kind < 0.08:
            spec["rrule"] = rng.choice(CALENDARS)
            period = 20.0
        elif kind < 0.12:
            spec["cron"] = "* * * * *"
            period = 60.0
        else:
            period = float(rng.choice(intervals))
            if overlap == "buffer_all" or (misfire == "catch_up" and overlap == "forbid"):
                period = max(period, SERIAL_MIN)
            spec["every"] = f"PT{int(period)}S"
        if period >= 15 and rng.random() < 0.15:
            seconds = rng.uniform(4, 10)  # longer than the lease: a freeze or cut meets it
        else:
            seconds = rng.uniform(0.05, min(0.5, period / 3))
        spec["seconds"] = round(seconds, 2)
        spec["fail_first"] = period >= 5 and rng.random() < 0.1
        spec["period"] = period
        specs.append(spec)
    return specs


def make_jobs(specs: list[dict[str, Any]]) -> None:
    """Create the jobs (inside Django), all owned by ``faults``."""
    import faultbodies  # registers faults.body, which a job's target must name
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from scheduling.models import Schedule
    from scheduling.stages import jobs

    del faultbodies

    owner, _ = get_user_model().objects.get_or_create(username="faults")
    now = timezone.now()
    for spec in specs:
        schedule = Schedule(
            interval=spec.get("every", ""),
            cron=spec.get("cron", ""),
            rrule=spec.get("rrule", ""),
            timezone="UTC",
        )
        jobs.create_job(
            owner=owner,
            name=spec["name"],
            schedule=schedule,
            target=jobs.Target(
                task="faults.body",
                args=[],
                kwargs={"seconds": spec["seconds"], "fail_first": spec["fail_first"]},
                task_table="",
                task_row_id=None,
            ),
            policies=jobs.Policies.given(
                max_retries=MAX_RETRIES,
                timeout=120,
                misfire=spec["misfire"],
                overlap=spec["overlap"],
            ),
            now=now,
        )


def produce(rate: float, stop_file: Path, log: Path, seed: int) -> None:
    """Enqueue ``faultbodies.produced`` ``rate`` times a second until ``stop_file`` exists."""
    import faultbodies
    from django.db import close_old_connections

    rng = random.Random(seed)
    period = 1.0 / rate
    n = 0
    next_at = time.monotonic()
    with log.open("a") as out:
        while not stop_file.exists():
            n += 1
            try:
                result = faultbodies.produced.enqueue(n, round(rng.uniform(0.05, 0.4), 2))
                out.write(f"Q {result.id} {time.time():.3f}\n")
            except Exception as exc:  # the database may be away: note it and go on
                first = str(exc).splitlines()[0][:120] if str(exc) else ""
                out.write(f"X {time.time():.3f} {type(exc).__name__}: {first}\n")
                close_old_connections()
            out.flush()
            next_at += period
            time.sleep(max(0.0, next_at - time.monotonic()))
            if next_at < time.monotonic() - 5:
                next_at = time.monotonic()  # after a long outage, no burst to catch up


def main(argv: list[str]) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    what = argv[0]
    if what == "jobs":
        make_jobs(json.loads(Path(argv[1]).read_text()))
    elif what == "produce":
        produce(float(argv[1]), Path(argv[2]), Path(argv[3]), int(argv[4]))
    else:
        raise SystemExit(f"unknown: {what}")


if __name__ == "__main__":
    main(sys.argv[1:])
