"""The emailer's operator verbs: projects, participants, tasks and their schedules.

The command line, the admin and the demo all call these, so every path applies the same rules
and raises the same ``ValidationError`` naming the field. Scheduling goes through
``scheduling.api`` only.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from emailer import conf
from emailer.models import (
    Participant,
    ParticipantStatus,
    Project,
    ProjectState,
    SendEmailTask,
)
from emailer.rendering import SAMPLE_CONTEXT, Rendered, RenderError, compile_task
from emailer.text import control_character_error
from emailer.tokens import unsubscribe_url
from scheduling.api import JobInfo, Policies, Timing, schedule_row, unschedule_row

IMPORT_BATCH = 1000


# --- projects --------------------------------------------------------------------------------


def get_project(name: str, *, field: str = "project") -> Project:
    project = Project.objects.filter(name=name).first()
    if project is None:
        raise ValidationError({field: f"no project named {_shown(name, 80)}"})
    return project


def add_project(*, name: str, state: str = ProjectState.DRAFT) -> Project:
    project = Project(name=(name or "").strip(), state=state)
    project.full_clean()
    project.save()
    return project


def set_project_state(*, project: Project, state: str) -> Project:
    if state not in ProjectState.values:
        raise ValidationError(
            {"state": f"{state!r} is not one of {', '.join(ProjectState.values)}"}
        )
    Project.objects.filter(pk=project.pk).update(state=state)
    project.state = state
    return project


def remove_project(*, project: Project, by: Any = None) -> dict[str, int]:
    """Delete the project with its participants, tasks, their jobs and history.

    Seed 000: "a task stays in the database until the associated project is deleted". Each
    task's jobs go first, each removal in its job's audit trail by ``by`` (who asked: a
    user, or ``scheduling.api.command_line_actor``; ``system`` when None); the task table's
    delete hook in ``scheduling.api`` would remove any left as ``system``.
    """
    with transaction.atomic():
        for task in project.tasks.all():
            unschedule_row(task, by=by)
        _, per_model = project.delete()
    return {label.split(".")[-1].lower(): n for label, n in per_model.items()}


# --- participants ----------------------------------------------------------------------------


#: The columns a participants CSV may have, in the order a file without a header gives them.
COLUMNS = ("email", "name", "status")
_EXPECTED = "expected the columns email,name[,status]"


@dataclass
class ImportReport:
    """What an import did with every row of the file.

    Each data row is exactly one of: added, updated, unchanged (already there as it is), or
    refused, with its line number and why: ``duplicates`` of the refused rows repeat an
    address an earlier line gave (compared in lower case); the others cannot be read.
    """

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)
    duplicates: int = 0

    @property
    def rows(self) -> int:
        return self.added + self.updated + self.unchanged + len(self.refused)

    @property
    def invalid(self) -> int:
        return len(self.refused) - self.duplicates

    @property
    def complete(self) -> bool:
        """Every row was taken (added, updated or already there)."""
        return not self.refused

    def summary(self) -> str:
        return (
            f"{self.added} added, {self.updated} updated, {self.unchanged} already there, "
            f"{self.duplicates} duplicate in file, {self.invalid} invalid "
            f"({self.rows} row{'' if self.rows == 1 else 's'})"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "added": self.added,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "duplicates": self.duplicates,
            "invalid": self.invalid,
            "refused": [{"line": line, "reason": reason} for line, reason in self.refused],
        }


def _shown(value: str, limit: int = 60, *, quoted: bool = True) -> str:
    """``value`` for a message, cut short: a refused cell may be 100,000 characters."""
    shown = repr if quoted else str
    return shown(value) if len(value) <= limit else shown(value[:limit]) + "…"


def _rows(text: Iterable[str]) -> Iterator[tuple[int, list[str] | None, str]]:
    """Each CSV record as (line, cells, ""), or (line, None, why) for one the csv module
    cannot read (a field over its limit of 131,072 characters, say); reading goes on after it.
    """
    reader = csv.reader(text)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            reason = str(exc)
            if "field larger than field limit" in reason:
                reason = f"a field longer than {csv.field_size_limit():,} characters"
            yield reader.line_num, None, f"cannot be read as CSV: {reason}"
            continue
        yield reader.line_num, row, ""


def _header(line: int, row: list[str]) -> tuple[str, ...] | None:
    """The columns a first row names, or None when it is data (a cell holds an address).

    A first row without an address is a header; one without an ``email`` column, or with a
    column we do not know, refuses the whole file before anything is saved.
    """
    cells = tuple(c.strip().lower() for c in row)
    if any("@" in c for c in cells):
        return None
    if "email" not in cells:
        named = _shown(",".join(cells), 80, quoted=False)
        raise ValidationError({"file": f"line {line} has no email column ({named}); {_EXPECTED}"})
    unknown = [c for c in cells if c not in COLUMNS]
    repeated = sorted({c for c in cells if cells.count(c) > 1})
    if unknown or repeated:
        what = (
            f"unknown column {_shown(unknown[0])}" if unknown
            else f"column {repeated[0]!r} twice"
        )
        raise ValidationError({"file": f"line {line} names {what}; {_EXPECTED}"})
    return cells


def _parse_row(row: list[str], columns: tuple[str, ...] | None) -> tuple[str, str, str | None]:
    """(email, name, status or None); raises ValueError with the reason."""
    cells = [c.strip() for c in row]
    if columns is None:
        if len(cells) < 2 or len(cells) > 3:
            raise ValueError(f"{_EXPECTED}; got {len(cells)} columns")
        columns = COLUMNS[: len(cells)]
    elif len(cells) > len(columns) or columns.index("email") >= len(cells):
        # Trailing columns after the address may be left out, as without a header.
        raise ValueError(
            f"expected the columns {','.join(columns)}, as the header says; got {len(cells)}"
        )
    values = dict(zip(columns, cells, strict=False))
    raw_email = values["email"]
    email = raw_email.lower()
    for column in ("email", "name"):
        problem = control_character_error(values.get(column, ""))
        if problem:
            raise ValueError(f"{column}: {problem}")
    try:
        validate_email(email)
    except ValidationError:
        raise ValueError(f"email: {_shown(raw_email)} is not an email address") from None
    name = values.get("name", "")
    longest = Participant._meta.get_field("name").max_length or 0
    if len(name) > longest:
        raise ValueError(f"name: {len(name):,} characters; at most {longest}")
    status = values["status"].lower() if values.get("status") else None
    if status is not None and status not in ParticipantStatus.values:
        raise ValueError(
            f"status: {_shown(values['status'])} is not one of "
            f"{', '.join(ParticipantStatus.values)}"
        )
    return email, name, status


def import_participants(*, project: Project, text: Iterable[str]) -> ImportReport:
    """Add or update participants from CSV lines ``email,name[,status]``, idempotent by email.

    A first line without an address is a header naming the columns (``email`` among them, in
    any order); without one the columns are ``email,name[,status]``. Every row is accounted
    for in the report (see ``ImportReport``), refused rows with their line numbers, and the
    rows that can be taken still go in. A file with no data rows, whose header has no email
    column, or with more than ``EMAILER_IMPORT_MAX_ROWS`` rows is refused whole
    (``ValidationError`` on ``file``), before anything is written: the whole file is read
    first, then written a thousand rows at a time.
    """
    most = int(conf.get("IMPORT_MAX_ROWS"))
    report = ImportReport()
    taken: dict[str, tuple[int, str, str | None]] = {}
    columns: tuple[str, ...] | None = None
    first = True
    read = 0
    for line, row, unreadable in _rows(text):
        if row is not None and not any(c.strip() for c in row):
            continue
        read += 1
        if read > most:
            raise ValidationError(
                {
                    "file": f"more than {most:,} participant rows (EMAILER_IMPORT_MAX_ROWS); "
                    "nothing was imported: split the file"
                }
            )
        if row is None:
            report.refused.append((line, unreadable))
            first = False
            continue
        if first:
            first = False
            columns = _header(line, row)
            if columns is not None:
                read -= 1
                continue
        try:
            email, name, status = _parse_row(row, columns)
        except ValueError as exc:
            report.refused.append((line, str(exc)))
            continue
        if email in taken:
            report.refused.append(
                (
                    line,
                    f"email: {email!r} repeats line {taken[email][0]} (addresses are compared "
                    "in lower case); not imported",
                )
            )
            report.duplicates += 1
            continue
        taken[email] = (line, name, status)
    if not taken and not report.refused:
        raise ValidationError({"file": f"has no participant rows; {_EXPECTED}"})
    batch: dict[str, tuple[int, str, str | None]] = {}
    for email, values in taken.items():
        batch[email] = values
        if len(batch) >= IMPORT_BATCH:
            _import_batch(project, batch, report)
            batch = {}
    if batch:
        _import_batch(project, batch, report)
    return report


def _import_batch(
    project: Project, batch: dict[str, tuple[int, str, str | None]], report: ImportReport
) -> None:
    with transaction.atomic():
        known = {
            p.email: p
            for p in Participant.objects.filter(project=project, email__in=list(batch))
        }
        new, changed = [], []
        for email, (_, name, status) in batch.items():
            current = known.get(email)
            if current is None:
                new.append(
                    Participant(
                        project=project,
                        email=email,
                        name=name,
                        status=status or ParticipantStatus.INVITED,
                    )
                )
            elif current.name != name or (status is not None and current.status != status):
                current.name = name
                current.status = status or current.status
                changed.append(current)
            else:
                report.unchanged += 1
        Participant.objects.bulk_create(new)
        Participant.objects.bulk_update(changed, ["name", "status"])
    report.added += len(new)
    report.updated += len(changed)


def read_limited(handle: BinaryIO) -> bytes:
    """An import file's bytes, read no further than ``EMAILER_IMPORT_MAX_BYTES`` (and one):
    a larger file is refused without being held in memory."""
    most = int(conf.get("IMPORT_MAX_BYTES"))
    data = handle.read(most + 1)
    _check_size(data, most)
    return data


def read_import_file(path: Path) -> bytes:
    """The command line's import file, or ``ValidationError`` on ``file`` saying why not."""
    named = _shown(str(path), 200, quoted=False)
    if not path.is_file():
        raise ValidationError({"file": f"{named} is not a readable file"})
    try:
        with path.open("rb") as handle:
            return read_limited(handle)
    except OSError as exc:
        raise ValidationError({"file": f"{named} cannot be read: {exc.strerror or exc}"}) from None


