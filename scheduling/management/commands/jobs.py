"""``manage.py jobs add|edit|list|show|next|history|pause|resume|run|remove|backfill|sync``.

Every change is recorded in the audit trail with ``command`` as the source and, as who, the
operating-system account of the process (its real uid: ``LOGNAME`` and ``USER`` are not
asked); ``--by USERNAME`` on each action that changes something names the Django user it is
made for, recorded first: ``alice (os: root)`` (``audit.Actor.command_line``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from scheduling import api, checks
from scheduling.commandline.options import (
    JOB_OPTION_NAMES,
    PAST_AT_HINT,
    add_by_option,
    add_job_options,
    add_zone_option,
    iso_instant,
    parse_job_options,
    shown_value,
    text_table,
    zone_option,
)
from scheduling.management import backfill
from scheduling.management.base import DuecourseCommand, whole_number
from scheduling.messages import errors
from scheduling.models import Execution, ExecutionStatus, Job, JobStatus, Schedule
from scheduling.rules import permissions
from scheduling.rules.validation import (
    storable,
)
from scheduling.stages import (
    audit,
    controls,
    edits,
    jobs,
    pauses,
    previews,
    reconciliation,
    removals,
    selectors,
)
from scheduling.timing import readable
from scheduling.timing.previews import DEFAULT_COUNT, MAX_COUNT


class Command(DuecourseCommand):
    help = "Create, inspect and control scheduled jobs."
    option_names = {**JOB_OPTION_NAMES, "count": "--count"}

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        add = sub.add_parser("add", help="Create a job.")
        super().add_arguments(add)
        add.add_argument("name", help="Job name, unique per owner.")
        add.add_argument("--owner", help="Owning username (default: first superuser).")
        add_by_option(add)
        self.add_job_options(add, editing=False)

        edit = sub.add_parser(
            "edit", help="Change a job in place (only the options given); its history stays."
        )
        super().add_arguments(edit)
        edit.add_argument("name", help="The job to change.")
        edit.add_argument("--owner", help="Owner's username, when names collide.")
        edit.add_argument("--rename", help="A new name for the job.")
        add_by_option(edit)
        self.add_job_options(edit, editing=True)

        listing = sub.add_parser("list", help="List jobs with their owners.")
        super().add_arguments(listing)
        listing.add_argument("--owner", help="Only this user's jobs.")
        add_zone_option(listing)
        history = sub.add_parser(
            "history",
            help="Show who changed a job, when, from where, and each field from and to "
            "(newest first; a removed job's trail by its name).",
        )
        super().add_arguments(history)
        history.add_argument("name")
        history.add_argument("--owner", help="Owner's username, when names collide.")
        history.add_argument(
            "--limit",
            type=whole_number(1, selectors.MAX_LISTED),
            default=100,
            help=f"Most changes shown (100; at most {selectors.MAX_LISTED:,}).",
        )
        upcoming = sub.add_parser(
            "next",
            help="List the job's next occurrences, in UTC and in its zone (a paused job's "
            "too, as if it were resumed now).",
        )
        super().add_arguments(upcoming)
        upcoming.add_argument("name")
        upcoming.add_argument("--owner", help="Owner's username, when names collide.")
        upcoming.add_argument(
            "--count",
            type=whole_number(1, MAX_COUNT),
            default=DEFAULT_COUNT,
            help=f"How many ({DEFAULT_COUNT}; at most {MAX_COUNT}).",
        )
        for action, text in (
            ("show", "Show one job and its recent executions."),
            ("pause", "Stop a job from firing."),
            ("resume", "Let a paused job fire again (its misfire policy decides)."),
            ("run", "Run one occurrence now, besides the schedule."),
            ("remove", "Delete a job and its history (not one declared in code)."),
        ):
            command = sub.add_parser(action, help=text)
            super().add_arguments(command)
            command.add_argument("name")
            command.add_argument("--owner", help="Owner's username, when names collide.")
            if action in ("show", "resume"):
                add_zone_option(command)
            if action != "show":
                add_by_option(command)
            if action == "pause":
                command.add_argument(
                    "--reason", default="", help="Why, shown with the job until it is resumed."
                )
        syncing = sub.add_parser(
            "sync",
            help="Make the ledger match the jobs declared in code (SCHEDULING_JOBS and the "
            "Celery app's beat_schedule): new entries made, changed ones changed, removed ones "
            "paused (history kept).",
        )
        super().add_arguments(syncing)
        check_or_dry = syncing.add_mutually_exclusive_group()
        check_or_dry.add_argument(
            "--dry-run", action="store_true", help="Say what would change; write nothing."
        )
        check_or_dry.add_argument(
            "--check",
            action="store_true",
            help="Write nothing; exit 1 naming each difference when the ledger differs from "
            "the code (a deploy pipeline's gate).",
        )
        syncing.add_argument(
            "--adopt",
            action="store_true",
            help="Let a declaration own a job of its name that was made by hand (refused "
            "otherwise).",
        )
        backfilling = sub.add_parser(
            "backfill",
            help="Make the past occurrences of a range that the ledger does not hold; the "
            "scheduler runs them under the job's overlap policy and limits.",
        )
        super().add_arguments(backfilling)
        backfill.add_options(backfilling)
        add_by_option(backfilling)

    @staticmethod
    def add_job_options(parser: CommandParser, *, editing: bool) -> None:
        """``scheduling.commandline.options.add_job_options``: the options of ``add`` and
        ``edit``."""
        add_job_options(parser, editing=editing)

    def execute(self, *args: Any, **options: Any) -> Any:
        self.action = options.get("action")
        return super().execute(*args, **options)

    def check(self, *args: Any, **kwargs: Any) -> None:
        """The system checks, but for ``sync`` without scheduling.E014: ``sync`` reports each
        entry the code declares wrongly itself, applies the rest and exits non-zero."""
        if getattr(self, "action", None) != "sync":
            return super().check(*args, **kwargs)
        with checks.declarations_reported_here():
            return super().check(*args, **kwargs)

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        getattr(self, f"do_{action}")(options)

    @staticmethod
    def actor(o: dict[str, Any]) -> audit.Actor:
        """Who this command's change is by: the process's account, and ``--by``'s user."""
        return audit.Actor.command_line(o.get("by"))

    @staticmethod
    def parse_values(o: dict[str, Any], *, now: datetime) -> dict[str, Any]:
        """``scheduling.commandline.options.parse_job_options``: the one reader of these options,
        which the declarations in code (``SCHEDULING_JOBS``, ``beat_schedule``) go through too."""
        return parse_job_options(o, now=now)

    @staticmethod
    def refuse_internal(task_table: str | None) -> None:
        """A job made on the command line is made by hand: never on an internal task table.

        Whoever runs ``manage.py`` holds the project's keys, so the owner's admin permissions
        are not asked; the one rule that binds even superusers is."""
        refused = permissions.internal_refusal(task_table) if task_table else None
        if refused is not None:
            raise ValidationError({"task_table": refused})

    def do_add(self, o: dict[str, Any]) -> None:
        now = timezone.now()
        parsed = self.parse_values(o, now=now)
        owner = jobs.owner_for(o["owner"])
        self.refuse_internal(o["task_table"])
        schedule = Schedule(**parsed["timing"])
        schedule.allow_past, schedule.past_hint = o["allow_past"], PAST_AT_HINT
        job = jobs.create_job(
            owner=owner,
            name=o["name"],
            schedule=schedule,
            target=jobs.Target.of_options(o, parsed),
            policies=jobs.Policies.of_options(o, parsed),
            now=now,
            by=self.actor(o),
        )
        job = selectors.find_job(job.name, owner=job.owner.get_username())
        self.emit(
            selectors.job_summary(job),
            f"created job {job.name!r} ({job.schedule.describe()}), "
            f"next due {readable.instant(job.next_due_at)}",
            as_json=o["json"],
        )

    def do_edit(self, o: dict[str, Any]) -> None:
        job = self._job(o)
        parsed = self.parse_values(o, now=timezone.now())
        changes: dict[str, Any] = {}
        for option, field in (
            ("task", "task"),
            ("task_table", "task_table"),
            ("task_row_id", "task_row_id"),
            ("rename", "name"),
            ("max_retries", "max_retries"),
            ("timeout", "timeout"),
            ("misfire", "misfire"),
            ("overlap", "overlap"),
            ("queue", "queue"),
            ("priority", "priority"),
            ("expires", "expires"),
            ("note", "note"),
        ):
            if o[option] is not None:
                changes[field] = o[option]
        for field in ("args", "kwargs"):
            if parsed[field] is not None:
                changes[field] = parsed[field]
        if parsed["jitter"] is not None:
            changes["jitter"] = parsed["jitter"]
        timing: dict[str, Any] = parsed["timing"]
        if o["max_running"] is not None:
            changes["max_running"] = o["max_running"] or None
        if o["pause_after_failures"] is not None:
            changes["pause_after_failures"] = o["pause_after_failures"] or None
        if not changes and not timing:
            raise ValidationError({"input": "nothing to change; give at least one option"})
        self.refuse_internal(changes.get("task_table"))
        job = edits.edit_job(
            job=job,
            now=timezone.now(),
            timing=timing,
            allow_past=o["allow_past"],
            past_hint=PAST_AT_HINT,
            by=self.actor(o),
            **changes,
        )
        job = selectors.find_job(job.name, owner=job.owner.get_username())
        self.emit(
            selectors.job_summary(job),
            f"changed job {job.name!r} ({job.schedule.describe()}), "
            f"next due {readable.instant(job.next_due_at)}",
            as_json=o["json"],
        )

    def do_list(self, o: dict[str, Any]) -> None:
        zone = zone_option(o["tz"])
        listed = selectors.list_jobs()
        if o["owner"]:  # a user who does not exist is an error, as for ``executions --owner``
            listed = listed.filter(owner=jobs.owner_for(o["owner"]))
        found = list(listed)
        titles = selectors.job_titles(found)
        targets = selectors.describe_targets(found)
        rows = [
            selectors.job_summary(job, title=titles[job.pk], target=targets[job.pk])
            for job in found
        ]
        table = text_table(
            ("NAME", "OWNER", "STATUS", "SCHEDULE", "NEXT DUE", "RUNS", "TARGET"),
            [
                (
                    job.name,
                    job.owner.get_username(),
                    _status(job),
                    selectors.describe_schedule(job.schedule, zone),
                    _next_due(job, zone),
                    job.execute_count,
                    titles[job.pk] if titles[job.pk] != job.name else row["target"],
                )
                for job, row in zip(found, rows, strict=True)
            ],
        )
        self.emit(rows, table, as_json=o["json"])

    def _job(self, o: dict[str, Any]) -> Job:
        """The job named on the command line; a name several owners use needs ``--owner``."""
        name, owner = o["name"], o.get("owner")
        if not owner and storable(name):  # a name no row can hold is not found, below
            owners = sorted(Job.objects.filter(name=name).values_list("owner__username", flat=True))
            if len(owners) > 1:
                raise ValidationError(
                    {
                        "name": f"{', '.join(owners)} each have a job named {name!r}; "
                        "pass --owner USERNAME to say whose"
                    }
                )
        return selectors.find_job(name, owner=owner)

    def do_show(self, o: dict[str, Any]) -> None:
        zone = zone_option(o["tz"])
        job = self._job(o)
        data = selectors.job_summary(job)
        executions = list(selectors.list_executions(job=job, limit=10))
        titles = selectors.run_titles(executions)
        data["recent_executions"] = [
            selectors.execution_summary(e, title=titles[e.pk]) for e in executions
        ]
        text = "\n".join(
            f"{key}: {_line(job, key, value, zone)}"
            for key, value in data.items()
            if key not in ("recent_executions", "declared_task")
        )
        text += "\npause after failures: " + (
            f"{job.pause_after_failures} in a row ({job.consecutive_failures} so far)"
            if job.pause_after_failures
            else f"never ({job.consecutive_failures} failed in a row)"
        )
        text += "\nrecent executions:\n" + "\n".join(
            f"  {iso_instant(e['scheduled_for'], zone)} {e['status']} "
            f"retries={e['retry_count']}"
            f"{' ' + errors.headline(e['last_error']) if e['last_error'] else ''}"
            for e in data["recent_executions"]
        )
        self.emit(data, text, as_json=o["json"])

    def do_history(self, o: dict[str, Any]) -> None:
        """The job's audit trail, newest first; a removed job's by the name it had."""
        name = o["name"]
        exists = storable(name) and Job.objects.filter(name=name).exists()
        if exists:
            job = self._job(o)
            changes = audit.trail(job_id=job.pk, limit=o["limit"])
        else:
            changes = audit.trail(job_name=name, limit=o["limit"]) if storable(name) else []
            if not changes:
                raise ValidationError({"name": f"no job named {name!r}, now or removed"})
        text = "\n".join(audit.lines(changes)) or f"no changes recorded for {name!r}"
        self.emit([audit.as_dict(c) for c in changes], text, as_json=o["json"])

    def do_next(self, o: dict[str, Any]) -> None:
        count = o["count"]  # 1 to MAX_COUNT, as its option's type reads it
        job = self._job(o)
        found = previews.job_preview(job, count=count, now=timezone.now())
        moments = [moment.isoformat() for moment in found.occurrences]
        notes = []
        if job.status != JobStatus.ACTIVE:
            notes.append(
                f"{job.name!r} is {job.status}: these are its timing's occurrences; it runs "
                "them only if it is resumed"
            )
        if found.ended:
            notes.append(f"the schedule ends: only {len(moments)} of {count} occurrences remain")
        if found.error is not None:
            notes.append(f"the list stops early: {found.error}")
        if found.note:
            notes.append(found.note)
        if o["json"]:
            self.emit(moments, "", as_json=True)
            for note in notes:
                self.stderr.write(note)
            return
        zone = str(found.zone)
        in_utc = zone in ("UTC", "Etc/UTC")
        lines = [
            f"next occurrences of {job.name!r}: {selectors.describe_schedule(job.schedule)}",
            "  UTC" if in_utc else f"  {'UTC':24} {zone}",
        ]
        for moment in found.occurrences:
            utc = readable.instant(moment, UTC)
            if in_utc:
                lines.append(f"  {utc}")
                continue
            local = f"{moment:%Y-%m-%d %H:%M:%S %z} {moment.tzname() or ''}".rstrip()
            lines.append(f"  {utc:24} {local}")
        if job.jitter:
            lines.append(f"each runs up to {job.jitter.total_seconds():g} s later (jitter)")
        lines.extend(notes)
        self.emit(moments, "\n".join(lines), as_json=False)

    def do_pause(self, o: dict[str, Any]) -> None:
        job = self._job(o)
        changed = controls.pause_job(
            job=job, now=timezone.now(), reason=o["reason"], by=self.actor(o)
        )
        job = self._job(o)  # read afresh, who paused it included
        self.emit(
            selectors.job_summary(job),
            f"paused {job.name!r}" if changed else f"{job.name!r} is {job.status}; unchanged",
            as_json=o["json"],
        )

    def do_resume(self, o: dict[str, Any]) -> None:
        zone = zone_option(o["tz"])
        job = self._job(o)
        changed = controls.resume_job(job=job, now=timezone.now(), by=self.actor(o))
        job = self._job(o)
        self.emit(
            selectors.job_summary(job),
            f"resumed {job.name!r}, next due {readable.instant(job.next_due_at, zone)}"
            if changed
            else f"{job.name!r} is {job.status}; unchanged",
            as_json=o["json"],
        )

    def do_run(self, o: dict[str, Any]) -> None:
        job = self._job(o)
        execution_id = api.run_now(job.pk, by=self.actor(o))
        execution = Execution.objects.select_related("job").get(pk=execution_id)
        state = "published" if execution.status == ExecutionStatus.QUEUED else "saved"
        self.emit(
            selectors.execution_summary(execution),
            f"{state} one occurrence of {job.name!r} now (execution {execution.pk})",
            as_json=o["json"],
        )

    def do_remove(self, o: dict[str, Any]) -> None:
        job = self._job(o)
        data = selectors.job_summary(job)
        removals.remove_job(job=job, now=timezone.now(), by=self.actor(o))
        self.emit(data, f"removed {data['name']!r}", as_json=o["json"])

    def do_sync(self, o: dict[str, Any]) -> None:
        """``reconciliation.reconcile``: applied, or only compared (``--dry-run``, ``--check``).

        A refused entry (one the engine cannot express) ends the command with status 1 after
        the rest is applied; ``--check`` ends so on any difference; a conflict with a job made
        by hand refuses everything, in one line, unless ``--adopt``.
        """
        apply = not (o["dry_run"] or o["check"])
        report = reconciliation.reconcile(
            now=timezone.now(),
            apply=apply,
            adopt=o["adopt"],
            by=reconciliation.code_actor(),
        )
        drift = report.drift
        lines = [
            c.line if apply or c.action in ("refused", "conflict") else f"would be {c.line}"
            for c in drift
        ]
        unchanged = len(report.changes) - len(drift)
        lines.append(
            f"{len(report.changes)} declaration(s): {len(drift)} "
            f"{'to change' if not apply else 'changed or refused'}, {unchanged} in step"
        )
        self.emit(report.as_dict(), "\n".join(lines), as_json=o["json"])
        refused = report.refused
        if o["check"] and drift:
            raise CommandError(
                f"the ledger differs from the code in {len(drift)} declaration(s): "
                f"{drift[0].line}"
            )
        if refused:
            raise CommandError(f"{len(refused)} declaration(s) refused: {refused[0].line}")

    def do_backfill(self, o: dict[str, Any]) -> None:
        result, text = backfill.run(self._job(o), o, by=self.actor(o))
        self.emit(result.as_dict(), text, as_json=o["json"])


