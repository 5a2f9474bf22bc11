"""The engine's public API: the one module a domain app imports.

A domain app (``emailer``, ``subscriptions``, yours) talks to the scheduler only through the
names below; everything else in ``scheduling`` may change shape between releases. The rule is
enforced by import-linter in CI (see docs/architecture.md), and docs/extending.md walks through
a worked example.

- Declare work: ``@schedulable_task`` for a Celery task, ``@task_table(Model)`` for a model
  whose rows are units of scheduled work (a job points at one row), ``@task_options`` above
  Django's ``@task`` for a Django task's retries, timeout and schedules. They are allowlists:
  a job can target only what was declared. Put task-table declarations in your app's ``scheduled``
  module; the engine imports it when Django starts. The declarations also say who may point a
  job at them (``permission=``, ``superuser_only=``; ``owner=``, ``internal=``): the admin and
  calls made for an ``owner`` hold people to it (``scheduling.rules.permissions``).
- Enqueue it in bulk: ``enqueue_many(task, calls)`` writes one run per (args, kwargs) call of
  a Django task (on Duecourse's backend: the framework's results) or a schedulable Celery task
  (execution ids) in one statement, every call checked before anything is written, published
  when the caller's transaction commits (``scheduling.djangotasks.bulk``).
- Schedule it: ``schedule_row`` / ``schedule_task`` with a timing value (``Every``, ``Cron``,
  ``Calendar``, ``Once``) and a ``Policies`` value; ``next_occurrences`` lists when a job will
  run next.
- Operate it: ``edit``, ``pause``, ``resume``, ``run_now``, ``cancel``, ``unschedule``,
  ``unschedule_row``, ``backfill`` (the past occurrences of a range that the ledger does not
  hold), and read it with ``jobs_for_row``, ``executions`` and ``history``. Every change is
  written to the job's audit trail with source ``api``, by whoever is passed as ``by``: a
  Django user, a username (or any one-line name), a command line's identity from
  ``command_line_actor`` (source ``command``), or an admin page's from ``admin_actor``
  (the signed-in user, source ``admin``, as the engine's own admin records them); ``system``
  when None.
- Command lines of your own: ``OneLineCommand`` (a management command whose every refusal,
  from argparse or a ``ValidationError``, is one line naming the option), ``parse_instant``
  (an ISO-8601 instant with an offset, naming the field when it is not), ``whole_number``
  and ``number`` (an option's type: a number within a range, refused naming the range),
  ``positive_int`` and
  ``error_line`` (a ``ValidationError`` as one line, each field named with the option that set
  it), the same as the engine's own commands use; ``add_timing_options``,
  ``parse_timing_options`` and ``timing_of`` read ``--every | --cron | --rrule | --at``,
  ``--tz``, ``--start``, ``--end`` and ``--allow-past`` exactly as ``jobs add`` does, with its
  refusals; ``add_by_option`` (``--by USERNAME``, an active user, refused in one line
  otherwise) and ``command_line_actor`` (who a command acts as: the process's operating-system
  account, and ``--by``'s user) give a command's changes the same ``who`` as ``jobs``';
  ``text_table`` (rows under headers, each column as wide as its longest value:
  nothing cut) and ``shown_value`` (a value as text: JSON as compact JSON, never a Python
  repr). History out in bulk (``scheduling.commandline.exports``): ``add_window_options`` and
  ``read_window`` (``--since``/``--until``, an ``ExportWindow``; ``ALL_TIME`` has no ends),
  ``add_jsonl_option``, ``in_key_order`` (a query's rows a page at a time, in memory that does
  not grow) and ``write_jsonl`` (one JSON object a line), as ``manage.py executions`` exports.
- Run it: a runner receives its row and a ``RunContext`` (ids, the occurrence's due time, the
  attempt number, the last checkpoint, ``save_checkpoint``, ``progress`` and
  ``report_failures``), never the ledger's ORM rows or Celery objects. Raise
  ``PermanentError`` for what a retry cannot fix; any other exception is retried under the
  job's retry policy. A run that completes although some of its items failed (a declined
  renewal, an undelivered message) says so with ``run.report_failures(count, detail)``; the
  dashboard, ``/metrics`` and ``manage.py executions`` count them.
- Pages of your own: ``SafeListAdmin`` (a list answers any filter value in its URL, a date
  part outside the calendar or a number past its column, as Django answers a bad filter,
  with the unfiltered list and ``?e=1``, instead of a 500), ``breakable`` (a long name in a
  list cell wraps after a dot, an underscore, a slash or an at-sign, a date never),
  ``IdSelectionAdmin`` (a list action refuses a hand-made selection that
  holds something other than ids, instead of answering 500), ``ContentSecurityPolicyAdmin``
  (mixed into a ``ModelAdmin``) and
  ``with_content_security_policy`` (around a view) give them the apps' Content-Security-Policy
  where the host sends none, never replacing the host's (``scheduling.pages.csp``).
- Show times as the engine does (``scheduling.timing.readable``, docs/operations.md, *Times and
  names*): ``instant`` (to the second, in the project's ``TIME_ZONE`` with the zone named:
  "2030-01-31 04:00:05 EST"), ``ago`` ("12 s ago", "in 3 min", a date beyond 30 days),
  ``when`` (both: "… EST (in 3 min)"), ``caption`` ("Times in America/New_York"), ``span``
  (a length of time), ``describe_interval`` ("every 10 seconds") and ``describe_cron``
  ("at 09:00, Monday through Friday"). In admin pages: ``ReadableTimesAdmin`` (mixed into a
  ``ModelAdmin`` or an inline, first) shows every date-time field of the model by that rule,
  in lists and on pages, and edits them with ``ZonedSplitDateTime``; ``shown_time`` is one
  time as those pages write it (HTML).
- Statements of your own: ``ledger`` (``Statement``, ``rows``, ``row``, ``value``,
  ``execute``, ``Engines``) runs an app's hand-written SQL the way the engine runs its own:
  each database's statements in a named ``.sql`` file (``load_statements``), named
  parameters, rows decoded by column name, and the database decided once per connection by an
  ``Engines`` family (docs/extending.md, *A ledger module*).
  ``row_locks`` gives ``select_for_update`` the options the database can say (MySQL and
  MariaDB have no ``FOR NO KEY UPDATE``, MariaDB no ``OF``).

Jobs made from code without an ``owner`` belong to the system user ``SYSTEM_OWNER``: an
inactive account that cannot log in, which superusers see in the admin and which no staff
user's owner scoping reaches.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from scheduling import ledger
from scheduling.api.actors import admin_actor, api_actor, command_line_actor
from scheduling.api.task_tables import TaskTableAdmin, task_table
from scheduling.celeryapp import celery_app
from scheduling.commandline.exports import (
    ALL_TIME,
    add_jsonl_option,
    add_window_options,
    in_key_order,
    read_window,
    write_jsonl,
)
from scheduling.commandline.exports import Window as ExportWindow
from scheduling.commandline.options import (
    OneLineCommand,
    add_by_option,
    add_timing_options,
    number,
    parse_timing_options,
    positive_int,
    shown_value,
    text_table,
    timing_of,
    whole_number,
)
from scheduling.djangotasks.bulk import enqueue_many
from scheduling.djangotasks.options import task_options
from scheduling.ledger.engines import row_locks
from scheduling.ledger.named import load as load_statements
from scheduling.messages.errors import Fenced, RunCancelled
from scheduling.models import Job, Schedule
from scheduling.pages.changelists import SafeListAdmin, breakable
from scheduling.pages.csp import ContentSecurityPolicyAdmin
from scheduling.pages.csp import with_csp as with_content_security_policy
from scheduling.pages.selections import IdSelectionAdmin
from scheduling.pages.times import ReadableTimesAdmin, ZonedSplitDateTime
from scheduling.pages.times import shown as shown_time
from scheduling.rules import permissions, tasktables
from scheduling.rules.registry import PermanentError
from scheduling.rules.validation import first_error as error_line
from scheduling.scheduler.publisher import publish_now
from scheduling.stages import audit as _audit
from scheduling.stages import backfill as _backfill
from scheduling.stages import controls as _controls
from scheduling.stages import edits as _edits
from scheduling.stages import jobs as _jobs
from scheduling.stages import previews as _previews
from scheduling.stages import removals as _removals
from scheduling.timing.previews import DEFAULT_COUNT
from scheduling.timing.readable import (
    ago,
    caption,
    describe_cron,
    describe_interval,
    instant,
    span,
    when,
)
from scheduling.timing.schedules import ScheduleError
from scheduling.timing.values import Calendar, Cron, Every, Once, Timing, parse_instant
from scheduling.worker.run_context import RunContext
from scheduling.worker.taskbase import ScheduledTask, schedulable_task

__all__ = [
    "ADMIN_STYLESHEET",
    "ALL_TIME",
    "SYSTEM_OWNER",
    "BackfillResult",
    "Calendar",
    "ContentSecurityPolicyAdmin",
    "Cron",
    "Every",
    "ExecutionInfo",
    "ExportWindow",
    "Fenced",
    "IdSelectionAdmin",
    "JobInfo",
    "Once",
    "OneLineCommand",
    "PermanentError",
    "Policies",
    "ReadableTimesAdmin",
    "RunCancelled",
    "RunContext",
    "SafeListAdmin",
    "ScheduledTask",
    "TaskTableAdmin",
    "Timing",
    "ZonedSplitDateTime",
    "add_by_option",
    "add_jsonl_option",
    "add_timing_options",
    "add_window_options",
    "admin_actor",
    "ago",
    "backfill",
    "breakable",
    "cancel",
    "caption",
    "command_line_actor",
    "describe_cron",
    "describe_interval",
    "edit",
    "enqueue_many",
    "error_line",
    "executions",
    "history",
    "in_key_order",
    "instant",
    "job",
    "jobs_for_row",
    "ledger",
    "load_statements",
    "next_occurrences",
    "number",
    "parse_instant",
    "parse_timing_options",
    "pause",
    "positive_int",
    "read_window",
    "resume",
    "row_locks",
    "run_now",
    "schedulable_task",
    "schedule_row",
    "schedule_task",
    "shown_time",
    "shown_value",
    "span",
    "task_options",
    "task_table",
    "text_table",
    "timing_of",
    "unschedule",
    "unschedule_row",
    "when",
    "whole_number",
    "with_content_security_policy",
    "write_jsonl",
]

#: The engine's admin stylesheet (a static file of ``scheduling``): status badges, and lists
#: that fit their box at 1,400 px with Django's navigation sidebar open (long names and
#: addresses wrap, times break between date and time). A domain app's model admins load it
#: with ``class Media: css = {"all": (ADMIN_STYLESHEET,)}``.
ADMIN_STYLESHEET = "scheduling/duecourse.css"

SYSTEM_OWNER = _jobs.SYSTEM_OWNER
Policies = _jobs.Policies
BackfillResult = _backfill.BackfillResult
JobInfo = _jobs.JobInfo
ExecutionInfo = _jobs.ExecutionInfo


JobRef = int | _jobs.JobInfo


def schedule_row(
    row: Any,
    *,
    timing: Timing,
    policies: _jobs.Policies | None = None,
    name: str | None = None,
    owner: Any = None,
    now: datetime | None = None,
    by: Any = None,
) -> _jobs.JobInfo:
    """Make a job that runs ``row`` (of a registered task table) on ``timing``.

    ``name`` defaults to ``<label>:<pk>:<n>``; a row may be run by several jobs, and one job per
    schedule is how one task gets several schedules. Raises ``ValidationError`` naming the field.
    A job made for an ``owner`` is held to what that user may target, as in the admin.
    """
    target = _jobs.Target(task_table=tasktables.label_of(type(row)), task_row_id=row.pk)
    return _schedule(
        target, timing=timing, policies=policies, name=name, owner=owner, now=now, by=by
    )


def schedule_task(
    task: str | Any,
    *,
    timing: Timing,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    policies: _jobs.Policies | None = None,
    name: str | None = None,
    owner: Any = None,
    now: datetime | None = None,
    by: Any = None,
) -> _jobs.JobInfo:
    """Make a job that calls the schedulable task ``task`` (its name, or the task itself).

    A job made for an ``owner`` is held to what that user may target, as in the admin.
    ``by`` is the user the audit trail names as its maker (``system`` when None).
    """
    task_name = task if isinstance(task, str) else task.name
    target = _jobs.Target(task=task_name, args=list(args), kwargs=dict(kwargs or {}))
    return _schedule(
        target, timing=timing, policies=policies, name=name, owner=owner, now=now, by=by
    )


def _schedule(
    target: _jobs.Target,
    *,
    timing: Timing,
    policies: _jobs.Policies | None,
    name: str | None,
    owner: Any,
    now: datetime | None,
    by: Any = None,
) -> _jobs.JobInfo:
    """Fill in what code may leave out (owner, name, policies, now), then ``create_job``."""
    if owner is not None:
        # A job made for a person may target only what that person may (``permissions``).
        permissions.check_may_target(
            owner, task=target.task, task_table=target.task_table, task_row_id=target.task_row_id
        )
    owner = owner if owner is not None else _jobs.system_owner()
    if not name:
        if target.task_table:
            taken = Job.objects.filter(
                task_table=target.task_table, task_row_id=target.task_row_id
            ).count()
            name = f"{target.task_table}:{target.task_row_id}:{taken + 1}"
        else:
            name = f"{target.task}:{Job.objects.filter(task=target.task).count() + 1}"
    schedule = Schedule(**timing.schedule_fields())
    schedule.allow_past = getattr(timing, "allow_past", False)
    created = _jobs.create_job(
        owner=owner,
        name=name,
        schedule=schedule,
        target=target,
        policies=policies or _jobs.Policies(),
        now=now or timezone.now(),
        query_constraints=False,
        by=api_actor(by),
    )
    return _jobs.JobInfo.of(created)


def _id(job: JobRef) -> int:
    return job.id if isinstance(job, _jobs.JobInfo) else int(job)


def _get(job: JobRef) -> Job:
    """The job's row, or ``ValidationError`` on ``job`` when there is none."""
    job_id = _id(job)
    found = Job.objects.select_related("schedule", "owner").filter(pk=job_id).first()
    if found is None:
        raise ValidationError({"job": f"no job with id {job_id}"})
    return found


