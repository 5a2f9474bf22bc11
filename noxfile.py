"""The support table, run: every supported stack is a tested stack (``nox``; docs/install.md).

Each combination of Python and Django that Django itself supports, among the Pythons and
Djangos that Duecourse supports, is a session. A session installs the wheel of this checkout
(built once per nox run, shared by every session) into a fresh virtual environment made by uv
from its cache, with that Django and Celery (and the extras that stack takes: the Django Tasks
backport on Django 5.2, django-celery-beat where it admits the Django), and runs the suite from
this checkout against the installed wheel. What each session proves:

- the oldest (Python 3.11, Django 5.2, Celery at the lowest release ``pyproject.toml`` admits)
  and the newest (Python 3.13, Django 6.1, the newest Celery; ``make test`` runs it from the
  checkout) run everything: the in-process suite, every real-process test (workers,
  schedulers, faults, RabbitMQ), the browser tests, and the SQLite pass; the oldest installs
  the host project of the install test with pip, the others with uv;
- every stack between them proves what differs from one stack to the next: the in-process
  suite (the models, admin, commands, API and ledger on that Django and Python, the emailer's
  headers through that Django's mail), and the tests marked ``stack``: the wheel installed into
  a host project of somebody else's shape, a process that enqueues and exits, the Django Tasks
  framework of that Django on real workers, and the admin's pages and dashboard in a browser
  (each Django ships its own admin templates and scripts). Two kinds of test prove nothing
  that differs between Djangos, and run where what they depend on changes: the tests marked
  ``pure`` (the timing rules' arithmetic: cron, calendars, previews, schedules; no database,
  no Django behaviour) on every Python version, so among the stacks between on 3.12-django5.2
  alone (3.11 and 3.13 are the full stacks'); and the install test's domain apps each
  installed on its own beside the engine (which apps import which: the wheel's shape, not the
  stack's) on the full stacks.

    nox -l                          # the sessions
    nox -t stacks                   # every combination but the newest, the oldest in full
    nox -t full / nox -t between    # the oldest alone / the stacks between
    nox -s py3.12-django6.0         # one of them

``.ci/run`` runs ``make test`` and then each session of ``nox -t stacks``, timing each part.
Interpreters are found on PATH as ``python3.X`` or, failing that, among pyenv's installed
versions. docs/testing.md says what each part of the suite needs and how long it takes.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "scripts"))
import stack as stacks  # noqa: E402  (scripts/stack.py: what each stack installs)

#: uv makes a session's environment from its cache in a second or two; plain venv and pip where
#: uv is absent. Every session installs the one wheel built by ``_wheel()``.
nox.options.default_venv_backend = "uv|venv"
nox.options.reuse_existing_virtualenvs = False
nox.options.error_on_missing_interpreters = True

#: Bytecode is cached: with PYTHONDONTWRITEBYTECODE set (some CI images set it), every process a
#: session starts (pytest's workers, the Celery workers and schedulers the tests start, every
#: ``manage.py`` they run) would compile Django, Celery and the suite afresh: about a second of
#: CPU each in an environment uv made without bytecode, and eight seconds of pytest's assertion
#: rewriting for each pytest worker. Written once, each file is read back by the others.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

#: Celery's lowest release that ``pyproject.toml``'s range admits (with the lowest kombu that
#: release admits), and "the newest" as the index has it.
CELERY_LOWEST = ("celery==5.5.0", "kombu==5.5.2")
CELERY_NEWEST: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stack:
    python: str
    django: str
    celery: str  # "lowest" or "newest"
    full: bool = False

    @property
    def extras(self) -> str:
        return stacks.extras(self.django)


#: Python 3.11-3.13 x Django 5.2, 6.0, 6.1, as Django supports them (6.x needs 3.12).
STACKS = [
    Stack("3.11", "5.2", "lowest", full=True),
    Stack("3.12", "5.2", "newest"),
    Stack("3.13", "5.2", "lowest"),
    Stack("3.12", "6.0", "newest"),
    Stack("3.13", "6.0", "newest"),
    Stack("3.12", "6.1", "newest"),
    Stack("3.13", "6.1", "newest", full=True),  # the newest: `make test`
]
NEWEST = STACKS[-1]


def runs_pure(stack: Stack) -> bool:
    """Whether the session runs the tests marked ``pure``: the full stacks do, and among the
    stacks between, the first of each Python version that no full stack has (3.12)."""
    if stack.full:
        return True
    covered = {s.python for s in STACKS if s.full}
    return stack is next(s for s in STACKS if s.python == stack.python) and (
        stack.python not in covered
    )


def _find_interpreters() -> None:
    """Put pyenv's interpreters on PATH where ``python3.X`` is not there already."""
    for version in sorted({stack.python for stack in STACKS}):
        found = stacks.python(version)
        if found and shutil.which(f"python{version}") != found:
            os.environ["PATH"] = f"{Path(found).parent}{os.pathsep}{os.environ['PATH']}"


_find_interpreters()


def _database_url(session: nox.Session) -> str:
    """The suite's database for this session: its own name, so sessions never share one."""
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/duecourse")
    tag = "".join(ch for ch in session.name if ch.isalnum())[-40:]
    return f"{base.rsplit('/', 1)[0]}/dc_{tag}"


