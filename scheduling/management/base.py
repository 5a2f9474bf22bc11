"""What every Duecourse command shares: ``--json`` output and one-line, field-named errors.

Errors that argparse finds (an option without its value, two options that exclude each other)
are one line too, naming the option, instead of argparse's usage dump; ``--help`` is unchanged.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import Any, NoReturn

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.schedules import ScheduleError
from scheduling.timing import parse_instant as parse_instant  # the commands' one parser
from scheduling.validation import first_error


class OneLineParser(CommandParser):
    """A command parser whose errors are one line naming the option and the reason."""

    def error(self, message: str) -> NoReturn:
        reason = one_line_reason(message)
        if not self.called_from_command_line:
            raise CommandError(reason)
        sys.stderr.write(f"{self.prog}: error: {reason}\n")
        sys.exit(2)


_REWRITES = (
    # argparse reads "--every -PT5S" as two options; the value needs the = form.
    (
        re.compile(r"^argument (--[\w-]+)(?:/[^:]*)?: expected one argument$"),
        r"\1: expected a value (for one that starts with '-', write \1=VALUE)",
    ),
    (re.compile(r"^argument ([^:]+): not allowed with argument (.+)$"), r"\1: not allowed with \2"),
    (re.compile(r"^argument ([^:]+): invalid int value: (.+)$"), r"\1: \2 is not a whole number"),
    (re.compile(r"^argument ([^:]+): invalid float value: (.+)$"), r"\1: \2 is not a number"),
    (re.compile(r"^argument ([^:]+): (.+)$"), r"\1: \2"),
    (
        re.compile(r"^one of the arguments (.+) is required$"),
        lambda m: f"{m.group(1).split()[0]}: one of {', '.join(m.group(1).split())} is required",
    ),
)


def one_line_reason(message: str) -> str:
    """argparse's message as ``option: reason`` on one line."""
    text = " ".join(message.split())
    for pattern, replacement in _REWRITES:
        if pattern.match(text):
            return pattern.sub(replacement, text)
    return text


def positive_seconds(raw: str) -> float:
    """argparse type: a finite number of seconds above zero (``nan`` and ``inf`` are not)."""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a positive number of seconds")
    return value


def positive_int(raw: str) -> int:
    """argparse type: a whole number of 1 or more."""
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number of 1 or more")
    return value


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.extend(_parsers(sub))
    return found


class DuecourseCommand(BaseCommand):
    #: Model fields whose command-line option has another name, for error messages.
    option_names: dict[str, str] = {}

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # Django builds a CommandParser (and its subparsers) before any hook could choose
        # the class; the subclass only replaces ``error``.
        for each in _parsers(parser):
            each.__class__ = OneLineParser
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json", action="store_true", help="Print the result as one JSON value on stdout."
        )

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except ValidationError as exc:
            raise CommandError(first_error(exc, options=self.option_names)) from None
        except ScheduleError as exc:
            raise CommandError(str(exc)) from None

    def emit(self, data: Any, text: str, *, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(data, default=str, indent=None))
        else:
            self.stdout.write(text)