def job(job: JobRef) -> _jobs.JobInfo:
    """The job as it is now (raises ``ValidationError`` on ``job`` when it does not exist)."""
    return _jobs.JobInfo.of(_get(job))


def next_occurrences(
    job: JobRef, *, count: int = DEFAULT_COUNT, now: datetime | None = None
) -> list[datetime]:
    """The job's next ``count`` occurrences at or after ``now``, in order.

    Aware datetimes in the job's zone (its schedule's; UTC for intervals and one-offs), each
    with the offset in force at that instant. Fewer come back when the schedule ends first. A
    paused or completed job's timing is listed all the same, as if it ran from ``now``: look
    at ``job(...).status``. ``count`` is 1 to ``scheduling.timing.previews.MAX_COUNT``
    (``ValidationError`` on ``count`` otherwise); ``now`` must be aware.
    """
    moment = now or timezone.now()
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValidationError({"now": "must include a time zone offset"})
    try:
        found = _previews.job_preview(_get(job), count=count, now=moment)
    except ScheduleError as exc:
        raise ValidationError({exc.field: exc.reason}) from None
    return list(found.occurrences)


def jobs_for_row(row: Any, *, visible_to: Any = None) -> list[_jobs.JobInfo]:
    """Every job that runs ``row``; with ``visible_to``, only those that user may see (a
    superuser every one, a staff user their own, given the view permission on jobs)."""
    return _jobs.jobs_for_row(tasktables.label_of(type(row)), row.pk, viewer=visible_to)


