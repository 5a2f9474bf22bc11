"""``manage.py runscheduler [--once] [--batch-size N]``: the scheduler loop without celery beat."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import CommandParser

from scheduling.celeryapp import celery_app
from scheduling.management.base import DuecourseCommand, positive_int, positive_seconds
from scheduling.scheduler.loop import Dispatcher


class Command(DuecourseCommand):
    help = "Claim due jobs and publish their executions, forever (or once with --once)."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--once", action="store_true", help="Run one tick and exit.")
        parser.add_argument("--batch-size", type=positive_int, help="Jobs claimed per transaction.")
        parser.add_argument(
            "--max-sleep", type=positive_seconds, help="Longest sleep between ticks (s)."
        )

    def handle(self, *args: Any, **o: Any) -> None:
        dispatcher = Dispatcher(celery_app(), batch_size=o["batch_size"], max_sleep=o["max_sleep"])
        stop = threading.Event()
        if not o["once"]:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
        try:
            while True:
                sleep = dispatcher.tick()
                if o["once"] or stop.wait(sleep) or stop.is_set():
                    break
        finally:
            dispatcher.close()
        self.emit(dispatcher.stats, f"scheduler stopped: {dispatcher.stats}", as_json=o["json"])
