"""``manage.py jobs add|list|show|pause|resume|run|remove``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandParser
from django.utils import timezone

from scheduling import api, jobs, pgtimes, selectors
from scheduling.management.base import DuecourseCommand, parse_instant
from scheduling.models import Execution, ExecutionStatus, Job, Overlap
from scheduling.schedules import Misfire
from scheduling.validation import parse_json_argument


class Command(DuecourseCommand):
    help = "Create, inspect and control scheduled jobs."
    option_names = {
        "interval": "--every",
        "timezone": "--tz",
        "run_at": "--at",
        "starts_at": "--start",
        "ends_at": "--end",
    }

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        add = sub.add_parser("add", help="Create a job.")
        super().add_arguments(add)
        add.add_argument("name", help="Job name, unique per owner.")
        add.add_argument(
            "--task",
            default="",
            help="Schedulable Celery task (dotted name); not needed with --task-table.",
        )
        add.add_argument(
            "--args", dest="task_args", default="[]", help="JSON list of positional arguments."
        )
        add.add_argument(
            "--kwargs", dest="task_kwargs", default="{}", help="JSON object of keyword arguments."
        )
        when = add.add_mutually_exclusive_group(required=True)
        when.add_argument("--every", help="ISO-8601 interval, such as PT10S or PT3H.")
        when.add_argument("--cron", help='Five-field cron expression, such as "0 9 * * 1-5".')
        when.add_argument("--at", help="One instant with an offset, such as 2030-01-01T09:00Z.")
        add.add_argument("--tz", default="UTC", help="IANA time zone of --cron (default UTC).")
        add.add_argument("--start", help="No occurrence before this instant.")
        add.add_argument("--end", help="No occurrence after this instant; then completed.")
        add.add_argument("--max-retries", type=int, help="Retries after the first try (3).")
        add.add_argument("--timeout", type=int, help="Seconds per attempt (300).")
        add.add_argument("--jitter", type=float, default=0.0, help="Spread in seconds (0).")
        add.add_argument("--misfire", choices=[m.value for m in Misfire], default="catch_up")
        add.add_argument("--overlap", choices=Overlap.values, default=Overlap.FORBID)
        add.add_argument("--owner", help="Owning username (default: first superuser).")
        add.add_argument("--queue", default="celery", help="Celery queue (celery).")
        add.add_argument("--priority", type=int, help="Message priority 0-255.")
        add.add_argument(
            "--expires",
            type=int,
            help="Skip an occurrence that would start more than this many seconds late.",
        )
        add.add_argument("--note", default="", help="Free text, up to 500 characters.")
        add.add_argument("--task-table", default="", help="app_label.Model of a task table row.")
        add.add_argument("--task-row-id", type=int, help="Primary key of the task table row.")

        listing = sub.add_parser("list", help="List jobs.")
        super().add_arguments(listing)
        for action, text in (
            ("show", "Show one job and its recent executions."),
            ("pause", "Stop a job from firing."),
            ("resume", "Let a paused job fire again (its misfire policy decides)."),
            ("run", "Run one occurrence now, besides the schedule."),
            ("remove", "Delete a job and its history."),
        ):
            command = sub.add_parser(action, help=text)
            super().add_arguments(command)
            command.add_argument("name")
            command.add_argument("--owner", help="Owner's username, when names collide.")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        getattr(self, f"do_{action}")(options)

    def do_add(self, o: dict[str, Any]) -> None:
        now = timezone.now()
        errors: dict[str, str] = {}
        parsed: dict[str, Any] = {}
        for field, expect in (("args", list), ("kwargs", dict)):
            try:
                parsed[field] = parse_json_argument(o[f"task_{field}"], field=field, expect=expect)
            except ValidationError as exc:
                errors.update({k: " ".join(v) for k, v in exc.message_dict.items()})
        for field in ("at", "start", "end"):
            try:
                parsed[field] = parse_instant(o[field], field=field)
            except ValidationError as exc:
                errors.update({k: " ".join(v) for k, v in exc.message_dict.items()})
        for field in ("max_retries", "timeout", "expires"):
            if o[field] is not None and o[field] < 0:
                errors[field] = "must be zero or more"
        if o["jitter"] < 0:
            errors["jitter"] = "must be zero or more"
        if errors:
            raise ValidationError(errors)
        job = jobs.create_job(
            owner=jobs.owner_for(o["owner"]),
            name=o["name"],
            task=o["task"],
            args=parsed["args"],
            kwargs=parsed["kwargs"],
            every=o["every"] or "",
            cron=o["cron"] or "",
            tz=o["tz"],
            at=parsed["at"],
            start=parsed["start"],
            end=parsed["end"],
            task_table=o["task_table"],
            task_row_id=o["task_row_id"],
            max_retries=o["max_retries"],
            timeout=o["timeout"],
            jitter=timedelta(seconds=o["jitter"]),
            misfire=o["misfire"],
            overlap=o["overlap"],
            queue=o["queue"],
            priority=o["priority"],
            expires=o["expires"],
            note=o["note"],
            now=now,
        )
        job = selectors.find_job(job.name, owner=job.owner.get_username())
        self.emit(
            selectors.job_summary(job),
            f"created job {job.name!r} ({job.schedule.describe()}), next due {job.next_due_at}",
            as_json=o["json"],
        )

    def do_list(self, o: dict[str, Any]) -> None:
        jobs = list(selectors.list_jobs())
        rows = [selectors.job_summary(job) for job in jobs]
        lines = [f"{'NAME':30} {'STATUS':10} {'SCHEDULE':32} {'NEXT DUE':26} RUNS"]
        for job in jobs:
            due = pgtimes.describe(job.next_due_at, timespec="seconds") or "-"
            lines.append(
                f"{job.name[:30]:30} {job.status:10} {job.schedule.describe()[:32]:32} "
                f"{due:26} {job.execute_count}"
            )
        self.emit(rows, "\n".join(lines), as_json=o["json"])

    def _job(self, o: dict[str, Any]) -> Job:
        return selectors.find_job(o["name"], owner=o.get("owner"))

    def do_show(self, o: dict[str, Any]) -> None:
        job = self._job(o)
        data = selectors.job_summary(job)
        data["recent_executions"] = [
            selectors.execution_summary(e) for e in selectors.list_executions(job=job, limit=10)
        ]
        text = "\n".join(
            f"{key}: {value}" for key, value in data.items() if key != "recent_executions"
        )
        text += "\nrecent executions:\n" + "\n".join(
            f"  {e['scheduled_for']} {e['status']:9} retries={e['retry_count']} "
            f"{(e['last_error'] or '').splitlines()[0] if e['last_error'] else ''}"
            for e in data["recent_executions"]
        )
        self.emit(data, text, as_json=o["json"])

    def do_pause(self, o: dict[str, Any]) -> None:
        job = self._job(o)
        changed = jobs.pause_job(job=job, now=timezone.now())
        job.refresh_from_db()
        self.emit(
            selectors.job_summary(job),
            f"paused {job.name!r}" if changed else f"{job.name!r} is {job.status}; unchanged",
            as_json=o["json"],
        )

    def do_resume(self, o: dict[str, Any]) -> None:
        job = self._job(o)
        changed = jobs.resume_job(job=job, now=timezone.now())
        job.refresh_from_db()
        self.emit(
            selectors.job_summary(job),
            f"resumed {job.name!r}, next due {job.next_due_at}"
            if changed
            else f"{job.name!r} is {job.status}; unchanged",
            as_json=o["json"],
        )

    def do_run(self, o: dict[str, Any]) -> None:
        job = self._job(o)
        execution = Execution.objects.select_related("job").get(pk=api.run_now(job.pk))
        state = "published" if execution.status == ExecutionStatus.QUEUED else "saved"
        self.emit(
            selectors.execution_summary(execution),
            f"{state} one occurrence of {job.name!r} now (execution {execution.pk})",
            as_json=o["json"],
        )

    def do_remove(self, o: dict[str, Any]) -> None:
        job = self._job(o)
        data = selectors.job_summary(job)
        jobs.remove_job(job=job)
        self.emit(data, f"removed {data['name']!r}", as_json=o["json"])