def edit(job: JobRef, *, timing: Timing | None = None, by: Any = None, **changes: Any) -> JobInfo:
    """Change the job in place: a new ``timing`` and/or the fields named in ``changes``
    (``task``, ``args``, ``kwargs``, ``max_retries``, ``timeout``, ``jitter``, ``misfire``,
    ``overlap``, ``queue``, ``priority``, ``expires``, ``note``, ``max_running``,
    ``pause_after_failures``, ``name``, ``owner``, ...). Raises ``ValidationError`` naming the
    field; its history stays. ``by`` is the user the audit trail names (``system`` when None).
    """
    fields = None
    if timing is not None:
        fields = {"interval": "", "cron": "", "run_at": None, "starts_at": None, "ends_at": None}
        fields.update(timing.schedule_fields())
    edited = _edits.edit_job(
        job=_get(job), now=timezone.now(), timing=fields, by=api_actor(by), **changes
    )
    return _jobs.JobInfo.of(edited)


def pause(job: JobRef, *, reason: str = "", by: Any = None) -> bool:
    """Stop claiming the job's occurrences; False when it was not active."""
    return _controls.pause_job(job=_get(job), now=timezone.now(), reason=reason, by=api_actor(by))


def resume(job: JobRef, *, by: Any = None) -> bool:
    """Claim the job again; its misfire policy decides what the pause missed, and its count
    of failed occurrences in a row starts again from zero."""
    return _controls.resume_job(job=_get(job), now=timezone.now(), by=api_actor(by))


