"""``manage.py runscheduler [--once] [--batch-size N] [--loglevel L]``: the scheduler loop
without celery beat; at start, the jobs declared in code are reconciled with the ledger
(``SCHEDULING_SYNC_ON_START``)."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Any

from django.core.management.base import CommandParser
from django.utils import timezone

from scheduling.celeryapp import celery_app
from scheduling.management.base import DuecourseCommand, setting_option
from scheduling.scheduler.loop import Dispatcher, freeze_startup_heap
from scheduling.stages import reconciliation


class Command(DuecourseCommand):
    help = "Claim due jobs and publish their executions, forever (or once with --once)."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--once", action="store_true", help="Run one tick and exit.")
        parser.add_argument(
            "--batch-size",
            type=setting_option("BATCH_SIZE"),
            help="Jobs claimed per transaction (SCHEDULING_BATCH_SIZE).",
        )
        parser.add_argument(
            "--max-sleep",
            type=setting_option("MAX_SLEEP"),
            help="Longest sleep between ticks, in seconds (SCHEDULING_MAX_SLEEP).",
        )
        parser.add_argument(
            "-l",
            "--loglevel",
            type=str.upper,
            choices=LEVELS,
            help="Level of the 'scheduling' logger (default: the project's LOGGING; INFO on "
            "stderr when it gives that logger no handler).",
        )

    def handle(self, *args: Any, **o: Any) -> None:
        log_to_stderr_unless_configured(logging.getLogger("scheduling"), o["loglevel"])
        reconciliation.sync_on_start(now=timezone.now(), app=celery_app())
        dispatcher = Dispatcher(celery_app(), batch_size=o["batch_size"], max_sleep=o["max_sleep"])
        freeze_startup_heap()
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


LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


def log_to_stderr_unless_configured(logger: logging.Logger, level: str | None) -> None:
    """Let the scheduler say what it claims, as ``celery beat`` does, in any project.

    A project whose LOGGING gives the logger (or an ancestor) a handler keeps it, at ``level``
    when one is given. Otherwise Python would print only warnings, without a time: the
    scheduler logs to stderr at ``level`` (INFO by default).
    """
    if level:
        logger.setLevel(level)
    if logger.hasHandlers():
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logger.addHandler(handler)
    if not level:
        logger.setLevel(logging.INFO)