def too_large(most: int) -> str:
    """Why a file over ``most`` bytes is refused (the admin's upload stops with these words)."""
    return (
        f"larger than {most:,} bytes (EMAILER_IMPORT_MAX_BYTES); nothing was imported: "
        "split the file"
    )


def _check_size(data: bytes, most: int) -> None:
    if len(data) > most:
        raise ValidationError({"file": too_large(most)})


def import_participants_file(*, project: Project, data: bytes) -> ImportReport:
    """Import a CSV file's bytes: UTF-8, with or without a byte-order mark, at most
    ``EMAILER_IMPORT_MAX_BYTES``. The admin's upload and the command line both come here."""
    _check_size(data, int(conf.get("IMPORT_MAX_BYTES")))
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ValidationError({"file": "UTF-16 text; save the file as CSV in UTF-8"})
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        reason = (
            f"not UTF-8 text: {exc.reason} at byte {exc.start:,}; save the file as CSV in UTF-8"
        )
        raise ValidationError({"file": reason}) from None
    return import_participants(project=project, text=io.StringIO(text, newline=""))


def get_participant(*, project: Project, email: str) -> Participant:
    found = Participant.objects.filter(project=project, email=email.strip().lower()).first()
    if found is None:
        raise ValidationError(
            {"email": f"no participant {_shown(email, 80)} in project {project.name!r}"}
        )
    return found


