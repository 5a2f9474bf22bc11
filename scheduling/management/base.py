"""What every Duecourse command shares: ``--json`` output and one-line, field-named errors.

Errors that argparse finds (an option without its value, two options that exclude each other)
are one line too, naming the option, instead of argparse's usage dump; ``--help`` is unchanged.
The parser and the refusal line live in ``scheduling.commandline.options``, which the domain
apps' commands reach through ``scheduling.api``.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from scheduling.commandline.options import (
    OneLineCommand,
    positive_int,
    seconds,
    setting_option,
    whole_number,
)
from scheduling.timing.schedules import ScheduleError
from scheduling.timing.values import parse_instant as parse_instant  # the commands' one parser

__all__ = [
    "DuecourseCommand",
    "parse_instant",
    "positive_int",
    "seconds",
    "setting_option",
    "whole_number",
]


class DuecourseCommand(OneLineCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json", action="store_true", help="Print the result as one JSON value on stdout."
        )

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except ScheduleError as exc:
            raise CommandError(str(exc)) from None

    def emit(self, data: Any, text: str, *, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(data, default=str, indent=None))
        else:
            self.stdout.write(text)


