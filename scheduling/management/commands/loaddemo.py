"""``manage.py loaddemo``: four sample jobs and one quick job, each unless already there, and
whatever demo each installed app offers.

An app offers one with a ``demo`` module whose ``load_demo(*, now)`` returns the names of what
it created (the emailer's small mailing, subscriptions' three customers); the engine finds it
by name, as it finds each app's ``scheduled`` module, and never imports a domain app itself.
"""

from __future__ import annotations

from datetime import timedelta
from importlib import import_module
from typing import Any

from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, CommandParser
from django.utils import timezone
from django.utils.module_loading import module_has_submodule

from scheduling import conf
from scheduling.commandline.options import add_by_option
from scheduling.management.base import DuecourseCommand
from scheduling.models import Job, Schedule
from scheduling.stages import audit, jobs
from scheduling.timing.schedules import parse_duration

# (user_id, job_id, is_recurring, interval, max_retry_count): three recurring jobs and a
# one-off that runs twelve hours after loading, for three users.
DEMO_JOBS = [
    ("1101", "123456", True, "PT3H", 3),
    ("1101", "123457", True, "PT1H", 3),
    ("1102", "123458", True, "PT6H", 3),
    ("1103", "123459", False, "PT12H", 3),
]


class Command(DuecourseCommand):
    help = (
        "Load the demo jobs (four sample jobs and a quick one every 10 seconds) and each "
        "app's demo (the emailer's: a small mailing, sent through the project's default mailer; "
        "subscriptions': three customers, one whose card the test gateway declines). "
        "Runs only where SCHEDULING_DEMO = True."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--if-allowed",
            action="store_true",
            help="Where the demo is not allowed, say so and exit 0 instead of failing.",
        )
        add_by_option(parser)

    def handle(self, *args: Any, **o: Any) -> None:
        if not conf.get("DEMO"):
            reason = (
                "SCHEDULING_DEMO is off in this project's settings (it is False unless set); "
                "the demo is loaded only where it is on, and a project turns it on for a "
                "throwaway local database only; nothing was written"
            )
            if o["if_allowed"]:
                self.stdout.write(f"demo not loaded: {reason}")
                return
            raise CommandError(reason)
        now = timezone.now()
        users = get_user_model().objects
        created = []
        for user_id, job_id, recurring, interval, retries in DEMO_JOBS:
            owner, _ = users.get_or_create(username=f"user{user_id}")
            name = f"job-{job_id}"
            if Job.objects.filter(owner=owner, name=name).exists():
                continue
            timing = (
                Schedule(interval=interval)
                if recurring
                else Schedule(run_at=now + parse_duration(interval))
            )
            jobs.create_job(
                owner=owner,
                name=name,
                schedule=timing,
                target=jobs.Target(
                    task="scheduling.diagnostics.noop", kwargs={"job_id": job_id}
                ),
                policies=jobs.Policies(
                    max_retries=retries,
                    note=f"demo: user {user_id}, {'every ' + interval if recurring else 'once'}",
                ),
                now=now,
                by=audit.Actor.command_line(o["by"]),
            )
            created.append(name)
        demo, _ = users.get_or_create(username="demo")
        if not Job.objects.filter(owner=demo, name="quick").exists():
            jobs.create_job(
                owner=demo,
                name="quick",
                schedule=Schedule(interval="PT10S"),
                target=jobs.Target(task="scheduling.diagnostics.sleep", kwargs={"seconds": 0.5}),
                policies=jobs.Policies(
                    jitter=timedelta(0),
                    note="runs every 10 seconds so that something visibly happens",
                ),
                now=now,
                by=audit.Actor.command_line(o["by"]),
            )
            created.append("quick")
        for app in apps.get_app_configs():
            if app.module is not None and module_has_submodule(app.module, "demo"):
                created += import_module(f"{app.name}.demo").load_demo(now=now)
        self.emit(
            {"created": created},
            f"demo jobs created: {', '.join(created)}" if created else "demo jobs already loaded",
            as_json=o["json"],
        )
