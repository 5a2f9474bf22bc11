"""``manage.py import_beat [--dry-run] [--disable-source]``: django-celery-beat → jobs."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.core.management.base import CommandParser
from django.utils import timezone

from scheduling.commandline.options import add_by_option
from scheduling.management import beat_import
from scheduling.management.base import DuecourseCommand
from scheduling.stages import audit, jobs


class Command(DuecourseCommand):
    help = (
        "Import django-celery-beat's PeriodicTask rows as equivalent jobs (idempotent: a "
        "second run changes only rows that changed), reporting each row that cannot be mapped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--dry-run", action="store_true", help="Report what would change; write nothing."
        )
        parser.add_argument(
            "--disable-source",
            action="store_true",
            help="Disable each imported PeriodicTask, so beat and Duecourse never both fire it.",
        )
        parser.add_argument(
            "--owner", help="Username owning the imported jobs (default: the first superuser)."
        )
        add_by_option(parser)

    def handle(self, *args: Any, **o: Any) -> None:
        results = beat_import.import_beat(
            owner=jobs.owner_for(o["owner"], create=not o["dry_run"]),
            now=timezone.now(),
            dry_run=o["dry_run"],
            disable_source=o["disable_source"] and not o["dry_run"],
            by=audit.Actor.command_line(o["by"]),
        )
        counts = Counter(r.action for r in results)
        prefix = "would be " if o["dry_run"] else ""
        lines = []
        for r in results:
            line = f"{prefix}{r.action:9} {r.name}: {r.detail}"
            if r.changed:
                line += f" (changed: {', '.join(r.changed)})"
            if r.source_disabled:
                line += " [PeriodicTask disabled]"
            lines.append(line)
            lines += [f"          warning: {w}" for w in r.warnings]
        summary = ", ".join(
            f"{counts[a]} {a}" for a in ("created", "updated", "unchanged", "skipped")
        )
        lines.append(
            f"{len(results)} PeriodicTask row(s): {summary}"
            + (" (dry run)" if o["dry_run"] else "")
        )
        self.emit(
            {"dry_run": o["dry_run"], "rows": [r.as_dict() for r in results], "counts": counts},
            "\n".join(lines),
            as_json=o["json"],
        )
