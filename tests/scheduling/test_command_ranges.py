"""Every numeric option of every command is range-checked, refused in one line naming the
option and the range, never a traceback.

A number typed on a command line reaches a database's ``LIMIT``, a clock's timeout or a
socket: ``jobs history --limit 99999999999999999999`` was a ``DataError``, ``reap
--stale-after 1e308`` an ``OverflowError``. Every numeric option is read by one type
(``scheduling.commandline.options.NumberOption``), and the walk below finds every option of
every command of the three apps, so a new numeric option read by a bare ``int`` or ``float``
fails here.
"""

from __future__ import annotations

import argparse
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError
from django.utils import timezone

from scheduling.commandline.options import NumberOption
from tests.factories import create_job

pytestmark = pytest.mark.django_db

APPS = ("scheduling", "emailer", "subscriptions")
HUGE = "99999999999999999999"
NOOP = "scheduling.diagnostics.noop"
ADD = ["jobs", "add", "x", "--task", NOOP, "--every", "PT1H"]
TASK_ADD = ["emailer", "task", "add", "t", "--project", "p", "--subject", "s", "--body", "b"]
SCHEDULE = ["emailer", "task", "schedule", "t", "--every", "PT1H"]

#: Each numeric option, the command line it is given on, and the range its refusal names.
OPTIONS: list[tuple[list[str], str, str]] = [
    (["jobs", "history", "j"], "--limit", "from 1 to 10,000"),
    (["jobs", "next", "j"], "--count", "from 1 to 1,000"),
    (ADD, "--max-retries", "from 0 to 2,147,483,647"),
    (ADD, "--max-running", "from 0 to 2,147,483,647"),
    (ADD, "--pause-after-failures", "from 0 to 2,147,483,647"),
    (ADD, "--timeout", "from 1 to 2,147,483,647"),
    (ADD, "--priority", "from 0 to 255"),
    (ADD, "--expires", "from 0 to 2,147,483,647"),
    (ADD, "--task-row-id", "from 1 to 9,223,372,036,854,775,807"),
    *(
        (["jobs", "edit", "j"], option, span)
        for option, span in (
            ("--max-retries", "from 0 to 2,147,483,647"),
            ("--max-running", "from 0 to 2,147,483,647"),
            ("--pause-after-failures", "from 0 to 2,147,483,647"),
            ("--timeout", "from 1 to 2,147,483,647"),
            ("--priority", "from 0 to 255"),
            ("--expires", "from 0 to 2,147,483,647"),
            ("--task-row-id", "from 1 to 9,223,372,036,854,775,807"),
        )
    ),
    (["executions"], "--limit", "from 1 to 10,000"),
    (["prune_history", "--older-than", "30d"], "--keep-last", "from 0 to 1,000,000"),
    (["prune_history", "--older-than", "30d"], "--batch-size", "from 1 to 100,000"),
    (["prune_history", "--older-than", "30d"], "--max-seconds", "from 0.1 to 604,800"),
    (["reap"], "--stale-after", "from 1 to 86,400"),
    (["runscheduler", "--once"], "--batch-size", "from 1 to 100,000"),
    (["runscheduler", "--once"], "--max-sleep", "from 0.01 to 3,600"),
    (["runstack"], "--concurrency", "from 1 to 256"),
    (["runstack"], "--port", "from 1 to 65,535"),
    (TASK_ADD, "--batch-size", "from 1 to 2,147,483,647"),
    (TASK_ADD, "--rate", "from 0 to 100,000"),
    (SCHEDULE, "--expires", "from 1 to 2,147,483,647"),
    (SCHEDULE, "--max-retries", "from 0 to 2,147,483,647"),
    (SCHEDULE, "--timeout", "from 1 to 2,147,483,647"),
    (["emailer", "history"], "--limit", "from 1 to 100,000"),
    (["emailer", "deliveries", "--task", "t"], "--limit", "from 1 to 100,000"),
    (["subscriptions", "orders"], "--limit", "from 1 to 100,000"),
]

#: What each numeric option is given: past any column, negative, not a number, not finite.
HOSTILE = [HUGE, "-1", "abc", "nan", "1e308", ""]


def parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Any:
    """``parser`` and each of its subcommands' parsers, with the words that reach each."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, (*path, name))


def numeric_options() -> dict[tuple[str, ...], Any]:
    """Every option of every command of the three apps whose value is a number, by command
    words and option, with the type that reads it."""
    found: dict[tuple[str, ...], Any] = {}
    for name, app in get_commands().items():
        if app not in APPS:
            continue
        command = load_command_class(app, name)
        for path, parser in parsers(command.create_parser("manage.py", name)):
            for action in parser._actions:
                kind = action.type
                # Django's own --verbosity is an int among its choices.
                if isinstance(kind, NumberOption) or (kind in (int, float) and not action.choices):
                    option = action.option_strings[-1] if action.option_strings else action.dest
                    found[(name, *path, option)] = kind
    return found


def refusal(argv: list[str]) -> str:
    with pytest.raises(CommandError) as refused:
        call_command(*argv, stdout=StringIO(), stderr=StringIO())
    return str(refused.value)


@pytest.fixture
def rows(admin_user: Any) -> None:
    """A job named ``j`` and an emailer task named ``t``, so each command line reaches the
    option it is asked about; a refusal never gets further than the option."""
    create_job(owner=admin_user, name="j", task=NOOP, every="PT1H", now=timezone.now())
    call_command("emailer", "project", "add", "p", stdout=StringIO())
    call_command("emailer", *TASK_ADD[1:], stdout=StringIO())


def test_every_numeric_option_of_every_command_is_read_with_its_range() -> None:
    """No option is read by a bare ``int`` or ``float``, and each one is specified below."""
    found = numeric_options()
    assert ("jobs", "history", "--limit") in found and ("emailer", "history", "--limit") in found
    bare = sorted(" ".join(key) for key, kind in found.items() if kind in (int, float))
    assert bare == []
    unlisted = [
        " ".join(key)
        for key in found
        if not any(
            argv[0] == key[0] and option == key[-1] and set(key[1:-1]) <= set(argv)
            for argv, option, _ in OPTIONS
        )
    ]
    assert unlisted == []


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize(
    ("argv", "option", "span"), OPTIONS, ids=[" ".join([*a[:3], o]) for a, o, _ in OPTIONS]
)
def test_a_number_out_of_range_is_refused_naming_the_option_and_the_range(
    argv: list[str], option: str, span: str, value: str
) -> None:
    """Refused as the options are read, before any row is looked up or process started."""
    line = refusal([*argv, f"{option}={value}"])
    assert line.startswith(f"{option}: {value!r} is not a "), line
    assert line.endswith(span), line
    assert "\n" not in line


def test_jobs_history_with_a_huge_limit_is_refused_not_a_database_error(rows: None) -> None:
    assert refusal(["jobs", "history", "j", "--limit", HUGE]) == (
        f"--limit: '{HUGE}' is not a whole number from 1 to 10,000"
    )


def test_jobs_next_with_no_occurrences_asked_says_at_least_one(rows: None) -> None:
    assert refusal(["jobs", "next", "j", "--count", "0"]) == (
        "--count: '0' is not a whole number from 1 to 1,000"
    )


def test_a_limit_in_range_still_lists(rows: None) -> None:
    out = StringIO()
    call_command("jobs", "history", "j", "--limit", "10000", stdout=out)
    assert "created" in out.getvalue()


# --- timing options: an empty value is named, not read as no timing ------------------------------


@pytest.mark.parametrize(
    ("option", "field"),
    [("--rrule", "rrule (--rrule)"), ("--every", "interval (--every)"), ("--cron", "cron")],
)
@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_timing_is_refused_naming_its_own_option(
    rows: None, option: str, field: str, value: str
) -> None:
    line = refusal(["jobs", "add", "x", "--task", NOOP, f"{option}={value}"])
    assert line.startswith(f"{field}: must not be empty; give "), line
    line = refusal(["jobs", "edit", "j", f"{option}={value}"])
    assert line.startswith(f"{field}: must not be empty; give "), line


# --- backfill: a range the calendar can walk ------------------------------------------------------


@pytest.mark.parametrize(
    "start", ["0001-01-01T00:00Z", "0001-01-02T00:00+14:00", "1969-12-31T23:59Z"]
)
def test_a_backfill_from_before_the_epoch_is_refused_naming_from(rows: None, start: str) -> None:
    line = refusal(["jobs", "backfill", "j", "--from", start, "--to", "2020-01-01T00:00Z"])
    assert line.startswith("--from: "), line
    assert "is before 1970-01-01T00:00:00+00:00; a backfill reaches back to the Unix epoch" in line


def test_a_backfill_from_the_epoch_is_answered(rows: None) -> None:
    out = StringIO()
    call_command("jobs", "backfill", "j", "--from", "1970-01-01T00:00Z", "--to",
                 "1970-01-01T03:00Z", "--dry-run", stdout=out)  # fmt: skip
    assert out.getvalue().startswith("would backfill")