def run_now(job: JobRef, *, by: Any = None) -> int:
    """One extra occurrence now, published at once; returns its execution id.

    The execution is committed before its message is published, as every occurrence is; if
    the broker cannot be reached, the scheduler publishes it after ``SCHEDULING_PENDING_GRACE``.
    ``by`` is who asked, for the audit trail (``system`` when None).
    """
    ran = _controls.run_job_now(job=_get(job), now=timezone.now(), by=api_actor(by))
    execution_id = int(ran.pk)
    publish_now(celery_app(), execution_ids=[execution_id])
    return execution_id


def backfill(
    job: JobRef,
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    dry_run: bool = False,
    by: Any = None,
) -> _backfill.BackfillResult:
    """Make the job's occurrences in ``[start, end)`` that the ledger does not hold yet.

    Each is one execution under the one-per-occurrence key, made WAITING: the scheduler
    releases them oldest first under the job's overlap policy and running limits, and
    publishes them as any other. ``end`` may not be later than ``now``; a range holding more
    than ``SCHEDULING_BACKFILL_MAX`` occurrences is refused (``ValidationError`` naming
    ``start``, ``end`` or ``range``). With ``dry_run`` nothing is written; the result says
    what would be. ``by`` is who asked, for the audit trail (``system`` when None).
    """
    return _backfill.backfill_job(
        job=_get(job), start=start, end=end, now=now, dry_run=dry_run, by=api_actor(by)
    )


