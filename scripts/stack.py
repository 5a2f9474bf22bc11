"""What a stack needs beside Duecourse itself, in one place for the Makefile and noxfile.py.

    python scripts/stack.py extras 6.1     # test
    python scripts/stack.py extras 5.2     # test,tasks,beat
    python scripts/stack.py python          # the newest supported Python here, as a path
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: The Pythons Duecourse supports, newest first.
PYTHONS = ("3.13", "3.12", "3.11")


def extras(django: str) -> str:
    """The extras a stack installs for the suite: the Django Tasks backport where Django has
    no framework of its own (5.2), django-celery-beat where it admits the Django (2.9.0: below
    6.1), and the test tools."""
    version = tuple(int(part) for part in django.split(".")[:2])
    wanted = ["test"]
    if version < (6, 0):
        wanted.append("tasks")
    if version < (6, 1):
        wanted.append("beat")
    return ",".join(wanted)


def python(version: str) -> str | None:
    """``python3.X`` that runs: on PATH, else among pyenv's installed versions."""
    name = f"python{version}"
    found = shutil.which(name)
    if found and subprocess.run([found, "-V"], capture_output=True).returncode == 0:
        return found
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates = sorted(glob.glob(f"{root}/versions/{version}.*/bin/{name}"))
    return candidates[-1] if candidates else None


def newest_python() -> str:
    for version in PYTHONS:
        found = python(version)
        if found:
            return found
    return shutil.which("python3") or sys.executable


if __name__ == "__main__":
    match sys.argv[1:]:
        case ["extras", django]:
            print(extras(django))
        case ["python"]:
            print(newest_python())
        case _:
            sys.exit(__doc__)