def unsubscribe_participant(*, participant: Participant, now: datetime) -> bool:
    """Never mail this participant again; False when they had already unsubscribed.

    A compare-and-set: the first unsubscription's time is kept. A run re-reads
    unsubscriptions with every chunk it claims.
    """
    changed = Participant.objects.filter(pk=participant.pk, unsubscribed_at__isnull=True).update(
        unsubscribed_at=now
    )
    if changed:
        participant.unsubscribed_at = now
    return bool(changed)


# --- tasks -----------------------------------------------------------------------------------


def get_task(name: str, *, field: str = "task") -> SendEmailTask:
    task = SendEmailTask.objects.select_related("project").filter(name=name).first()
    if task is None:
        raise ValidationError({field: f"no task named {_shown(name, 80)}"})
    return task


def add_task(*, project: Project, name: str, **values: Any) -> SendEmailTask:
    """Validate (templates compiled, statuses known) and save a task."""
    task = SendEmailTask(project=project, name=(name or "").strip(), **values)
    task.full_clean()
    task.save()
    return task


def set_task_mailer(*, task: SendEmailTask, mailer: str) -> SendEmailTask:
    """Send ``task`` through the mailer named ``mailer`` ("" for the default), once the
    model has checked that this project configures such a mailer."""
    task.mailer = mailer
    task.full_clean()
    task.save(update_fields=["mailer", "updated_at"])
    return task


