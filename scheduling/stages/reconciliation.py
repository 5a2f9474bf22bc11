"""Schedules declared in code, reconciled with the ledger: ``reconcile`` is the one service.

``reconcile`` makes the ledger match what ``declarations`` read: a new entry becomes a job
(``jobs.create_job``), a changed entry changes its job (``edits.edit_job``, each field from
and to in the audit trail, by ``CODE_ACTOR``), and a job whose entry is gone is paused with a
reason that says so, its history kept (its ``declared_fingerprint`` emptied,
``Engine.forget_declaration``: it is a person's job again). A job a person made with a
declaration's name is a conflict, adopted only when asked. Where each job is declared is
written by the ledger's engine (``Engine.mark_declared``). It is run by ``manage.py jobs
sync`` and by each scheduler at start (``SCHEDULING_SYNC_ON_START``).

Rolling deploys: each process's declarations are one set, known by its fingerprint and
numbered when the ledger first sees it (``DeclarationSet.sequence``). A scheduler applies its
set at start only when no set with a higher number has been applied; ``jobs sync`` always
applies its set and makes it the newest. Reconciliations take one lock
(``Engine.lock_declarations``), so schedulers starting at once reconcile one after the other
and the later ones find nothing to change.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from scheduling import conf
from scheduling.commandline.options import JOB_OPTION_NAMES
from scheduling.ledger.engines import engine
from scheduling.ledger.values import Declared
from scheduling.models import ChangeSource, DeclarationSet, Job, JobChangeAction, JobStatus
from scheduling.rules.validation import first_error
from scheduling.stages import audit, controls, edits, jobs
from scheduling.stages.audit import Actor
from scheduling.stages.declarations import TIMING, Desired, Refused, desired_jobs, set_fingerprint

logger = logging.getLogger("scheduling")

#: Who reconciles, in the audit trail: the code, through its declarations.
CODE_ACTOR = Actor(who="code", source=ChangeSource.CODE)


def code_actor() -> Actor:
    """The code, through this process's declarations, and the account it runs as:
    ``code (os: deploy)`` (``jobs sync`` and a scheduler at start alike)."""
    return Actor(who=f"code (os: {audit.os_account()})"[: audit.MAX_WHO], source=ChangeSource.CODE)


def removed_reason(origin: str) -> str:
    """The pause reason of a job whose entry is gone from the code."""
    return f"removed from {origin}: its declaration is gone from the code (history kept)"


@dataclass
class Change:
    """What reconciling does (or would do) to one entry's job."""

    action: str  # created, changed, disabled, adopted, unchanged, refused, conflict
    origin: str
    key: str
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    reason: str = ""

    @property
    def drift(self) -> bool:
        return self.action != "unchanged"

    @property
    def line(self) -> str:
        text = f"{self.action:9} {self.origin}[{self.key!r}]"
        if self.reason:
            text += f": {self.reason}"
        if self.fields:
            shown = ", ".join(
                f"{name} {audit.value_text(v.get('from'))} -> {audit.value_text(v.get('to'))}"
                for name, v in self.fields.items()
            )
            text += f" ({shown})"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "declared_in": self.origin,
            "key": self.key,
            "fields": self.fields,
            "reason": self.reason,
        }


@dataclass
class Report:
    """A reconciliation: each entry's change, and whether this process applied them."""

    changes: list[Change]
    applied: bool
    #: Why a scheduler at start left the ledger alone (an older declaration set), or "".
    skipped: str = ""
    #: The number of this process's declaration set (``DeclarationSet.sequence``), if seen.
    release: int | None = None

    @property
    def drift(self) -> list[Change]:
        return [c for c in self.changes if c.drift]

    @property
    def refused(self) -> list[Change]:
        return [c for c in self.changes if c.action in ("refused", "conflict")]

    def as_dict(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "skipped": self.skipped,
            "release": self.release,
            "changes": [c.as_dict() for c in self.changes],
        }


def _current(job: Job) -> dict[str, Any]:
    return {**audit.snapshot(job), "declared_task": job.declared_task}


