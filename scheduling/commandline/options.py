"""What every command line shares: one line for every refusal, never a usage dump or traceback.

argparse answers an option it cannot read (a missing value, a bad choice, a missing required
option) with its usage and a message; ``OneLineParser`` answers with one line naming the option
(exit status 2). ``OneLineCommand`` turns a ``ValidationError`` from the services into one
``CommandError`` line naming each field and the option that set it (exit status 1). The
engine's commands and the domain apps' (through ``scheduling.api``) are built on it, so every
command refuses alike; ``--help`` still prints the full usage. Every numeric option is
read by one type (``NumberOption``, made by ``whole_number``, ``number``, ``seconds`` and
``setting_option``), which refuses a value outside the option's range in one line naming
the range, before the value reaches a database, a clock or a socket.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any, NoReturn

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling import conf
from scheduling.models import Overlap
from scheduling.rules.validation import (
    MAX_JITTER,
    MAX_PRIORITY,
    first_error,
    parse_json_argument,
    parse_seconds,
    past_run_at_error,
    storable,
)
from scheduling.timing import readable
from scheduling.timing.calendars import CalendarError
from scheduling.timing.ics import IcsEvent, read_ics
from scheduling.timing.schedules import Misfire, zone_error
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


#: The largest value a whole-number option may take where nothing smaller applies: what a
#: job's integer columns hold, and what an id (a ``bigint``) may be.
INT_MAX = conf.INT_COLUMN_MAX
BIGINT_MAX = 2**63 - 1


def whole_number(minimum: int, maximum: int | None = None) -> NumberOption:
    """argparse type: a whole number from ``minimum`` to ``maximum`` (both included; by
    default ``INT_MAX``, what an integer column holds).

    Every numeric option of every command is read by this, ``number`` or ``seconds`` (the
    engine's, and the domain apps' through ``scheduling.api``), so each refuses
    alike, naming the range: ``--count: '0' is not a whole number from 1 to 1,000``. A
    value past what its column or the machine holds (``99999999999999999999``) is refused
    here, before a database or a clock sees it.
    """
    return NumberOption(int, minimum, INT_MAX if maximum is None else maximum, "a whole number")


def number(minimum: float, maximum: float) -> NumberOption:
    """argparse type: a finite number from ``minimum`` to ``maximum``
    (``--rate: 'inf' is not a number from 0 to 100,000``)."""
    return NumberOption(float, minimum, maximum, "a number")


def seconds(minimum: float, maximum: float) -> NumberOption:
    """argparse type: a finite number of seconds from ``minimum`` to ``maximum``
    (``--stale-after: 'nan' is not a number of seconds from 1 to 86,400``)."""
    return NumberOption(float, minimum, maximum, "a number of seconds")


def setting_option(name: str) -> NumberOption:
    """argparse type of an option that stands in for the setting ``SCHEDULING_<name>`` for
    one run (``runscheduler --batch-size``, ``reap --stale-after``): the setting's own range
    (``scheduling.conf.KNOBS``)."""
    knob = conf.KNOBS[name]
    noun = "a whole number" if knob.kind is int else "a number of seconds"
    return NumberOption(knob.kind, knob.minimum, knob.maximum, noun)


@dataclass(frozen=True)
class NumberOption:
    """An argparse type: a number of ``kind`` from ``minimum`` to ``maximum``, checked as a
    setting is (``conf.Knob``: finite, within its range); a whole number is read exactly,
    never through a float. Anything else is refused with the range."""

    kind: type
    minimum: Any
    maximum: Any
    noun: str

    def __call__(self, raw: str) -> Any:
        try:
            value = self.kind(raw)
        except (ValueError, OverflowError):
            value = None
        knob = conf.Knob(None, self.kind, "", self.minimum, self.maximum)
        if value is None or knob.problem(value) is not None:
            raise argparse.ArgumentTypeError(f"{raw!r} is not {self.noun} {self.span}")
        return value

    @property
    def span(self) -> str:
        return f"from {_bound(self.minimum)} to {_bound(self.maximum)}"


def _bound(value: float) -> str:
    """A bound as the refusal says it: 2,147,483,647 (exact), 86,400, 0.01."""
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.0f}" if value.is_integer() else f"{value:g}"


#: argparse type: a whole number of 1 or more (up to ``INT_MAX``).
positive_int = whole_number(1)


def active_username(raw: str) -> str:
    """argparse type of ``--by``: the username of an active Django user, as stored."""
    model = get_user_model()
    found = (
        model.objects.filter(**{model.USERNAME_FIELD: raw}).first()
        if raw and storable(raw)
        else None
    )
    if found is None or not found.is_active:
        raise argparse.ArgumentTypeError(f"no active user named {raw!r}")
    return str(found.get_username())


def add_by_option(parser: argparse.ArgumentParser) -> None:
    """``--by USERNAME``: the Django user a state-changing command acts for. The audit trail
    records that user beside the operating-system account that ran the command
    (``alice (os: root)``); a name that is not an active user is refused in one line
    (``--by: no active user named 'x'``)."""
    parser.add_argument(
        "--by",
        metavar="USERNAME",
        type=active_username,
        help="The (active) Django user this change is made for; the audit trail records it "
        "beside the operating-system account that runs the command.",
    )


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
    """Rows under their headers, each column as wide as its widest value: nothing is cut.

    Widths are the cells a value takes on screen (``readable.display_width``), so a name in
    wide characters lines up with the rest."""
    cells = [[str(h) for h in headers], *([shown_value(v) for v in row] for row in rows)]
    widths = [
        max(readable.display_width(line[i]) for line in cells) for i in range(len(headers))
    ]
    return "\n".join(
        "  ".join(
            readable.pad(cell, width) for cell, width in zip(line, widths, strict=True)
        ).rstrip()
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
        'such as "FREQ=MONTHLY;BYMONTHDAY=-1;BYHOUR=9", read in --tz; or @FILE.ics, an '
        "iCalendar file with one VEVENT (its DTSTART gives --tz and --start when not given).",
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


#: What an empty ``--every``, ``--cron`` or ``--rrule`` is told to give instead.
_TIMING_EXAMPLES = {
    "every": "an ISO-8601 interval such as PT10S",
    "cron": 'a five-field cron expression such as "0 9 * * 1-5"',
    "rrule": 'an RFC 5545 RRULE such as "FREQ=DAILY;BYHOUR=9"',
}


def parse_timing_options(
    options: dict[str, Any], *, now: datetime, editing: bool = False
) -> dict[str, Any]:
    """The schedule fields the timing options give, checked; one error per field.

    Only the options given appear (an empty ``--start``/``--end`` when ``editing`` is None:
    it clears the bound). Refused here, before any row is read: an empty ``--every``,
    ``--cron`` or ``--rrule`` (named, rather than read as no timing at all), an instant
    without an offset or out of range, an ``--end`` already past (a typo in the year would
    pass unnoticed, and the job would be saved finished), an empty ``--tz``, a ``--tz``
    other than UTC without ``--cron`` or ``--rrule`` (the same rule and words as the
    model's, ``schedules.zone_error``), and
    ``--start``/``--end`` with ``--at`` (a single instant has no window), and, on ``add``,
    an ``--at`` already past unless ``--allow-past`` (``validation.past_run_at_error``, the
    rule the model, the admin and the API apply too, here ending with ``PAST_AT_HINT``).
    """
    errors: dict[str, str] = {}
    fields: dict[str, Any] = {}
    options = _with_calendar_file(options, errors)
    for option, field in (("every", "interval"), ("cron", "cron"), ("rrule", "rrule")):
        if options.get(option) is None:
            continue
        if not options[option].strip():
            errors[field] = f"must not be empty; give {_TIMING_EXAMPLES[option]}"
        else:
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
        errors["end"] = f"{readable.typed(end)} has already passed; it must be in the future"
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


#: The largest calendar file ``--rrule @FILE`` reads.
MAX_CALENDAR_FILE = 1024 * 1024


def read_calendar_file(path: str) -> IcsEvent:
    """The one VEVENT of the iCalendar file at ``path`` (``timing.ics.read_ics``);
    CalendarError naming the file otherwise."""
    try:
        with open(path, "rb") as handle:
            content = handle.read(MAX_CALENDAR_FILE + 1)
    except OSError as exc:
        raise CalendarError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(content) > MAX_CALENDAR_FILE:
        raise CalendarError(f"{path}: is larger than {MAX_CALENDAR_FILE:,} bytes")
    try:
        return read_ics(content.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise CalendarError(f"{path}: is not UTF-8 text") from None
    except CalendarError as exc:
        raise CalendarError(f"{path}: {exc}") from None


def _with_calendar_file(options: dict[str, Any], errors: dict[str, str]) -> dict[str, Any]:
    """``options`` with ``--rrule @FILE`` replaced by the file's recurrence lines.

    The event's ``DTSTART`` zone is ``--tz`` when none is given (and must agree with one that
    is: the rule's time of day comes from it), and its instant is ``--start`` when none is
    given, so ``INTERVAL`` and ``COUNT`` count from it as RFC 5545 does.
    """
    raw = options.get("rrule")
    if not isinstance(raw, str) or not raw.startswith("@"):
        return options
    try:
        event = read_calendar_file(raw[1:])
    except CalendarError as exc:
        errors["rrule"] = str(exc)
        return {**options, "rrule": None}
    found = {**options, "rrule": event.text}
    tz = options.get("tz")
    if event.zone is not None and tz is None:
        found["tz"] = event.zone
    elif event.zone is not None and tz is not None and tz.strip() != event.zone:
        errors["timezone"] = (
            f"--tz {tz} differs from {raw[1:]}'s DTSTART zone {event.zone}; leave --tz out, "
            "or give the event's zone"
        )
    if event.start is not None and options.get("start") is None:
        found["start"] = event.start.isoformat()
    return found


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


# -- the options of a job: what ``jobs add`` reads, and what the declarations in code
#    (``SCHEDULING_JOBS``, ``beat_schedule``) are read as, so both refuse alike.


#: A job's fields whose option has another name, for one-line refusals (``first_error``).
JOB_OPTION_NAMES = {
    "interval": "--every",
    "timezone": "--tz",
    "run_at": "--at",
    "starts_at": "--start",
    "ends_at": "--end",
    "max_retries": "--max-retries",
    "max_running": "--max-running",
    "pause_after_failures": "--pause-after-failures",
    "task_table": "--task-table",
    "task_row_id": "--task-row-id",
    "rrule": "--rrule",
}


def add_job_options(parser: argparse.ArgumentParser, *, editing: bool) -> None:
    """The options of ``jobs add``; for ``edit`` none has a default, so only given ones
    change. ``job_options_parser`` reads the declarations in code with them too."""

    def default(value: Any) -> Any:
        return None if editing else value

    parser.add_argument(
        "--task",
        default=default(""),
        help="Schedulable Celery task (dotted name); not needed with --task-table.",
    )
    parser.add_argument(
        "--args", dest="task_args", default=default("[]"), help="JSON list of arguments."
    )
    parser.add_argument(
        "--kwargs", dest="task_kwargs", default=default("{}"), help="JSON object of keywords."
    )
    add_timing_options(parser, editing=editing)
    parser.add_argument(
        "--max-retries", type=whole_number(0, INT_MAX), help="Retries after the first try (3)."
    )
    parser.add_argument(
        "--max-running",
        type=whole_number(0, INT_MAX),
        help="Most of its executions running at once across all workers; more wait in the "
        "ledger (0: no limit, the default).",
    )
    parser.add_argument(
        "--pause-after-failures",
        type=whole_number(0, INT_MAX),
        metavar="N",
        help="Pause the job after N failed occurrences in a row (an execution failed after "
        "its retries, timed out or lost for good); a success or a resume starts the count "
        "again (0: never, the default).",
    )
    parser.add_argument(
        "--timeout", type=whole_number(1, INT_MAX), help="Seconds per attempt (300)."
    )
    parser.add_argument(
        "--jitter", default=default("0"), help="Spread in seconds, up to 86400 (0)."
    )
    parser.add_argument(
        "--misfire", choices=[m.value for m in Misfire], default=default("catch_up")
    )
    parser.add_argument("--overlap", choices=Overlap.values, default=default(Overlap.FORBID))
    parser.add_argument("--queue", default=default("celery"), help="Celery queue (celery).")
    parser.add_argument(
        "--priority",
        type=whole_number(0, MAX_PRIORITY),
        help=f"Message priority 0-{MAX_PRIORITY}.",
    )
    parser.add_argument(
        "--expires",
        type=whole_number(0, INT_MAX),
        help="Skip an occurrence that would start more than this many seconds late.",
    )
    parser.add_argument("--note", default=default(""), help="Free text, up to 500 characters.")
    parser.add_argument(
        "--task-table", default=default(""), help="app_label.Model of a task table row."
    )
    parser.add_argument(
        "--task-row-id",
        type=whole_number(1, BIGINT_MAX),
        help="Primary key of the task table row.",
    )


def parse_job_options(o: dict[str, Any], *, now: datetime) -> dict[str, Any]:
    """The JSON, instants and numbers of ``add``/``edit``, checked; one error per field.

    Options that were not given stay ``None``. The timing options are read by
    ``parse_timing_options`` (``timing``: the schedule fields given), the
    one reader the domain apps' commands use too, so they refuse alike.
    """
    errors: dict[str, str] = {}
    parsed: dict[str, Any] = {}
    try:
        parsed["timing"] = parse_timing_options(o, now=now, editing=o["action"] == "edit")
    except ValidationError as exc:
        errors.update({k: " ".join(v) for k, v in exc.message_dict.items()})
    for field, expect in (("args", list), ("kwargs", dict)):
        raw = o[f"task_{field}"]
        try:
            parsed[field] = (
                None if raw is None else parse_json_argument(raw, field=field, expect=expect)
            )
        except ValidationError as exc:
            errors.update({k: " ".join(v) for k, v in exc.message_dict.items()})
    if o["jitter"] is not None:
        try:
            parsed["jitter"] = parse_seconds(o["jitter"], field="jitter", maximum=MAX_JITTER)
        except ValidationError as exc:
            errors.update({k: " ".join(v) for k, v in exc.message_dict.items()})
    else:
        parsed["jitter"] = None
    if errors:
        raise ValidationError(errors)
    return parsed


def job_options_parser() -> OneLineParser:
    """A parser of ``jobs add``'s job options (``--owner`` and ``add_job_options``) that
    raises ``CommandError`` with one line naming the option instead of exiting."""
    parser = OneLineParser(prog="jobs add", add_help=False, called_from_command_line=False)
    parser.add_argument("--owner")
    add_job_options(parser, editing=False)
    return parser
