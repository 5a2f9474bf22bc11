"""``manage.py loaddemo``: seed 001's four jobs, one quick job and the emailer's demo project."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandParser
from django.utils import timezone

from emailer.demo import load_demo
from scheduling import jobs, services
from scheduling.management.base import DuecourseCommand
from scheduling.models import Job

# Seed 001's jobs table: (user_id, job_id, is_recurring, interval, max_retry_count).
SEED_JOBS = [
    ("1101", "123456", True, "PT3H", 3),
    ("1101", "123457", True, "PT1H", 3),
    ("1102", "123458", True, "PT6H", 3),
    ("1103", "123459", False, "PT12H", 3),
]


class Command(DuecourseCommand):
    help = (
        "Load the demo jobs (seed 001's four jobs, a quick one every 10 seconds) and a small "
        "emailer project whose mail lands under var/mail/."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)

    def handle(self, *args: Any, **o: Any) -> None:
        now = timezone.now()
        users = get_user_model().objects
        created = []
        for user_id, job_id, recurring, interval, retries in SEED_JOBS:
            owner, _ = users.get_or_create(username=f"user{user_id}")
            name = f"job-{job_id}"
            if Job.objects.filter(owner=owner, name=name).exists():
                continue
            schedule: dict[str, Any] = (
                {"every": interval}
                if recurring
                else {"at": now + services.schedules.parse_duration(interval)}
            )
            jobs.create_job(
                owner=owner,
                name=name,
                task="scheduling.diagnostics.noop",
                kwargs={"job_id": job_id},
                max_retries=retries,
                note=f"seed 001: user {user_id}, {'every ' + interval if recurring else 'once'}",
                now=now,
                **schedule,
            )
            created.append(name)
        demo, _ = users.get_or_create(username="demo")
        if not Job.objects.filter(owner=demo, name="quick").exists():
            jobs.create_job(
                owner=demo,
                name="quick",
                task="scheduling.diagnostics.sleep",
                kwargs={"seconds": 0.5},
                every="PT10S",
                jitter=timedelta(0),
                note="runs every 10 seconds so that something visibly happens",
                now=now,
            )
            created.append("quick")
        created += load_demo(now=now)
        self.emit(
            {"created": created},
            f"demo jobs created: {', '.join(created)}" if created else "demo jobs already loaded",
            as_json=o["json"],
        )
