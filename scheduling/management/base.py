"""What every Duecourse command shares: ``--json`` output and one-line, field-named errors."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.schedules import ScheduleError, require_aware
from scheduling.validation import first_error


class DuecourseCommand(BaseCommand):
    #: Model fields whose command-line option has another name, for error messages.
    option_names: dict[str, str] = {}

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


def parse_instant(raw: str | None, *, field: str) -> datetime | None:
    """An ISO-8601 instant with an offset (``2030-01-01T09:00Z``); naive input is refused."""
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise ValidationError(
            {field: f"{raw!r} is not an ISO-8601 date-time such as 2030-01-01T09:00:00Z"}
        ) from None
    try:
        return require_aware(value, field=field)
    except ScheduleError as exc:
        raise ValidationError({field: exc.reason}) from None
