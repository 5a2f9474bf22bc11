"""``manage.py runstack``: a worker, the scheduler and the admin together, for the local demo.

Starts a Celery worker for the project's own app (``SCHEDULING_CELERY_APP``, or the module
that holds Celery's current app), ``manage.py runscheduler`` and a web server for the admin as
child processes with the same settings, passes their output through with each job named
(``scheduling.management.console``), prints where the admin is and how to log in, and stops
everything cleanly on Ctrl-C or SIGTERM.

Where the demo is allowed (``SCHEDULING_DEMO``: this repository turns it on for its embedded
default database only), the login is a local demo superuser, ``demo-admin``, whose password is
generated afresh at every start and printed once: there is no fixed password to leak. Against
any other database no account is made or changed.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, CommandParser
from django.urls import NoReverseMatch, reverse

from scheduling import conf
from scheduling.celeryapp import app_path
from scheduling.management.base import DuecourseCommand, whole_number
from scheduling.management.console import JobNames, Quieter

STOP_TIMEOUT = 20.0
WEB_START_TIMEOUT = 15.0
DEMO_ADMIN = "demo-admin"
#: The most worker processes ``--concurrency`` starts on one machine.
MAX_CONCURRENCY = 256


def port_is_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_until_listening(host: str, port: int, *, timeout: float, stop: threading.Event) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stop.is_set():
        with socket.socket() as sock:
            sock.settimeout(0.5)
            if sock.connect_ex((host, port)) == 0:
                return True
        stop.wait(0.2)
    return False


def manage_command() -> list[str]:
    """How to run another management command with this one's settings and project."""
    script = os.path.abspath(sys.argv[0])
    if os.path.basename(script) == "manage.py":
        return [sys.executable, script]
    return [sys.executable, "-m", "django"]


def dashboard_url() -> str:
    try:
        return reverse("scheduling:dashboard")
    except NoReverseMatch:
        return ""


def demo_login() -> tuple[str, str]:
    """Create or refresh the demo superuser with a new random password; return both."""
    password = secrets.token_urlsafe(12)
    users = get_user_model().objects
    user = users.filter(username=DEMO_ADMIN).first()
    if user is None:
        user = users.create_superuser(DEMO_ADMIN, email="", password=password)
    else:
        user.is_staff = user.is_superuser = user.is_active = True
        user.set_password(password)
        user.save()
    return DEMO_ADMIN, password


class Command(DuecourseCommand):
    help = "Run a Celery worker, the scheduler and the admin until interrupted."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--concurrency",
            type=whole_number(1, MAX_CONCURRENCY),
            default=2,
            help=f"Worker processes (2; at most {MAX_CONCURRENCY}).",
        )
        parser.add_argument("--loglevel", default="INFO")
        parser.add_argument("--host", default="127.0.0.1", help="Admin address (127.0.0.1).")
        parser.add_argument(
            "--port",
            type=whole_number(1, 65_535),
            # Read by its type like a typed value: a bad DUECOURSE_PORT is refused naming --port.
            default=os.environ.get("DUECOURSE_PORT", "8000"),
            help="Admin port (8000, or DUECOURSE_PORT); a free one when it is taken.",
        )
        parser.add_argument("--no-web", action="store_true", help="Do not serve the admin.")

    def handle(self, *args: Any, **o: Any) -> None:
        python = sys.executable
        try:
            celery_app = conf.get("CELERY_APP") or app_path()
        except LookupError as exc:
            raise CommandError(str(exc)) from None
        manage = manage_command()
        commands = {
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                celery_app,
                "worker",
                "--loglevel",
                o["loglevel"],
                "--concurrency",
                str(o["concurrency"]),
                "--without-mingle",
                "--without-gossip",
            ],
            "scheduler": [*manage, "runscheduler"],
        }
        address = None
        env = os.environ.copy()
        if not o["no_web"]:
            host, port = o["host"], o["port"]
            if not port_is_free(host, port):
                port = free_port(host)
            address = f"http://{host}:{port}/admin/"
            if not ({"EMAILER_SITE_URL", "SITE_URL"} & os.environ.keys()):
                # Links in mail sent by this stack's worker point at the port it serves.
                env["EMAILER_SITE_URL"] = f"http://{host}:{port}"
            # runserver without DEBUG: WhiteNoise serves the admin's styles.
            commands["web"] = [*manage, "runserver", f"{host}:{port}", "--noreload"]
        names = JobNames()
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
                env=env,
                start_new_session=True,
            )
            children[label] = child
            assert child.stdout is not None
            threading.Thread(
                target=self._relay, args=(label, child.stdout, names), daemon=True
            ).start()
        self.stdout.write(f"{', '.join(children)} started; press Ctrl-C to stop")
        if address:
            login = demo_login() if conf.get("DEMO") else None
            # Said once the admin answers, so the login is not lost among the start banners.
            wait_until_listening(o["host"], port, timeout=WEB_START_TIMEOUT, stop=stop)
            self.stdout.write(f"admin: {address}")
            if login is not None:
                self.stdout.write(f"log in as {login[0]} with password {login[1]}")
            else:
                self.stdout.write(
                    "log in with your own account (manage.py createsuperuser): the demo login "
                    "is made only in a throwaway local database (SCHEDULING_DEMO)"
                )
            dashboard = dashboard_url()
            if dashboard:
                self.stdout.write(f"dashboard: http://{host}:{port}{dashboard}")
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

    def _relay(self, label: str, stream: IO[str], names: JobNames) -> None:
        quiet = Quieter()
        for line in stream:
            kept = quiet.keep(line.rstrip())
            if kept is not None:
                self.stdout.write(f"[{label}] {names.annotate(kept)}")

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
