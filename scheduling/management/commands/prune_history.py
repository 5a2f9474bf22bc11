"""``manage.py prune_history --older-than DURATION [--keep-last N]``: trim the history, and
the audit trail of jobs by its own setting (``SCHEDULING_AUDIT_RETENTION``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.utils import timezone

from scheduling.management.base import DuecourseCommand, seconds, whole_number
from scheduling.stages import retention
from scheduling.timing import readable

#: The longest ``--max-seconds``: a week.
MAX_SECONDS = 7 * 86_400


class Command(DuecourseCommand):
    help = (
        "Delete finished executions older than a duration, in small batches (on PostgreSQL, "
        "whole periods of the partitioned history first), keeping the latest N of every job; "
        "finished internal one-off jobs (due batches) go whole. Also "
        "deletes the changes of the jobs' audit trail older than SCHEDULING_AUDIT_RETENTION "
        "(365 days by default; None keeps them forever), which --older-than does not touch."
    )
    option_names = {"older_than": "--older-than", "keep_last": "--keep-last"}

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--older-than",
            required=True,
            metavar="DURATION",
            help="Age past which finished executions go: 30d, 12h, 2w or ISO-8601 (P30D).",
        )
        parser.add_argument(
            "--keep-last",
            type=whole_number(0, retention.MAX_KEEP_LAST),
            default=10,
            metavar="N",
            help="Always keep each job's latest N executions, however old (10).",
        )
        parser.add_argument(
            "--batch-size",
            type=whole_number(1, retention.MAX_BATCH),
            default=1000,
            help="Executions per transaction (1000).",
        )
        parser.add_argument(
            "--max-seconds",
            type=seconds(0.1, MAX_SECONDS),
            help="Stop starting batches after this many seconds (at most a week).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would go; delete nothing."
        )
        parser.add_argument(
            "--partitions-only",
            action="store_true",
            help="On PostgreSQL's partitioned history, only drop whole periods that end before "
            "the cutoff; the rows of the period it falls in wait until that period has passed.",
        )

    def handle(self, *args: Any, **o: Any) -> None:
        report = retention.prune_history(
            older_than=retention.parse_age(o["older_than"]),
            keep_last=o["keep_last"],
            now=timezone.now(),
            batch_size=o["batch_size"],
            max_seconds=o["max_seconds"],
            dry_run=o["dry_run"],
            partitions_only=o["partitions_only"],
        )
        data = report.as_dict(retention.job_names(list(report.by_job)))
        verb = "would remove" if o["dry_run"] else "removed"
        lines = [
            f"{verb} {report.executions} execution(s) and {report.attempts} attempt(s) due "
            f"before {readable.instant(report.cutoff)} in {report.batches} batch(es)"
            + (f" and {report.periods} whole period(s)" if report.periods else "")
            + ", "
            f"keeping the latest {report.keep_last} of every job; "
            f"{report.one_offs} finished internal one-off job(s) went whole"
            + ("" if report.finished else "; stopped at --max-seconds, run again to go on")
            + ("" if o["dry_run"] else f"; took {report.seconds:.2f} s")
        ]
        if report.audit_retention is None:
            lines.append("audit trail kept forever (SCHEDULING_AUDIT_RETENTION is None)")
        else:
            lines.append(
                f"{verb} {report.audit_changes} audit change(s) older than "
                f"{report.audit_retention.days} day(s) (SCHEDULING_AUDIT_RETENTION)"
            )
        lines += [f"  {name}: {count}" for name, count in data["jobs"].items()]  # type: ignore[attr-defined]
        self.emit(data, "\n".join(lines), as_json=o["json"])