@functools.cache
def _wheel() -> Path:
    """The wheel of this checkout, built once per nox run and installed by every session.

    Built with uv where it is installed (next to nox or on PATH), else with pip; the build's
    own dependencies (setuptools) come from the same cache as every session's packages. A
    wheel already built for this checkout may be given in ``DUECOURSE_WHEEL`` (``.ci/run``
    builds one and runs each session with its own ``nox -s``, to time it).
    """
    given = os.environ.get("DUECOURSE_WHEEL")
    if given:
        return Path(given)
    out = Path(tempfile.mkdtemp(prefix="duecourse-wheel-"))
    uv = _uv()
    if uv:
        command = [uv, "build", "--wheel", "--out-dir", str(out), str(ROOT)]
    else:
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(ROOT)]
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return next(out.glob("duecourse-*.whl"))


def _uv() -> str | None:
    """uv beside nox's interpreter (the ``test`` extra installs it), else on PATH."""
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.exists() else shutil.which("uv")


def _run_stack(session: nox.Session, stack: Stack) -> None:
    wheel = _wheel()
    rundir = Path(tempfile.mkdtemp(prefix="duecourse-run-"))
    celery = CELERY_LOWEST if stack.celery == "lowest" else CELERY_NEWEST
    session.install(
        f"duecourse[{stack.extras}] @ {wheel.as_uri()}", f"django=={stack.django}.*", *celery
    )
    session.run(
        "python", "-c",
        "import django, celery, sys; "
        "print('stack: Python', sys.version.split()[0], '| Django', django.get_version(),"
        " '| Celery', celery.__version__)",
    )  # fmt: skip
    # The checkout's tests and host project (``tests``, ``config``) are found after
    # site-packages, so the apps themselves come from the wheel: a .pth file appends the
    # checkout to the session's sys.path.
    site = session.run(
        "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", silent=True
    )
    Path(str(site).strip(), "duecourse-checkout.pth").write_text(f"{ROOT}\n")
    env = {
        "DATABASE_URL": _database_url(session),
        "CELERY_BROKER_URL": os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
        # The suite imports the apps from the installed wheel, not from this checkout
        # (tests/conftest.py checks), and the install test installs this same wheel.
        "DUECOURSE_EXPECT_INSTALLED": "1",
        "DUECOURSE_WHEEL": str(wheel),
    }
    if stack is STACKS[0]:
        # The oldest stack installs the host project with pip, as docs/install.md does; the
        # others with uv, from its cache (tests/test_install.py).
        env["DUECOURSE_INSTALL_WITH"] = "pip"
    # The fault campaign (three minutes of a cluster under a nemesis) runs once, on the newest
    # stack (``make test``): it checks the engine's promises, which no stack changes.
    if stack.full:
        selection = ["-m", "not campaign"]
    else:
        # ``pure`` tests: Python's alone to decide, so one stack between per Python version.
        between = "not slow or stack"
        selection = ["-m", between if runs_pure(stack) else f"({between}) and not pure"]
    # The checkout must not come first on sys.path: so `pytest`, not `python -m pytest`;
    # pytest-django must not put manage.py's folder there; and the run starts in a folder of
    # its own, since Celery's Django fix-up puts the working directory first.
    pytest = [
        "pytest", "-q", "-p", "no:cacheprovider", "--import-mode=append",
        "-o", "django_find_project=false", "-c", str(ROOT / "pyproject.toml"),
        "--rootdir", str(ROOT), "-n", _test_workers(stack), "--dist", "loadgroup",
        "--no-loadscope-reorder",
        "--durations=30",
    ]  # fmt: skip
    session.chdir(rundir)
    session.run(*pytest, *selection, *session.posargs, str(ROOT / "tests"), env=env)
    if stack.full:
        sqlite = ROOT / "var" / f"test-{session.name.replace('/', '-')}.sqlite3"
        # The specification alone: the suite picks it outside PostgreSQL (tests/conftest.py).
        session.run(
            *pytest, str(ROOT / "tests"), env={**env, "DATABASE_URL": f"sqlite:///{sqlite}"}
        )
    session.chdir(ROOT)
    shutil.rmtree(rundir, ignore_errors=True)


def _test_workers(stack: Stack) -> str:
    """pytest-xdist processes: four where the real-process tests run (they mostly wait, as in
    ``make test``), two for the in-process suite, which keeps two cores busy by itself;
    ``TEST_WORKERS`` overrides both."""
    return os.environ.get("TEST_WORKERS") or ("4" if stack.full else "2")


def session_name(stack: Stack) -> str:
    return f"py{stack.python}-django{stack.django}"


for _stack in STACKS:

    def _session(session: nox.Session, stack: Stack = _stack) -> None:
        _run_stack(session, stack)

    _session.__doc__ = (
        f"Python {_stack.python}, Django {_stack.django}, Celery {_stack.celery}: "
        + ("the whole suite" if _stack.full else "the in-process suite and the stack tests")
    )
    nox.session(
        name=session_name(_stack),
        python=_stack.python,
        tags=(["newest"] if _stack is NEWEST else ["stacks", "full" if _stack.full else "between"]),
    )(_session)


if __name__ == "__main__":
    sys.exit("run with nox: nox -l")
