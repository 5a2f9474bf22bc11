"""``manage.py executions [--job NAME] [--owner USER] [--status S] [--since I] [--until I]
[--limit N] [--json | --jsonl]``: the history, newest first, or exported whole, oldest first."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser

from scheduling.commandline.exports import (
    add_jsonl_option,
    add_window_options,
    read_window,
    write_jsonl,
)
from scheduling.commandline.options import add_zone_option, iso_instant, zone_option
from scheduling.management.base import DuecourseCommand, whole_number
from scheduling.messages import errors
from scheduling.stages import selectors
from scheduling.timing import readable

#: Rows the table and ``--json`` list when ``--limit`` is not given.
DEFAULT_LIMIT = 50


class Command(DuecourseCommand):
    help = "List executions, newest first; or export them, oldest first (--jsonl)."
    option_names = {"timezone": "--tz", "since": "--since", "until": "--until"}

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--job", help="Only this job's executions.")
        parser.add_argument(
            "--owner", help="Only this user's jobs; with --job, whose job it is (names collide)."
        )
        parser.add_argument("--status", help="Only executions in this status.")
        parser.add_argument(
            "--limit",
            type=whole_number(1, selectors.MAX_LISTED),
            help=f"At most N rows (50; at most {selectors.MAX_LISTED:,}); with --jsonl, "
            "the first N of the export, and no cap when not given.",
        )
        parser.add_argument(
            "--attempts", action="store_true", help="Include every attempt (not with --jsonl)."
        )
        add_window_options(parser, of="due time")
        add_jsonl_option(parser)
        add_zone_option(parser)

    def handle(self, *args: Any, **o: Any) -> None:
        if o["jsonl"] and (o["json"] or o["attempts"]):
            other = "--json" if o["json"] else "--attempts"
            raise CommandError(f"--jsonl: not allowed with {other}")
        zone = zone_option(o["tz"])
        window = read_window(o["since"], o["until"], zone=zone)
        job = selectors.find_job(o["job"], owner=o["owner"]) if o["job"] else None
        if o["jsonl"]:
            pages = selectors.export_executions(
                job=job, owner=o["owner"], status=o["status"], window=window, limit=o["limit"]
            )
            write_jsonl(lambda text: self.stdout.write(text, ending=""), pages)
            return
        rows = list(
            selectors.list_executions(
                job=job,
                owner=o["owner"],
                status=o["status"],
                limit=o["limit"] or DEFAULT_LIMIT,
                window=window,
            )
        )
        titles = selectors.run_titles(rows)
        data = [
            selectors.execution_summary(e, attempts=o["attempts"], title=titles[e.pk]) for e in rows
        ]
        # Each run is named for what it runs, whole: the column is as wide as its longest.
        width = max((len(e["title"]) for e in data), default=0)
        lines = []
        for e in data:
            # The error's type and message, whole: its end (the name that was missing) is the
            # news; never a frame of its traceback (``--json`` has the whole error).
            error = errors.headline(e["last_error"])
            due = _moment(e["scheduled_for"])
            lines.append(
                f"{iso_instant(e['scheduled_for'], zone)} {e['title']:{width}} {e['status']:9} "
                f"retries={e['retry_count']} worker={e['worker'] or '-'} "
                f"started={_after(e['started_at'], due)} "
                f"finished={_after(e['finished_at'], due)} "
                f"heartbeat={_after(e['last_heartbeat_at'], due)} task_id={e['task_id']}"
                f"{f' failed_items={n}' if (n := e['item_failures']) else ''} {error}".rstrip()
            )
            lines.extend(_attempt_line(a, due) for a in e.get("attempts", ()))
        self.emit(data, "\n".join(lines) or "no executions", as_json=o["json"])


def _moment(text: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:  # a time past the calendar's ends ("infinity"): no lag to say
        return None


def _after(text: str | None, due: datetime | None) -> str:
    moment = _moment(text)
    return readable.lag(moment - due) if moment and due else "-"


def _attempt_line(attempt: dict[str, Any], due: datetime | None) -> str:
    """One attempt under its execution: its outcome, where it ran, when, and its error."""
    error = errors.headline(attempt["error"])
    return (
        f"  attempt {attempt['number']} {attempt['outcome']:9} worker={attempt['worker'] or '-'} "
        f"pid={attempt['pid'] or '-'} started={_after(attempt['started_at'], due)} "
        f"finished={_after(attempt['finished_at'], due)} {error}"
    ).rstrip()
