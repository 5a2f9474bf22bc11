"""The audit trail of jobs: who changed what, when, from where, field by field.

Every change of a job's definition or state goes through a verb of ``scheduling.stages.jobs``
(create, edit, re-plan, pause, resume, remove, and what is done to its executions: run now,
cancel, retry), of ``scheduling.stages.backfill``, or, for a job that pauses itself, of
``scheduling.stages.failures``; each calls ``record`` inside the transaction of its change,
so a change and its row commit together or not at all, and the admin, the command line and
``scheduling.api`` need no writer of their own. Who made the change travels with it as an
``Actor`` (``who``, and ``source``: the door it came in by):

- the admin: the signed-in user's username, source ``admin``;
- the command line: the operating-system account of the process, read from its real uid
  (never from ``LOGNAME`` or ``USER``, which anyone can set), source ``command``; with
  ``--by USERNAME``, that active Django user first: ``alice (os: root)``;
- ``scheduling.api``: the user or username its caller passes as ``by``, else ``system``,
  source ``api``;
- the engine itself (a job paused by its failure counter): ``system``, source ``system``.

What the engine does to executions on its own (claims, retries under the policy, an
overlap policy's cancel) is execution history, not part of the trail; a person's or code's
run now, cancel, retry and backfill are.

Values are stored as JSON (times as ISO-8601 text, lengths of time in seconds, the owner by
username), each one cut to ``MAX_VALUE_CHARS`` of JSON text so a large ``args`` cannot make
the trail grow without bound. Execution history is not part of the trail. Old rows go by
their own retention (``prune_trail``, ``SCHEDULING_AUDIT_RETENTION``), run by
``manage.py prune_history``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from scheduling.models import (
    JOB_POLICY_FIELDS,
    ChangeSource,
    Job,
    JobChange,
    JobChangeAction,
    JobStatus,
    PauseKind,
)
from scheduling.rules.validation import text_error
from scheduling.timing import readable

try:
    import pwd
except ImportError:  # not a POSIX system: no account database to ask
    pwd = None  # type: ignore[assignment]

#: The longest JSON text one value keeps; a longer one is stored as its start and its length.
MAX_VALUE_CHARS = 1000
#: The longest ``who`` (``JobChange.who``).
MAX_WHO = 150
#: Who the engine is in the trail.
SYSTEM = "system"
#: The timing fields, read from the job's schedule.
TIMING = ("interval", "cron", "rrule", "timezone", "run_at", "starts_at", "ends_at")
#: The job's own fields the trail follows (its target, its policies, its name and owner).
FIELDS = (
    "name",
    "owner",
    "task",
    "args",
    "kwargs",
    "task_table",
    "task_row_id",
    *JOB_POLICY_FIELDS,
    "note",
)
#: The most rows one pruning transaction deletes.
PRUNE_BATCH = 1000


@dataclass(frozen=True)
class Actor:
    """Who makes a change and through which door."""

    who: str
    source: str

    @classmethod
    def user(cls, user: Any, *, source: str = ChangeSource.ADMIN) -> Actor:
        """A signed-in user (the admin), or a user that code names (``scheduling.api``)."""
        return cls(who=str(user.get_username())[:MAX_WHO], source=source)

    @classmethod
    def command_line(cls, by: str | None = None) -> Actor:
        """Whoever runs ``manage.py``: the process's operating-system account (``os_account``);
        with ``by`` (``--by``, an active user the command line checked), that user first:
        ``alice (os: root)``."""
        account = os_account()
        who = account if not by else f"{by} (os: {account})"
        return cls(who=who[:MAX_WHO], source=ChangeSource.COMMAND)

    @classmethod
    def given(cls, by: Any, *, source: str = ChangeSource.API) -> Actor:
        """Who a caller of ``scheduling.api`` says acts: an ``Actor`` as it is (a command line's
        or the admin's, passed through), a Django user, or a name (a username, or whatever
        names the caller: one line of text); ``CODE`` when None. ValidationError on ``by``
        for a name that cannot be stored."""
        if by is None:
            return CODE
        if isinstance(by, Actor):
            return by
        if hasattr(by, "get_username"):
            return cls.user(by, source=source)
        problem = text_error(by, limit=MAX_WHO)
        if problem is None and not by.strip():
            problem = "must not be empty"
        if problem is not None:
            raise ValidationError({"by": problem})
        return cls(who=by.strip(), source=source)


def os_account() -> str:
    """The account name of the process's real uid, from the system's account database.

    Not ``getpass.getuser()``: it reads ``LOGNAME`` and ``USER`` first, so ``LOGNAME=alice
    manage.py jobs edit …`` run as root would be recorded as alice. A uid without a name
    (a bare container) is ``uid 1000``."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    if uid is None or pwd is None:
        return "unknown"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


