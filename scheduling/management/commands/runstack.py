"""``manage.py runstack``: a worker and the scheduler together, for the embedded default.

Starts ``celery -A config worker`` and ``manage.py runscheduler`` as child processes with the
same settings, passes their output through (each execution logs ``execution.started`` and
``execution.completed``), and stops both cleanly on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Any

from django.core.management.base import CommandError, CommandParser

from scheduling.management.base import DuecourseCommand, positive_int

STOP_TIMEOUT = 20.0


class Command(DuecourseCommand):
    help = "Run a Celery worker and the scheduler until interrupted."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--concurrency", type=positive_int, default=2, help="Worker processes (2)."
        )
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args: Any, **o: Any) -> None:
        python = sys.executable
        commands = {
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "--loglevel",
                o["loglevel"],
                "--concurrency",
                str(o["concurrency"]),
                "--without-mingle",
                "--without-gossip",
            ],
            "scheduler": [python, "manage.py", "runscheduler"],
        }
        children: dict[str, subprocess.Popen[str]] = {}
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        for label, command in commands.items():
            child = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=os.environ.copy(),
                start_new_session=True,
            )
            children[label] = child
            assert child.stdout is not None
            threading.Thread(target=self._relay, args=(label, child.stdout), daemon=True).start()
        self.stdout.write("worker and scheduler started; press Ctrl-C to stop")
        died: list[str] = []
        try:
            while not stop.wait(0.5):
                died = [
                    f"the {label} exited with status {child.returncode}"
                    for label, child in children.items()
                    if child.poll() is not None
                ]
                if died:
                    self.stderr.write(f"{'; '.join(died)}; stopping the rest")
                    break
        finally:
            self._stop(children)
        if died:
            # A stack that lost a process did not do its job: say so to whatever started it.
            raise CommandError("; ".join(died))

    def _relay(self, label: str, stream: IO[str]) -> None:
        for line in stream:
            self.stdout.write(f"[{label}] {line.rstrip()}")

    def _stop(self, children: dict[str, subprocess.Popen[str]]) -> None:
        for child in children.values():
            if child.poll() is None:
                # The main process only: a warm shutdown lets running tasks finish, while a
                # signal to the whole group would kill the pool processes under them.
                os.kill(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for child in children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        self.stdout.write("stopped")