def cancel(job: JobRef, *, reason: str = "cancelled", by: Any = None) -> int:
    """Cancel the job's queued and running executions; returns how many were cancelled.
    Each is a row of the audit trail by ``by`` (``system`` when None)."""
    return _controls.cancel_job(
        job_id=_id(job), reason=reason, now=timezone.now(), by=api_actor(by)
    )


def unschedule(job: JobRef, *, by: Any = None) -> None:
    """Delete the job and its history of executions (its audit trail stays)."""
    _removals.remove_job(job=_get(job), now=timezone.now(), by=api_actor(by))


def unschedule_row(row: Any, *, by: Any = None) -> int:
    """Delete every job that runs ``row``; returns how many. ``by`` is who asked, for the
    audit trail (``system`` when None; deleting the row removes its jobs as ``system`` too,
    or, deleted in a ``TaskTableAdmin``, as the signed-in user)."""
    return _removals.remove_jobs_for_row(tasktables.label_of(type(row)), row.pk, by=api_actor(by))


def executions(
    job: JobRef, *, limit: int = 50, status: str | None = None
) -> list[_jobs.ExecutionInfo]:
    """The job's executions, newest first, with their attempt counts."""
    return _jobs.executions(_id(job), limit=limit, status=status)


def history(job: JobRef, *, limit: int = 100) -> list[dict[str, Any]]:
    """The job's audit trail, newest first: ``at``, ``who``, ``source``, ``action`` and
    ``changes`` (each field's ``from`` and ``to``), as ``manage.py jobs history --json``."""
    return [_audit.as_dict(c) for c in _audit.trail(job_id=_id(job), limit=limit)]
