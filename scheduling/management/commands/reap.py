"""``manage.py reap``: give back running executions whose heartbeat went stale."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.utils import timezone

from scheduling import conf
from scheduling.management.base import DuecourseCommand, setting_option
from scheduling.stages import liveness


class Command(DuecourseCommand):
    help = "Reap running executions whose worker stopped sending heartbeats."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--stale-after",
            type=setting_option("STALE_AFTER"),
            help="Seconds without heartbeat (SCHEDULING_STALE_AFTER).",
        )

    def handle(self, *args: Any, **o: Any) -> None:
        stale_after = o["stale_after"] if o["stale_after"] is not None else conf.get("STALE_AFTER")
        reaped = liveness.reap_stale_executions(
            now=timezone.now(), stale_after=stale_after, database_clock=True
        )
        self.emit({"reaped": reaped}, f"reaped {len(reaped)} execution(s)", as_json=o["json"])