#: ``job_summary``'s keys that hold an instant (ISO-8601 text, UTC).
_INSTANTS = ("next_due_at", "next_occurrence_at", "last_keepalive_at", "created_at")


def _line(job: Job, key: str, value: Any, zone: Any) -> str:
    """The value of one line of ``jobs show``."""
    if key == "task":
        return job.shown_task
    if key == "target":
        return str(value)
    if key == "warning":
        return value or "none"
    if key == "next_due_at":
        return _next_due(job, zone)
    if key == "next_occurrence_at" and pauses.next_due(job) is None:
        return pauses.not_due_word(job)  # a paused job plans nothing until resumed
    return _shown(key, value, zone, job.schedule)


def _status(job: Job) -> str:
    """A job's status in words: a paused job's with who or what paused it ("paused by alice",
    "paused by admin (os: root)", "paused, removed from code"); an active job's with the
    warning the admin shows ("active (none of its last 5 runs completed)")."""
    how = pauses.paused_by(job)
    if how:
        return f"{job.status} {how}" if how.startswith("by ") else f"{job.status}, {how}"
    if selectors.job_warning(job):
        return f"{job.status} ({selectors.never_completes_warning(why=False)})"
    return str(job.status)


def _next_due(job: Job, zone: Any) -> str:
    """When the job fires next, or why it does not: a paused job is not due."""
    due = pauses.next_due(job)
    return pauses.not_due_word(job) if due is None else readable.instant(due, zone)


def _shown(key: str, value: Any, zone: Any, schedule: Schedule) -> str:
    """One line of ``jobs show``: an instant by ``readable``'s rule in ``--tz``; the schedule
    in words, then as JSON; every other value as ``shown_value`` prints it."""
    if key in _INSTANTS:
        return iso_instant(value, zone)
    if key == "schedule":
        return f"{selectors.describe_schedule(schedule, zone)} {shown_value(value)}"
    return shown_value(value)