#: Code calling ``scheduling.api`` without naming a user.
CODE = Actor(who=SYSTEM, source=ChangeSource.API)
#: The engine acting on its own (a job paused after failures).
ENGINE = Actor(who=SYSTEM, source=ChangeSource.SYSTEM)


def as_json(value: Any) -> Any:
    """``value`` as the trail stores it: JSON-ready, and at most ``MAX_VALUE_CHARS`` long."""
    if isinstance(value, datetime):
        value = value.isoformat()
    elif isinstance(value, timedelta):
        value = value.total_seconds()
    elif hasattr(value, "get_username"):
        value = value.get_username()
    text = json.dumps(value, default=str, sort_keys=True)
    if len(text) <= MAX_VALUE_CHARS:
        return json.loads(text)
    return f"{text[:MAX_VALUE_CHARS]}… ({len(text)} characters in all)"


def timing(schedule: Any) -> dict[str, Any]:
    """The timing fields of a schedule as the trail stores them."""
    return {name: as_json(getattr(schedule, name)) for name in TIMING}


def snapshot(job: Job) -> dict[str, Any]:
    """The values of ``job`` that the trail follows, as stored (its schedule's timing too)."""
    values = {name: as_json(getattr(job, name)) for name in FIELDS}
    values.update(timing(job.schedule))
    return values


