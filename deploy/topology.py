"""Start the processes of a Procfile together: ``python deploy/topology.py [PROCFILE]``.

The launcher behind ``deploy/Procfile`` (two schedulers, two workers against the PostgreSQL and
Redis named by ``DATABASE_URL`` and ``CELERY_BROKER_URL``). It prefixes every output line with
the process name, and on Ctrl-C or SIGTERM stops every process gracefully. The tests start the
same commands through ``commands()`` and kill some of them on purpose.

``python`` and ``celery`` at the start of a command mean this interpreter (so the project's
virtualenv is used wherever the launcher is started from).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
PROCFILE = ROOT / "deploy" / "Procfile"
STOP_TIMEOUT = 30.0


def commands(procfile: Path = PROCFILE) -> dict[str, list[str]]:
    """``name -> argv`` for every ``name: command`` line of ``procfile``."""
    found: dict[str, list[str]] = {}
    for number, raw in enumerate(procfile.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, command = line.partition(":")
        if not sep or not name.strip() or not command.strip():
            raise SystemExit(f"{procfile}:{number}: expected 'name: command', got {raw!r}")
        argv = shlex.split(command)
        if argv[0] == "python":
            argv[0] = sys.executable
        elif argv[0] == "celery":
            argv = [sys.executable, "-m", "celery", *argv[1:]]
        found[name.strip()] = argv
    return found


def _relay(name: str, stream: IO[str], width: int) -> None:
    for line in stream:
        sys.stdout.write(f"{name:<{width}} | {line}")
        sys.stdout.flush()


def run(procfile: Path) -> int:
    """Start everything; stop everything when interrupted or when any process exits."""
    argvs = commands(procfile)
    width = max(map(len, argvs))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    children: dict[str, subprocess.Popen[str]] = {}
    for name, argv in argvs.items():
        child = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=os.environ.copy(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        children[name] = child
        assert child.stdout is not None
        threading.Thread(target=_relay, args=(name, child.stdout, width), daemon=True).start()
    print(f"started {', '.join(children)}; Ctrl-C stops them", flush=True)
    status = 0
    while not stop.wait(0.5):
        exited = [name for name, child in children.items() if child.poll() is not None]
        if exited:
            print(f"{', '.join(exited)} exited; stopping the others", flush=True)
            status = 1
            break
    for child in children.values():
        if child.poll() is None:
            os.kill(child.pid, signal.SIGTERM)  # warm shutdown: running tasks finish
    deadline = time.monotonic() + STOP_TIMEOUT
    for child in children.values():
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    return status


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]) if len(sys.argv) > 1 else PROCFILE))