def plan(found: list[Desired], refused: list[Refused], *, adopt: bool) -> list[Change]:
    """What reconciling would do, entry by entry (reads only)."""
    declared = {
        (job.declared_in, job.declared_key): job
        for job in Job.objects.select_related("schedule", "owner").exclude(declared_in="")
    }
    changes: list[Change] = []
    for desired in found:
        d = desired.declaration
        job = declared.pop((d.origin, d.key), None)
        if job is None:
            changes.append(_new(desired, adopt=adopt))
            continue
        fields = audit.differences(_current(job), desired.values)
        if not job.declared_fingerprint:
            changes.append(Change("adopted", d.origin, d.key, fields, "declared again"))
        elif fields:
            changes.append(Change("changed", d.origin, d.key, fields))
        else:
            changes.append(Change("unchanged", d.origin, d.key))
    for refusal in refused:
        declared.pop((refusal.origin, refusal.key), None)  # its job stays as it is
        changes.append(Change("refused", refusal.origin, refusal.key, reason=refusal.reason))
    for (origin, key), job in sorted(declared.items()):
        if job.declared_fingerprint:
            changes.append(Change("disabled", origin, key, reason=removed_reason(origin)))
    return changes


def _new(desired: Desired, *, adopt: bool) -> Change:
    d = desired.declaration
    made = list(Job.objects.select_related("owner").filter(name=d.key, declared_in=""))
    if not made:
        fields = {name: {"from": None, "to": value} for name, value in desired.values.items()}
        return Change("created", d.origin, d.key, fields)
    owners = ", ".join(sorted(job.owner.get_username() for job in made))
    if adopt and len(made) == 1:
        fields = audit.differences(_current(made[0]), desired.values)
        return Change("adopted", d.origin, d.key, fields, f"the job {owners} made")
    return Change(
        "conflict",
        d.origin,
        d.key,
        reason=f"{owners} made a job named {d.key!r} that is not declared; rename it, or run "
        f"`manage.py jobs sync --adopt` to let {d.where} own it",
    )


def _mark(job: Job, desired: Desired, *, release: int | None) -> None:
    d = desired.declaration
    engine().mark_declared(
        job.pk,
        Declared(
            origin=d.origin,
            key=d.key,
            fingerprint=desired.fingerprint,
            release=release,
            task=desired.declared_task,
        ),
    )


def _apply(
    change: Change, desired: Desired | None, *, now: datetime, by: Actor, release: int | None
) -> None:
    """Do one entry's change, in the caller's transaction."""
    if change.action == "disabled":
        job = Job.objects.get(declared_in=change.origin, declared_key=change.key)
        controls.pause_job(job=job, now=now, reason=removed_reason(change.origin), by=by)
        engine().forget_declaration(job.pk)
        return
    assert desired is not None
    d = desired.declaration
    if change.action == "created":
        job = jobs.create_job(
            owner=desired.job.owner,
            name=d.key,
            schedule=desired.job.schedule,
            target=desired.target,
            policies=desired.policies,
            now=now,
            by=by,
        )
        _mark(job, desired, release=release)
        return
    job = Job.objects.filter(declared_in=d.origin, declared_key=d.key).first()
    if job is None:  # adopting a person's job
        job = Job.objects.get(name=d.key, declared_in="")
        audit.record(
            job=job,
            action=JobChangeAction.CHANGED,
            by=by,
            now=now,
            changes={
                "declared_in": {"from": "", "to": d.origin},
                "declared_key": {"from": "", "to": d.key},
            },
        )
    editable = {
        name: getattr(desired.job, name)
        for name in change.fields
        if name in edits.EDITABLE and name != "name"
    }
    timing = None
    if any(name in TIMING for name in change.fields):
        timing = {name: getattr(desired.job.schedule, name) for name in TIMING}
    if editable or timing:
        edits.edit_job(
            job=job, now=now, timing=timing, by=by, allow_past=True, as_declared=True, **editable
        )
    _mark(job, desired, release=release)
    job.refresh_from_db()
    if job.status == JobStatus.PAUSED and job.pause_reason == removed_reason(d.origin):
        controls.resume_job(job=job, now=now, by=by)


