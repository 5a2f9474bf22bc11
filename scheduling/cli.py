"""What every command line shares: one line for every refusal, never a usage dump or traceback.

argparse answers an option it cannot read (a missing value, a bad choice, a missing required
option) with its usage and a message; ``OneLineParser`` answers with one line naming the option
(exit status 2). ``OneLineCommand`` turns a ``ValidationError`` from the services into one
``CommandError`` line naming each field and the option that set it (exit status 1). The
engine's commands and the domain apps' (through ``scheduling.api``) are built on it, so every
command refuses alike; ``--help`` still prints the full usage.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from datetime import datetime, tzinfo
from typing import Any, NoReturn

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling import readable
from scheduling.rules.validation import first_error


class OneLineParser(CommandParser):
    """A command parser whose errors are one line naming the option and the reason."""

    def error(self, message: str) -> NoReturn:
        reason = one_line_reason(message)
        if not self.called_from_command_line:
            raise CommandError(reason)
        sys.stderr.write(f"{self.prog}: error: {reason}\n")
        sys.exit(2)


def _required(match: re.Match[str]) -> str:
    names = [name.strip() for name in match.group(1).split(",")]
    return f"{names[0]}: is required" if len(names) == 1 else f"{', '.join(names)}: are required"


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
    (re.compile(r"^the following arguments are required: (.+)$"), _required),
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


def shown_value(value: Any) -> str:
    """A value as a command prints it in text: lists and mappings as compact JSON in their
    own order, compact (``{"sku":"COF","amount":1}``), never Python's repr; ``None`` as "-"."""
    if value is None:
        return "-"
    if isinstance(value, (dict, list, tuple, bool)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return str(value)


def iso_instant(text: str | None, zone: tzinfo | None = None) -> str:
    """An instant of a command's JSON (ISO 8601) as its text prints it, by ``readable``'s
    rule; "-" for none, and the ledger's words for a time past the calendar's ends
    ("infinity", ``scheduling.ledger.pgtimes``) as they are."""
    if not text:
        return "-"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    return readable.instant(moment, zone)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows under their headers, each column as wide as its widest value: nothing is cut."""
    cells = [[str(h) for h in headers], *([shown_value(v) for v in row] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    )


def add_zone_option(parser: argparse.ArgumentParser) -> None:
    """``--tz ZONE``: the zone a listing prints its times in (the project's ``TIME_ZONE``
    by default; ``--json`` always gives ISO-8601 in UTC)."""
    parser.add_argument(
        "--tz",
        dest="tz",
        metavar="ZONE",
        help="IANA time zone to print times in (default: the project's TIME_ZONE).",
    )


def zone_option(name: str | None) -> tzinfo:
    """The zone ``--tz`` names, or the project's; a ``ValidationError`` on ``timezone``
    (shown as ``--tz``) when it names none."""
    if name is None:
        return readable.current_zone()
    try:
        return readable.zone_named(name)
    except ValueError as exc:
        raise ValidationError({"timezone": str(exc)}) from None


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.extend(_parsers(sub))
    return found


class OneLineCommand(BaseCommand):
    """A management command whose every refusal is one line (see the module docstring)."""

    #: Model fields whose command-line option has another name, for error messages.
    option_names: dict[str, str] = {}

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # Django builds a CommandParser (and its subparsers) before any hook could choose
        # the class; the subclass only replaces ``error``.
        for each in _parsers(parser):
            each.__class__ = OneLineParser
        return parser

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except ValidationError as exc:
            raise CommandError(first_error(exc, options=self.option_names)) from None
