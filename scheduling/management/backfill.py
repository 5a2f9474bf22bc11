"""``manage.py jobs backfill NAME --from INSTANT --to INSTANT [--dry-run] [--json]``.

The verb is ``scheduling.api.backfill``; this module reads its options and says the outcome.
The instants are read by the commands' one parser (``parse_instant``, as ``--at`` is): an
ISO-8601 instant with an offset, naive input refused naming the option. Every refusal is one
line naming the option: ``--from``, ``--to``, or ``--from/--to`` for a range over
``SCHEDULING_BACKFILL_MAX``. A job of an internal task table is refused, as making one by
hand is (``jobs add``): only its app's code makes that table's occurrences.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from scheduling import api
from scheduling.management.base import parse_instant
from scheduling.models import Job
from scheduling.rules import permissions
from scheduling.timing import readable

BackfillResult = api.BackfillResult

#: The options that set each field of the verb, for its refusals.
OPTIONS = {"start": "--from", "end": "--to", "range": "--from/--to"}


def add_options(parser: CommandParser) -> None:
    """``backfill``'s own options (``--json`` comes with every command)."""
    parser.add_argument("name", help="The job to backfill.")
    parser.add_argument("--owner", help="Owner's username, when names collide.")
    parser.add_argument(
        "--from",
        dest="start",
        required=True,
        metavar="INSTANT",
        help="First instant of the range, included, with an offset (2030-01-01T00:00Z).",
    )
    parser.add_argument(
        "--to",
        dest="end",
        required=True,
        metavar="INSTANT",
        help="End of the range, excluded; not later than now (the scheduler owns the future).",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="Say what would be made; write nothing."
    )


def refusal(exc: ValidationError) -> CommandError:
    """The verb's refusal as one line, each field named by the option that set it."""
    parts = []
    for field, errors in exc.message_dict.items():
        name = OPTIONS.get(field, "input" if field == "__all__" else field)
        parts.append(f"{name}: {' '.join(errors)}")
    return CommandError("; ".join(parts))


def run(job: Job, options: dict[str, Any], *, by: Any = None) -> tuple[BackfillResult, str]:
    """Backfill ``job`` as the options say, by ``by`` (``api.command_line_actor``); the
    result and its text."""
    internal = permissions.internal_refusal(job.task_table) if job.task_table else None
    if internal is not None:
        raise CommandError(f"name: {internal}")
    try:
        start = parse_instant(options["start"], field="start")
        end = parse_instant(options["end"], field="end")
        result = api.backfill(
            job.pk, start=start, end=end, now=timezone.now(), dry_run=options["dry_run"], by=by
        )
    except ValidationError as exc:
        raise refusal(exc) from None
    return result, describe(result)


def describe(result: BackfillResult) -> str:
    """The outcome in words: the count, what was already there, and (dry run) each instant."""
    noun = "occurrence" if result.count == 1 else "occurrences"
    if result.dry_run:
        lines = [f"would backfill {result.count} {noun} for {result.job}"]
    else:
        lines = [f"{result.count} {noun} backfilled for {result.job}"]
    notes = []
    if result.held:
        notes.append(f"{result.held} already in the ledger")
    if result.not_due:
        notes.append(f"{result.not_due} not yet due, left to the scheduler")
    if notes:
        lines[0] += f" ({'; '.join(notes)})"
    if result.dry_run:
        lines.extend(f"  {readable.instant(at)}" for at in result.instants)
    return "\n".join(lines)