def differences(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each field whose value differs, as ``{"from": …, "to": …}``."""
    return {
        name: {"from": before.get(name), "to": after.get(name)}
        for name in after
        if before.get(name) != after.get(name)
    }


def record(
    *,
    job: Job,
    action: str,
    by: Actor,
    now: datetime,
    changes: dict[str, dict[str, Any]],
) -> JobChange | None:
    """Write one row of the trail, in the caller's transaction; an edit that changed
    nothing writes none."""
    if action == JobChangeAction.CHANGED and not changes:
        return None
    return JobChange.objects.create(
        job_id=job.pk,
        job_name=job.name,
        at=now,
        who=by.who,
        source=by.source,
        action=action,
        changes=changes,
    )


def execution_changed(
    *,
    job_id: int,
    job_name: str,
    execution_id: int,
    action: str,
    before: str | None,
    after: str,
    by: Actor,
    now: datetime,
    reason: str | None = None,
) -> JobChange:
    """One execution of a job moved by a person or code (run now, cancel, retry), in the
    caller's transaction: ``execution ID`` from its status before (None: it is new) to
    after, and the reason given, if any."""
    changes: dict[str, dict[str, Any]] = {
        f"execution {execution_id}": {"from": before, "to": after}
    }
    if reason is not None:
        changes["reason"] = {"from": None, "to": as_json(reason)}
    return JobChange.objects.create(
        job_id=job_id,
        job_name=job_name,
        at=now,
        who=by.who,
        source=by.source,
        action=action,
        changes=changes,
    )


def created(*, job: Job, by: Actor, now: datetime) -> None:
    """A new job: each followed field it was made with, from nothing to its first value.
    A field left unset (None, or blank text such as an interval job's ``cron``) is not
    listed: "from nothing to nothing" says nothing. Later entries list what changed."""
    values = {name: value for name, value in snapshot(job).items() if value not in (None, "")}
    record(
        job=job,
        action=JobChangeAction.CREATED,
        by=by,
        now=now,
        changes=differences({}, values),
    )


def paused(
    *, job: Job, by: Actor, now: datetime, reason: str, before: str, kind: str | None
) -> None:
    """A job moved from active to paused: the reason it had (``before``) and the one it has,
    and who paused it (``kind``: a ``PauseKind`` value; None when the pause leaves it as it
    was, as the claim's pause of a row it cannot plan does)."""
    changes: dict[str, dict[str, Any]] = {
        "status": {"from": JobStatus.ACTIVE.value, "to": JobStatus.PAUSED.value},
    }
    if reason != before:  # paused with no reason given: nothing to say of it
        changes["pause_reason"] = {"from": before, "to": reason}
    if kind is not None:
        changes["pause_kind"] = {"from": PauseKind.NONE.value, "to": kind}
    record(job=job, action=JobChangeAction.PAUSED, by=by, now=now, changes=changes)


def trail(*, job_id: int | None = None, job_name: str = "", limit: int = 500) -> list[JobChange]:
    """A job's changes, newest first: by id, or a removed job's by the name it had."""
    rows = (
        JobChange.objects.filter(job_id=job_id)
        if job_id is not None
        else JobChange.objects.filter(job__isnull=True, job_name=job_name)
    )
    return list(rows.order_by("-at", "-id")[:limit])


def as_dict(change: JobChange) -> dict[str, Any]:
    """One row as ``jobs history --json`` prints it."""
    return {
        "id": change.pk,
        "job_id": change.job_id,
        "job": change.job_name,
        "at": change.at.isoformat(),
        "who": change.who,
        "source": change.source,
        "action": change.action,
        "changes": change.changes,
    }


def lines(changes: Iterable[JobChange]) -> list[str]:
    """The trail in words: when (to the second, its zone named, as every time an operator
    reads), who, where, then ``field: from -> to``."""
    out: list[str] = []
    for change in changes:
        out.append(
            f"{readable.instant(change.at)} {change.action} by {change.who} ({change.source})"
        )
        for name, values in change.changes.items():
            out.append(
                f"  {name}: {value_text(values.get('from'))} -> {value_text(values.get('to'))}"
            )
    return out


#: A stored instant (``as_json`` keeps a datetime as ISO 8601 with its offset).
_STORED_INSTANT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}:\d{2}|Z)")


def value_text(value: Any) -> str:
    """A stored value in one line of text: ``-`` for nothing, an instant as every time an
    operator reads (to the second, its zone named: "2031-02-03 04:05:06 UTC"), else its
    JSON."""
    if value is None:
        return "-"
    if isinstance(value, str) and _STORED_INSTANT.fullmatch(value):
        with contextlib.suppress(ValueError):
            return readable.instant(datetime.fromisoformat(value))
    return json.dumps(value, ensure_ascii=False)


def fields_in_words(change: JobChange) -> list[tuple[str, str, str]]:
    """``(field, from, to)`` of one change, each value as ``value_text`` writes it."""
    return [
        (name, value_text(values.get("from")), value_text(values.get("to")))
        for name, values in change.changes.items()
    ]


def prune_trail(
    *,
    now: datetime,
    older_than: timedelta,
    batch_size: int = PRUNE_BATCH,
    dry_run: bool = False,
    max_seconds: float | None = None,
) -> int:
    """Delete the trail's rows older than ``older_than``, a bounded batch per transaction;
    returns how many went (or, dry, would go). No batch starts once ``max_seconds`` have
    passed; the next run goes on from the oldest row left."""
    try:
        cutoff = now - older_than
    except OverflowError:
        return 0
    old = JobChange.objects.filter(at__lt=cutoff)
    if dry_run:
        return old.count()
    removed = 0
    started = time.monotonic()
    while max_seconds is None or time.monotonic() - started <= max_seconds:
        ids = list(old.order_by("at").values_list("pk", flat=True)[:batch_size])
        if not ids:
            return removed
        with transaction.atomic():
            removed += JobChange.objects.filter(pk__in=ids).delete()[0]
        if len(ids) < batch_size:
            return removed
    return removed
