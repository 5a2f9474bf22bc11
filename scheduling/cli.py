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
from scheduling.rules.validation import first_error, past_run_at_error
from scheduling.timing.schedules import zone_error
from scheduling.timing.values import Calendar, Cron, Every, Once, Timing, parse_instant


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


# -- timing options: what ``jobs add|edit``, ``emailer task schedule`` and the subscriptions
#    command read for *when*, parsed and refused in one place, so every command accepts and
#    refuses the same timing with the same words.

#: What a refused past ``--at`` ends with on the command line (``manage.py jobs run NAME``
#: runs one occurrence of an existing job now).
PAST_AT_HINT = (
    "--at must be in the future; run it now with `manage.py jobs run NAME`, "
    "or give --allow-past to save it to run at once"
)


def add_timing_options(parser: argparse.ArgumentParser, *, editing: bool = False) -> None:
    """``--every | --cron | --rrule | --at`` (one of them, required unless ``editing``), ``--tz``,
    ``--allow-past``, ``--start`` and ``--end``.

    Nothing has a default, so ``parse_timing_options`` can tell a ``--tz UTC`` given with
    ``--every`` (accepted) from no ``--tz`` at all, and ``edit`` changes only what is given.
    """
    when = parser.add_mutually_exclusive_group(required=not editing)
    when.add_argument("--every", help="ISO-8601 interval, such as PT10S or PT3H.")
    when.add_argument("--cron", help='Five-field cron expression, such as "0 9 * * 1-5".')
    when.add_argument("--at", help="One instant with an offset, such as 2030-01-01T09:00Z.")
    when.add_argument(
        "--rrule",
        help="A calendar: RFC 5545 RRULE, RDATE and EXDATE lines (newline-separated), "
        'such as "FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9", read in --tz.',
    )
    parser.add_argument(
        "--tz",
        help="IANA time zone of --cron and --rrule (default UTC); refused with --every and --at.",
    )
    parser.add_argument(
        "--allow-past",
        action="store_true",
        help="Save an --at that has already passed: the one-off runs at once.",
    )
    clear = ' ("" clears it)' if editing else ""
    parser.add_argument("--start", help=f"No occurrence before this instant{clear}.")
    parser.add_argument("--end", help=f"No occurrence after this instant; then completed{clear}.")


def parse_timing_options(
    options: dict[str, Any], *, now: datetime, editing: bool = False
) -> dict[str, Any]:
    """The schedule fields the timing options give, checked; one error per field.

    Only the options given appear (an empty ``--start``/``--end`` when ``editing`` is None:
    it clears the bound). Refused here, before any row is read: an instant without an offset
    or out of range, an ``--end`` already past (a typo in the year would pass unnoticed, and
    the job would be saved finished), an empty ``--tz``, a ``--tz`` other than UTC without
    ``--cron`` or ``--rrule`` (the same rule and words as the model's,
    ``schedules.zone_error``), and
    ``--start``/``--end`` with ``--at`` (a single instant has no window), and, on ``add``,
    an ``--at`` already past unless ``--allow-past`` (``validation.past_run_at_error``, the
    rule the model, the admin and the API apply too, here ending with ``PAST_AT_HINT``).
    """
    errors: dict[str, str] = {}
    fields: dict[str, Any] = {}
    for option, field in (("every", "interval"), ("cron", "cron"), ("rrule", "rrule")):
        if options.get(option) is not None:
            fields[field] = options[option]
    for option, field in (("at", "run_at"), ("start", "starts_at"), ("end", "ends_at")):
        raw = options.get(option)
        if raw is None:
            continue
        if not raw.strip() and option != "at" and editing:
            fields[field] = None
            continue
        try:
            fields[field] = parse_instant(raw, field=option)
        except ValidationError as exc:
            errors.update({k: " ".join(v) for k, v in exc.message_dict.items()})
    end = fields.get("ends_at")
    if end is not None and "end" not in errors and end <= now:
        errors["end"] = f"{end.isoformat()} has already passed; it must be in the future"
    tz = options.get("tz")
    if tz is not None:
        kinds = [
            option for option in ("every", "cron", "rrule", "at") if options.get(option) is not None
        ]
        if not tz.strip():
            errors["timezone"] = "must not be empty; give an IANA zone such as Europe/Paris"
        elif kinds and kinds not in (["cron"], ["rrule"]):
            problem = zone_error(options.get("every") or "", "", tz)
            if problem is not None:
                errors["timezone"] = problem
        else:
            fields["timezone"] = tz
    if options.get("at") is not None and (
        options.get("start") is not None or options.get("end") is not None
    ):
        errors.setdefault("start", "--start and --end do not apply to --at (one instant)")
    at = fields.get("run_at")
    if at is not None and not editing:
        # A changed instant on ``edit`` is the job's to judge (``edit_job``): it knows the
        # value it replaces, which may stay.
        passed = past_run_at_error(at, now=now, allow_past=bool(options.get("allow_past")))
        if passed is not None:
            errors["run_at"] = f"{passed}; {PAST_AT_HINT}"
    if errors:
        raise ValidationError(errors)
    return fields


def timing_of(fields: dict[str, Any], *, allow_past: bool = False) -> Timing:
    """The timing value (``Every``, ``Cron``, ``Calendar`` or ``Once``) of
    ``parse_timing_options``' fields, for a command that schedules through ``scheduling.api``."""
    if fields.get("run_at") is not None:
        return Once(fields["run_at"], allow_past=allow_past)
    window = {"start": fields.get("starts_at"), "end": fields.get("ends_at")}
    if fields.get("cron") is not None:
        return Cron(fields["cron"], tz=fields.get("timezone") or "UTC", **window)
    if fields.get("rrule") is not None:
        return Calendar(fields["rrule"], tz=fields.get("timezone") or "UTC", **window)
    return Every(fields.get("interval") or "", **window)