def _seen(fingerprint: str, *, entries: int, now: datetime) -> DeclarationSet:
    """This set's row, numbered after every other when the ledger first sees it."""
    found = DeclarationSet.objects.filter(fingerprint=fingerprint).first()
    if found is not None:
        return found
    top = DeclarationSet.objects.aggregate(top=Max("sequence"))["top"] or 0
    return DeclarationSet.objects.create(
        fingerprint=fingerprint, sequence=top + 1, entries=entries, first_seen_at=now
    )


def reconcile(
    *,
    now: datetime,
    apply: bool,
    adopt: bool = False,
    on_start: bool = False,
    by: Actor = CODE_ACTOR,
    app: Any = None,
) -> Report:
    """Make the ledger match the declarations (``apply``), or say how it differs.

    ``on_start`` (a scheduler starting): a conflict or a refused entry is left alone and
    logged, and nothing is written when a newer declaration set has been applied. Otherwise
    (``jobs sync``) a conflict refuses the whole reconciliation, naming it (ValidationError),
    and the set applied becomes the newest. Without ``apply`` nothing is written.
    """
    found, refused = desired_jobs(now=now, app=app, writes=apply)
    by_key = {(d.declaration.origin, d.declaration.key): d for d in found}
    if not apply:
        return Report(changes=plan(found, refused, adopt=adopt), applied=False)
    fingerprint = set_fingerprint(app=app)
    with transaction.atomic():
        engine().lock_declarations()
        seen = _seen(fingerprint, entries=len(found) + len(refused), now=now)
        newest = (
            DeclarationSet.objects.filter(applied_at__isnull=False).order_by("-sequence").first()
        )
        if on_start and newest is not None and newest.sequence > seen.sequence:
            skipped = (
                f"declaration set #{seen.sequence} is older than #{newest.sequence}, already "
                "applied: this process changes nothing (docs/operations.md, Rolling deploys)"
            )
            return Report(changes=[], applied=False, skipped=skipped, release=seen.sequence)
        changes = plan(found, refused, adopt=adopt)
        conflicts = [c for c in changes if c.action == "conflict"]
        if conflicts and not on_start:
            first = conflicts[0]
            raise ValidationError({"name": f"{first.origin}[{first.key!r}]: {first.reason}"})
        if not on_start:
            # Applied by hand (a rollback included): this set is the newest from now on.
            top = DeclarationSet.objects.aggregate(top=Max("sequence"))["top"] or 0
            if seen.sequence < top:
                seen.sequence = top + 1
        for change in changes:
            if change.action in ("unchanged", "refused", "conflict"):
                continue
            try:
                with transaction.atomic():
                    _apply(
                        change,
                        by_key.get((change.origin, change.key)),
                        now=now,
                        by=by,
                        release=seen.sequence,
                    )
            except ValidationError as exc:
                change.action = "refused"
                change.reason = first_error(exc, options=JOB_OPTION_NAMES)
        seen.applied_at = now
        seen.save(update_fields=["sequence", "applied_at"])
    for change in changes:
        if change.action in ("refused", "conflict"):
            logger.error("declarations.refused %s", change.line)
        elif change.drift:
            logger.info("declarations.%s %s", change.action, change.line)
    return Report(changes=changes, applied=True, release=seen.sequence)


def sync_on_start(*, now: datetime, app: Any = None) -> Report | None:
    """A scheduler's start: ``reconcile`` when ``SCHEDULING_SYNC_ON_START`` is on. A failure
    is logged and the scheduler goes on (its loop waits out a database that is away)."""
    if not conf.get("SYNC_ON_START"):
        return None
    try:
        report = reconcile(now=now, apply=True, on_start=True, app=app, by=code_actor())
    except Exception:
        logger.exception("declarations.sync_failed")
        return None
    if report.skipped:
        logger.info("declarations.skipped %s", report.skipped)
    return report
