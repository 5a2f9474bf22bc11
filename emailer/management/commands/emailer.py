"""``manage.py emailer``: projects, participants, mail tasks, their schedules and history.

A thin layer over ``emailer.services``: parse, call one verb, report. Every action takes
``--help`` and ``--json``; bad input ends with one line naming the field and the reason.
The actions that make or remove jobs (``task schedule``, ``project remove``) record them in
the jobs' audit trail as ``manage.py jobs`` does: the process's operating-system account, and
the Django user ``--by USERNAME`` names (``scheduling.api.command_line_actor``).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone
from django.utils.timezone import get_current_timezone as zone

from emailer import selectors, services
from emailer.models import (
    FASTEST_RATE,
    DeliveryState,
    ParticipantStatus,
    ProjectState,
    UncertainPolicy,
)
from scheduling.api import (
    OneLineCommand,
    add_by_option,
    add_jsonl_option,
    add_timing_options,
    add_window_options,
    command_line_actor,
    instant,
    jobs_for_row,
    number,
    parse_timing_options,
    read_window,
    text_table,
    timing_of,
    whole_number,
    write_jsonl,
)

#: Model fields whose command-line option has another name, for error messages.
OPTION_NAMES = {
    "html_body": "--html",
    "from_email": "--from",
    "requires_state": "--requires-state",
    "batch_size": "--batch-size",
    "on_uncertain": "--on-uncertain",
    "interval": "--every",
    "timezone": "--tz",
    "run_at": "--at",
    "starts_at": "--start",
    "ends_at": "--end",
    "since": "--since",
    "until": "--until",
}


#: The most rows ``history`` and ``deliveries`` list at once.
MOST_LISTED = 100_000


#: argparse type for ``--limit``: a whole number from 1 to ``MOST_LISTED`` (a larger one is
#: more than the database takes as a limit, and more than anyone reads).
listed = whole_number(1, MOST_LISTED)


def csv_list(raw: str | None) -> list[str]:
    return [part.strip().lower() for part in (raw or "").split(",") if part.strip()]


class Command(OneLineCommand):
    help = "Manage mail projects, participants, mail tasks, their schedules and history."
    option_names = OPTION_NAMES

    def add_arguments(self, parser: CommandParser) -> None:
        groups = parser.add_subparsers(dest="group", required=True, metavar="GROUP")

        project = groups.add_parser("project", help="Add, change or remove a project.")
        project_actions = project.add_subparsers(dest="action", required=True, metavar="ACTION")
        add = self._action(project_actions, "add", "Create a project.")
        add.add_argument("name", help="Project name (unique).")
        add.add_argument("--state", choices=ProjectState.values, default=ProjectState.DRAFT)
        state = self._action(project_actions, "state", "Set a project's state.")
        state.add_argument("name")
        state.add_argument("state", choices=ProjectState.values)
        remove = self._action(
            project_actions, "remove", "Delete a project with its participants, tasks and jobs."
        )
        remove.add_argument("name")
        add_by_option(remove)

        people = groups.add_parser("participants", help="Import or unsubscribe participants.")
        people_actions = people.add_subparsers(dest="action", required=True, metavar="ACTION")
        imp = self._action(
            people_actions, "import", "Add or update participants from CSV (email,name[,status])."
        )
        imp.add_argument("project")
        imp.add_argument("file", help="CSV file, UTF-8; a header line 'email,...' is skipped.")
        unsub = self._action(people_actions, "unsubscribe", "Never mail this address again.")
        unsub.add_argument("project")
        unsub.add_argument("email")

        task = groups.add_parser("task", help="Add, schedule or preview a mail task.")
        task_actions = task.add_subparsers(dest="action", required=True, metavar="ACTION")
        tadd = self._action(task_actions, "add", "Create a mail task (a SendEmailTask row).")
        tadd.add_argument("name", help="Task name (unique).")
        tadd.add_argument("--project", required=True)
        tadd.add_argument("--subject", required=True, help="Django template, one line.")
        tadd.add_argument("--body", required=True, help="Plain-text Django template.")
        tadd.add_argument("--html", default="", help="HTML Django template (optional).")
        tadd.add_argument("--from", dest="from_email", default="", help="Sender address.")
        tadd.add_argument(
            "--mailer",
            default="",
            help="The mailer to send through, by its name in MAILERS (Django 6.1); "
            "default: the project's default mailer.",
        )
        tadd.add_argument(
            "--statuses",
            default="",
            help=f"Statuses to mail, comma-separated ({','.join(ParticipantStatus.values)}); "
            "default all.",
        )
        tadd.add_argument(
            "--requires-state", choices=ProjectState.values, default=ProjectState.ACTIVE
        )
        tadd.add_argument(
            "--batch-size", type=whole_number(1), default=10_000, help="Per occurrence."
        )
        tadd.add_argument(
            "--rate",
            type=number(0, FASTEST_RATE),
            default=0.0,
            help="Messages per second; 0 = no limit.",
        )
        tadd.add_argument(
            "--on-uncertain", choices=UncertainPolicy.values, default=UncertainPolicy.SKIP
        )
        tadd.add_argument(
            "--each-occurrence",
            action="store_true",
            help="Mail everyone due again at each occurrence (a reminder), not once each.",
        )
        tmailer = self._action(
            task_actions, "mailer", "Choose the mailer a task sends through (Django 6.1)."
        )
        tmailer.add_argument("name")
        tmailer.add_argument(
            "mailer", help='A name in MAILERS; "" or "default" for the default mailer.'
        )
        sched = self._action(task_actions, "schedule", "Make a job that runs the task.")
        sched.add_argument("name")
        add_timing_options(sched)  # the timing options of ``jobs add``, read alike
        sched.add_argument(
            "--expires",
            type=whole_number(1),
            help="Skip an occurrence not started this many seconds late.",
        )
        sched.add_argument("--job-name", help="Job name (default emailer.SendEmailTask:ID:N).")
        sched.add_argument(
            "--max-retries", type=whole_number(0), help="Retries after the first try."
        )
        sched.add_argument("--timeout", type=whole_number(1), help="Seconds per attempt.")
        add_by_option(sched)
        prev = self._action(task_actions, "preview", "Render the task for one participant.")
        prev.add_argument("name")
        prev.add_argument("--email", help="The participant (default: the first due one).")

        history = self._action(groups, "history", "Runs, newest first, with their counts.")
        history.add_argument("--task", help="Only this task's runs.")
        history.add_argument(
            "--limit", type=listed, help="At most N (20); with --jsonl only when given."
        )
        add_window_options(history, of="due time")
        add_jsonl_option(history)

        sent = self._action(groups, "deliveries", "One task's per-participant deliveries.")
        sent.add_argument("--task", required=True)
        sent.add_argument("--state", choices=DeliveryState.values)
        sent.add_argument(
            "--limit", type=listed, help="At most N (100); with --jsonl only when given."
        )
        add_window_options(sent, of="occurrence")
        add_jsonl_option(sent)

    @staticmethod
    def _action(actions: Any, name: str, text: str) -> CommandParser:
        parser: CommandParser = actions.add_parser(name, help=text, description=text)
        parser.add_argument(
            "--json", action="store_true", help="Print the result as one JSON value on stdout."
        )
        return parser

    def handle(self, *args: Any, **o: Any) -> None:
        if o.get("jsonl") and o["json"]:
            raise CommandError("--jsonl: not allowed with --json")
        handler = getattr(self, f"do_{o['group']}_{o.get('action') or 'show'}")
        found = handler(o)
        if found is not None:
            data, text = found
            self.say(o, data, text)

    def export(self, pages: Any) -> None:
        """Each page's rows as JSON lines on stdout (``--jsonl``)."""
        write_jsonl(lambda text: self.stdout.write(text, ending=""), pages)

    def say(self, o: dict[str, Any], data: Any, text: str) -> None:
        if o["json"]:
            self.stdout.write(json.dumps(data, default=str))
        else:
            self.stdout.write(text)

    # --- project -------------------------------------------------------------------------

    def do_project_add(self, o: dict[str, Any]) -> tuple[Any, str]:
        project = services.add_project(name=o["name"], state=o["state"])
        data = {"id": project.pk, "name": project.name, "state": project.state}
        return data, f"project {project.name} created ({project.state})"

    def do_project_state(self, o: dict[str, Any]) -> tuple[Any, str]:
        project = services.set_project_state(
            project=services.get_project(o["name"], field="name"), state=o["state"]
        )
        data = {"id": project.pk, "name": project.name, "state": project.state}
        return data, f"project {project.name} is {project.state}"

    def do_project_remove(self, o: dict[str, Any]) -> tuple[Any, str]:
        project = services.get_project(o["name"], field="name")
        deleted = services.remove_project(project=project, by=command_line_actor(o["by"]))
        summary = ", ".join(f"{n} {what}" for what, n in sorted(deleted.items()) if n)
        return {"name": o["name"], "deleted": deleted}, f"project {o['name']} removed: {summary}"

    # --- participants --------------------------------------------------------------------

    def do_participants_import(self, o: dict[str, Any]) -> tuple[Any, str]:
        project = services.get_project(o["project"])
        data = services.read_import_file(Path(o["file"]))
        report = services.import_participants_file(project=project, data=data)
        lines = [report.summary()]
        lines += [f"line {line}: {reason}" for line, reason in report.refused]
        if report.complete:
            return report.as_dict(), "\n".join(lines)
        # The report first (what went in, and why each other row did not), then the status.
        self.say(o, report.as_dict(), "\n".join(lines))
        raise CommandError(
            f"file: {len(report.refused)} of {report.rows} rows not imported "
            f"({report.duplicates} duplicate in file, {report.invalid} invalid)"
        )

    def do_participants_unsubscribe(self, o: dict[str, Any]) -> tuple[Any, str]:
        project = services.get_project(o["project"])
        participant = services.get_participant(project=project, email=o["email"])
        changed = services.unsubscribe_participant(participant=participant, now=timezone.now())
        since = instant(participant.unsubscribed_at)
        text = f"{participant.email} unsubscribed" if changed else (
            f"{participant.email} was already unsubscribed at {since}"
        )
        data = {
            "email": participant.email,
            "unsubscribed_at": participant.unsubscribed_at,
            "changed": changed,
        }
        return data, text

    # --- task ----------------------------------------------------------------------------

    def do_task_add(self, o: dict[str, Any]) -> tuple[Any, str]:
        task = services.add_task(
            project=services.get_project(o["project"]),
            name=o["name"],
            subject=o["subject"],
            body=o["body"],
            html_body=o["html"],
            from_email=o["from_email"],
            mailer=o["mailer"],
            statuses=csv_list(o["statuses"]),
            requires_state=o["requires_state"],
            batch_size=o["batch_size"],
            rate=o["rate"],
            on_uncertain=o["on_uncertain"],
            once_per_participant=not o["each_occurrence"],
        )
        data = {"id": task.pk, "name": task.name, "project": task.project.name}
        return data, (
            f"task {task.name} created (id {task.pk}); schedule it with "
            f"`emailer task schedule {task.name} --cron ...` or "
            f"`jobs add NAME --task-table emailer.SendEmailTask --task-row-id {task.pk} ...`"
        )

    def do_task_mailer(self, o: dict[str, Any]) -> tuple[Any, str]:
        task = services.set_task_mailer(
            task=services.get_task(o["name"], field="name"), mailer=o["mailer"]
        )
        shown = task.mailer or "the default mailer"
        return {"name": task.name, "mailer": task.mailer}, f"task {task.name} sends through {shown}"

    def do_task_schedule(self, o: dict[str, Any]) -> tuple[Any, str]:
        task = services.get_task(o["name"], field="name")
        fields = parse_timing_options(o, now=timezone.now())
        timing = timing_of(fields, allow_past=o["allow_past"])
        job = services.schedule_task(
            task=task,
            timing=timing,
            expires=o["expires"],
            name=o["job_name"],
            max_retries=o["max_retries"],
            timeout=o["timeout"],
            by=command_line_actor(o["by"]),
        )
        data = {
            "job": job.id,
            "name": job.name,
            "title": job.title,
            "task": task.name,
            "schedule": job.schedule,
            "next_due_at": job.next_due_at,
        }
        next_at = instant(job.next_due_at)
        if job.title != job.name:  # named for the task by the engine: its title says which
            return data, f"job for {job.title} runs {job.schedule}; next at {next_at}"
        return data, f"job {job.name} runs {task.name} {job.schedule}; next at {next_at}"

    def do_task_preview(self, o: dict[str, Any]) -> tuple[Any, str]:
        task = services.get_task(o["name"], field="name")
        participant = (
            services.get_participant(project=task.project, email=o["email"])
            if o["email"]
            else None
        )
        rendered = services.preview(task, participant)
        jobs = [j.name for j in jobs_for_row(task)]
        data = {
            "subject": rendered.subject,
            "body": rendered.body,
            "html_body": rendered.html_body,
            "jobs": jobs,
        }
        text = f"Subject: {rendered.subject}\n\n{rendered.body}"
        if rendered.html_body:
            text += f"\n\n--- HTML ---\n{rendered.html_body}"
        return data, text

    # --- history and deliveries ----------------------------------------------------------

    def do_history_show(self, o: dict[str, Any]) -> tuple[Any, str] | None:
        task = services.get_task(o["task"]) if o["task"] else None
        runs = selectors.history(task=task, window=read_window(o["since"], o["until"], zone=zone()))
        if o["jsonl"]:
            self.export(selectors.export_history(runs, limit=o["limit"]))
            return None
        newest = runs.order_by("-scheduled_batch_start_time", "-id")[: o["limit"] or 20]
        rows = [selectors.history_summary(h) for h in newest]
        table = text_table(
            ("DUE", "TASK", "STATUS", "SENT", "FAILED", "DEFERRED", "UNCERTAIN", "NOTE"),
            [
                (
                    _at(r["scheduled_batch_start_time"]),
                    r["task"],
                    r["status"],
                    r["sent"],
                    r["failed"],
                    r["deferred"],
                    r["uncertain"],
                    r["note"],
                )
                for r in rows
            ],
        )
        return rows, table if rows else "no runs yet"

    def do_deliveries_show(self, o: dict[str, Any]) -> tuple[Any, str] | None:
        found = selectors.deliveries(
            task=services.get_task(o["task"]),
            state=o["state"],
            window=read_window(o["since"], o["until"], zone=zone()),
        )
        if o["jsonl"]:
            self.export(selectors.export_deliveries(found, limit=o["limit"]))
            return None
        newest = found.order_by("-occurrence", "participant_id")[: o["limit"] or 100]
        rows = [selectors.delivery_summary(d) for d in newest]
        table = text_table(
            ("OCCURRENCE", "EMAIL", "STATE", "REPLY"),
            [(_at(r["occurrence"]), r["email"], r["state"], r["reply"]) for r in rows],
        )
        return rows, table if rows else "no deliveries"


def _at(text: str | None) -> str:
    """An ISO-8601 instant of the JSON output as the apps' one rule prints it in text."""
    return instant(datetime.fromisoformat(text)) if text else "-"