def schedule_task(
    *,
    task: SendEmailTask,
    timing: Timing,
    expires: int | None = None,
    name: str | None = None,
    max_retries: int | None = None,
    timeout: int | None = None,
    owner: Any = None,
    now: datetime | None = None,
    by: Any = None,
) -> JobInfo:
    """A job that runs ``task`` on ``timing``; a task may have several (seed 000's N:N).

    ``expires`` (seconds) skips an occurrence that would start that long after its due time,
    rather than mailing people hours late. ``by`` is who makes it, for the job's audit trail
    (a user, or ``scheduling.api.command_line_actor``; ``system`` when None).
    """
    if expires is not None and expires < 1:
        raise ValidationError({"expires": "must be at least 1 second"})
    return schedule_row(
        task,
        timing=timing,
        policies=Policies(
            expires=expires, max_retries=max_retries, timeout=timeout, note=f"emailer: {task}"
        ),
        name=name,
        owner=owner,
        now=now,
        by=by,
    )


def preview(
    task: SendEmailTask,
    participant: Participant | None = None,
    *,
    sample: bool = False,
    live_link: bool = True,
) -> Rendered:
    """The task rendered for one participant (the first due one when none is given).

    ``sample`` renders it for the sample participant instead, for a viewer who may not see
    the project's people; ``live_link=False`` puts the sample unsubscribe link in place of the
    participant's own, which would unsubscribe them for whoever clicks it in a preview.
    Rendered under the same limits as a run's messages; a template that fails the checks a
    run makes, or fails for this participant, raises ``ValidationError`` naming the part.
    """
    if sample:
        participant = Participant(pk=0, **SAMPLE_CONTEXT["participant"])
    elif participant is None:
        people = Participant.objects.filter(project_id=task.project_id)
        if task.statuses:
            people = people.filter(status__in=task.statuses)
        participant = (
            people.filter(unsubscribed_at__isnull=True).order_by("id").first()
            or Participant(pk=0, email="someone@example.com", name="Someone", status="invited")
        )
    problems = task.check_templates()
    if problems:  # a row written behind the admin's back: the reason, as the run would give it
        raise ValidationError(problems)
    compiled = compile_task(subject=task.subject, body=task.body, html_body=task.html_body)
    try:
        return compiled.render(
            {
                "participant": {
                    "id": participant.pk,
                    "email": participant.email,
                    "name": participant.name,
                    "status": participant.status,
                },
                "project": {"name": task.project.name},
                "unsubscribe_url": (
                    unsubscribe_url(participant.pk or 0)
                    if live_link
                    else SAMPLE_CONTEXT["unsubscribe_url"]
                ),
            }
        )
    except RenderError as exc:  # this participant's values take a branch the check did not
        raise ValidationError({exc.field: f"render error: {exc.reason}"}) from None
