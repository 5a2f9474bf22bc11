"""Django system checks: what a host project got wrong, said by ``manage.py check``.

Each message has an id (``scheduling.E001`` …) and a hint that says what to change. The first
checks read only code and settings. The last ones read the ledger, because what they guard
against lives there (a job's timeout, the schedulers that ticked, the task tables jobs point at);
they say nothing while the database does not answer or the tables are not migrated yet, so a
build step that runs ``check`` without a database stays quiet.

| id | level | what |
| --- | --- | --- |
| scheduling.E001 | error | no Celery app of the project's is current |
| scheduling.W002 | warning | a schedulable task has ``acks_late`` switched off |
| scheduling.W003 | warning | the broker's visibility timeout is shorter than a job's time limit |
| scheduling.W004 | warning | SQLite with more than one scheduler ticking at the same time |
| scheduling.W005 | warning | a job points at a task table that is no longer registered |
| scheduling.W006 | warning | a job runs a task that is no longer schedulable |
| scheduling.E007 | error | ``USE_TZ`` is off |
| scheduling.E008 | error | a ``SCHEDULING_*`` setting holds a value its knob does not accept |
| scheduling.W009 | warning | executions of a queue wait while nothing of it starts: no consumer |
| scheduling.W010 | warning | jobs saved before the queue rules use a queue name they refuse |
| scheduling.W011 | warning | occurrences of a task unknown here wait for a process that knows it |
| scheduling.W012 | warning | the partitioned history has no period made for now (PostgreSQL) |
| scheduling.W013 | warning | a job's arguments no longer fit its task's parameters |
| scheduling.E014 | error | a job declared in code cannot be expressed (solar, unknown task) |
| scheduling.W015 | warning | MySQL/MariaDB: the ledger's text columns compare without case |
| scheduling.E017 | error | MySQL/MariaDB: the session's clock is not UTC (``time_zone``) |
| scheduling.W016 | warning | MariaDB: ``SCHEDULING_ARGS_MAX_DEPTH`` deeper than its JSON keeps |
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import DatabaseError, connection
from django.db.models import Max
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules

from scheduling import conf
from scheduling.celeryapp import celery_app, is_fallback
from scheduling.ledger import partitions
from scheduling.ledger.engines import engine
from scheduling.models import Job, JobStatus, SchedulerState
from scheduling.rules import arguments, registry, tasktables
from scheduling.rules.validation import fit_errors, queue_error, visibility_timeout
from scheduling.stages import declarations
from scheduling.web import overview

INSTALL_DOC = "see docs/install.md"
#: How recently a scheduler must have ticked to count as running, for W004.
SCHEDULER_RECENT = timedelta(minutes=5)


@register("scheduling")
def check_celery_app(**_: Any) -> list[CheckMessage]:
    if not is_fallback(celery_app()):
        return []
    return [
        Error(
            "No Celery app of this project is current, so Duecourse would publish to Celery's "
            "unconfigured default app.",
            hint=(
                "Create the project's Celery app configured from Django settings "
                "(app.config_from_object('django.conf:settings', namespace='CELERY')) and "
                "import it in the settings package's __init__.py, as Celery's Django guide "
                f"does; {INSTALL_DOC}."
            ),
            id="scheduling.E001",
        )
    ]


@register("scheduling")
def check_use_tz(**_: Any) -> list[CheckMessage]:
    """Every due time, occurrence and heartbeat is an aware datetime compared with ``now()``;
    with ``USE_TZ`` off Django hands back naive ones, and the first job made fails mid-way."""
    if getattr(settings, "USE_TZ", True):
        return []
    return [
        Error(
            "USE_TZ is False: Duecourse stores and compares time-zone-aware datetimes (every "
            "due time, occurrence and heartbeat), which Django gives only with USE_TZ on.",
            hint=f"Set USE_TZ = True (startproject's default); {INSTALL_DOC}.",
            id="scheduling.E007",
        )
    ]


@register("scheduling")
def check_settings(**_: Any) -> list[CheckMessage]:
    """Every ``SCHEDULING_*`` knob the host set, against its range (``conf.KNOBS``).

    A value out of range is refused where it is read, too, but that may be in a worker or a web
    page long after the deploy; said here, ``migrate`` and ``check`` stop the deploy first.
    """
    return [
        Error(
            reason,
            hint=f"Set SCHEDULING_{name} within that range, or remove it for the default "
            f"({conf.KNOBS[name].default!r}); {INSTALL_DOC}.",
            obj=f"SCHEDULING_{name}",
            id="scheduling.E008",
        )
        for name, reason in conf.refusals().items()
    ]


@register("scheduling")
def check_acks_late(**_: Any) -> list[CheckMessage]:
    app = celery_app()
    if is_fallback(app):
        return []
    # Django's own module discovery, not Celery's: Celery's runs the system checks again.
    autodiscover_modules("tasks")
    messages: list[CheckMessage] = []
    for name, task in sorted(app.tasks.items()):
        if not getattr(task, "schedulable", False):
            continue
        acks_late = task.acks_late if task.acks_late is not None else app.conf.task_acks_late
        if not acks_late:
            messages.append(
                Warning(
                    f"Schedulable task {name!r} has acks_late switched off: a worker killed "
                    "mid-run loses its message, and the execution waits for the reaper.",
                    hint="Remove acks_late=False from its @schedulable_task declaration.",
                    obj=name,
                    id="scheduling.W002",
                )
            )
    return messages


def _visibility_warning(limit: int, longest: int, what: str) -> Warning:
    return Warning(
        f"The broker's visibility timeout ({limit} s) is shorter than {what} ({longest} s): "
        "the broker would hand a running task's message to a second worker.",
        hint=(
            "Raise CELERY_BROKER_TRANSPORT_OPTIONS['visibility_timeout'] above the longest "
            "job timeout plus SCHEDULING_HARD_TIMEOUT_GRACE, or lower that timeout."
        ),
        id="scheduling.W003",
    )


def _ledger_ready() -> bool:
    """Whether the ledger's tables can be read now; a check never fails for want of them."""
    try:
        return Job._meta.db_table in connection.introspection.table_names()
    except Exception:  # no server, no migration, or a caller that may not touch the database
        return False


@register("scheduling")
def check_visibility_timeout(**_: Any) -> list[CheckMessage]:
    if is_fallback(celery_app()):
        return []
    limit = visibility_timeout()
    if limit is None or conf.refusals().keys() & {"HARD_TIMEOUT_GRACE", "DEFAULT_TIMEOUT"}:
        return []  # E008 names a value it cannot read
    grace = int(conf.get("HARD_TIMEOUT_GRACE"))
    default = int(conf.get("DEFAULT_TIMEOUT")) + grace
    if default > limit:
        return [_visibility_warning(limit, default, "SCHEDULING_DEFAULT_TIMEOUT plus its grace")]
    if not _ledger_ready():
        return []
    try:
        longest = Job.objects.aggregate(longest=Max("timeout"))["longest"]
    except DatabaseError:
        return []
    if longest is not None and longest + grace > limit:
        return [_visibility_warning(limit, longest + grace, "the longest job timeout plus grace")]
    return []


@register("scheduling")
def check_sqlite_schedulers(**_: Any) -> list[CheckMessage]:
    if not engine().one_writer or not _ledger_ready():
        return []
    try:
        since = timezone.now() - SCHEDULER_RECENT
        recent = list(
            SchedulerState.objects.filter(last_tick_at__gte=since).values_list(
                "name", "started_at", "last_tick_at"
            )
        )
    except DatabaseError:
        return []
    # A scheduler restarted (or run with --once, one after another) is not two at once: only
    # those whose lives overlap are.
    running = {
        name
        for name, started, last in recent
        for other, other_started, other_last in recent
        if other != name and started <= other_last and other_started <= last
    }
    if len(running) <= 1:
        return []
    return [
        Warning(
            f"{len(running)} schedulers ticked on SQLite in the last five minutes "
            f"({', '.join(sorted(running))}): SQLite serialises every claim, so they only "
            "wait for each other, and it is meant for one host.",
            hint="Run one scheduler on SQLite, or move the ledger to PostgreSQL for several.",
            id="scheduling.W004",
        )
    ]


@register("scheduling")
def check_job_targets(**_: Any) -> list[CheckMessage]:
    if not _ledger_ready():
        return []
    try:
        tables = set(
            Job.objects.exclude(task_table="").values_list("task_table", flat=True).distinct()
        )
        tasks = set(Job.objects.filter(task_table="").values_list("task", flat=True).distinct())
    except DatabaseError:
        return []
    messages: list[CheckMessage] = []
    for label in sorted(tables):
        try:
            tasktables.get(label)
        except LookupError as exc:
            count = Job.objects.filter(task_table=label).count()
            messages.append(
                Warning(
                    f"{count} job(s) point at task table {label!r}, which is gone: {exc}.",
                    hint=(
                        "Add its app back to INSTALLED_APPS, or delete or pause those jobs "
                        "(manage.py jobs list shows them); their runs fail until then."
                    ),
                    obj=label,
                    id="scheduling.W005",
                )
            )
    if not tasks or is_fallback(celery_app()):
        return messages
    autodiscover_modules("tasks")
    registered = celery_app().tasks
    for name in sorted(tasks):
        task = registered.get(name)
        if task is None or not getattr(task, "schedulable", False):
            messages.append(
                Warning(
                    f"Jobs run task {name!r}, which is "
                    + ("not registered" if task is None else "not schedulable")
                    + " in this project.",
                    hint=(
                        "Install the app that declares it with @schedulable_task, or delete "
                        "or pause those jobs; their runs wait for a process that knows it "
                        "(a rolling deploy) and fail after SCHEDULING_UNKNOWN_TASK_GRACE."
                    ),
                    obj=name,
                    id="scheduling.W006",
                )
            )
    return messages


@register("scheduling")
def check_unconsumed_queues(**_: Any) -> list[CheckMessage]:
    """Jobs whose queue no worker consumes (``overview.unconsumed_queues``): their executions
    wait for ever while every other check, and ``/health/``'s verdict, stays green."""
    if "QUEUE_IDLE_WARN" in conf.refusals() or not _ledger_ready():
        return []
    now = timezone.now()
    try:
        idle = overview.unconsumed_queues(now=now)
    except DatabaseError:
        return []
    return [
        Warning(
            found.describe(now),
            hint=(
                f"Start a worker that consumes it (celery -A yourproject worker -Q "
                f"{found.queue}), or move the jobs to a queue that is consumed; "
                "see docs/operations.md."
            ),
            obj=found.queue,
            id="scheduling.W009",
        )
        for found in idle
    ]


@register("scheduling")
def check_job_queues(**_: Any) -> list[CheckMessage]:
    """Jobs saved before the queue rules (``validation.queue_error``) whose queue they refuse:
    such a job still publishes there (a broker key that is not a queue, a reserved name) until
    someone gives it another queue."""
    if not _ledger_ready():
        return []
    try:
        queues = sorted(set(Job.objects.values_list("queue", flat=True).distinct()))
    except DatabaseError:
        return []
    messages: list[CheckMessage] = []
    for queue in queues:
        reason = queue_error(queue)
        if reason is None:
            continue
        count = Job.objects.filter(queue=queue).count()
        messages.append(
            Warning(
                f"{count} job(s) use the queue {queue!r}, which is refused now: {reason}.",
                hint=(
                    "Give those jobs a queue of letters, digits and . _ : - (manage.py jobs "
                    "edit NAME --queue NEW, or the job's page); see docs/scheduling.md."
                ),
                obj=queue,
                id="scheduling.W010",
            )
        )
    return messages


@register("scheduling")
def check_job_arguments(**_: Any) -> list[CheckMessage]:
    """Jobs whose stored arguments no longer fit their task's parameters (``fit_errors``): the
    task's code changed after they were saved, and each of their runs fails naming why.

    It reads the tasks the jobs still to run name, then the arguments of only those jobs whose
    task can refuse a call (not one taking ``*args, **kwargs``); a task this process does not
    know is W006's to name. Tasks are read from the app's registry as W006 reads them: Celery's
    worker runs these checks while it imports the task modules.
    """
    if not _ledger_ready() or is_fallback(celery_app()):
        return []
    running = Job.objects.filter(task_table="").exclude(status=JobStatus.COMPLETED)
    try:
        names = set(running.values_list("task", flat=True).distinct())
    except DatabaseError:
        return []
    if not names:
        return []
    autodiscover_modules("tasks")
    registered = celery_app().tasks
    checked: dict[str, Any] = {}
    for name in names:
        task = registered.get(name)
        if task is not None and getattr(task, "schedulable", False) and _can_refuse(task):
            checked[name] = task
    if not checked:
        return []
    try:
        rows = list(
            running.filter(task__in=checked)
            .order_by("name", "pk")
            .values_list("name", "owner__username", "task", "args", "kwargs")
        )
    except DatabaseError:
        return []
    messages: list[CheckMessage] = []
    for name, owner, task_name, args, kwargs in rows:
        unfit = fit_errors(checked[task_name], args, kwargs)
        if not unfit:
            continue
        reason = "; ".join(f"{field}: {why}" for field, why in unfit.items())
        messages.append(
            Warning(
                f"Job {name!r} (owner {owner}) runs {task_name} with arguments that no longer "
                f"fit it: {reason}.",
                hint=(
                    "Give the job arguments its task takes (manage.py jobs edit NAME "
                    "--args/--kwargs, or the job's page), or pause it; until then each of "
                    "its runs fails once with this reason."
                ),
                obj=name,
                id="scheduling.W013",
            )
        )
    return messages


def _can_refuse(task: Any) -> bool:
    """Whether some arguments would not fit ``task`` (it does not take ``*args, **kwargs``)."""
    signature = arguments.task_signature(task)
    if signature is None:
        return False
    kinds = {parameter.kind for parameter in signature.parameters.values()}
    return not {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD} <= kinds


@register("scheduling")
def check_awaiting_tasks(**_: Any) -> list[CheckMessage]:
    """Occurrences of a task this process does not know, kept for one that does
    (``overview.awaiting_tasks``): on the old side of a rolling deploy, a process whose
    release lacks the task says so, with the count, until the new side has run them."""
    if "UNKNOWN_TASK_GRACE" in conf.refusals() or not _ledger_ready():
        return []
    if is_fallback(celery_app()):
        return []
    # Not the registry's loader (``registry.get_schedulable``): Celery runs these checks while
    # it loads the task modules, and would run them again from inside. The same modules are
    # imported here directly: the app's ``imports`` and ``include``, and every app's ``tasks``.
    app = celery_app()
    for module in app.loader.default_modules:
        app.loader.import_task_module(module)
    autodiscover_modules("tasks")

    def knows(task: str, table: str) -> bool:
        if table:
            try:
                tasktables.get(table)
            except LookupError:
                return False
            return True
        return bool(getattr(app.tasks.get(task), "schedulable", False))

    try:
        found = overview.awaiting_tasks(knows=knows)
    except DatabaseError:
        return []
    now = timezone.now()
    return [
        Warning(
            each.describe(now) + ".",
            hint=(
                "Finish the deploy: start a scheduler and workers of the release that declares "
                "the task (or install the app that declares it); until then nothing is failed, "
                "and after SCHEDULING_UNKNOWN_TASK_GRACE they fail naming the task "
                "(docs/operations.md, Rolling deploys)."
            ),
            obj=each.task,
            id="scheduling.W011",
        )
        for each in found
        if not each.known_here
    ]


@register("scheduling")
def check_history_periods(**_: Any) -> list[CheckMessage]:
    """The partitioned history (PostgreSQL) has the current period made: schedulers make it
    ahead of time, so its absence means none has run for a while, and the rows of now go to
    the default partition, which retention can only delete row by row."""
    if "HISTORY_PARTITION_DAYS" in conf.refusals() or not _ledger_ready():
        return []
    try:
        if not partitions.is_partitioned():
            return []
        now = timezone.now()
        if any(p.start <= now < p.end for p in partitions.periods()):
            return []
    except DatabaseError:
        return []
    return [
        Warning(
            f"The executions table has no partition for now ({now:%Y-%m-%d %H:%M} UTC): its "
            "rows go to the default partition.",
            hint="Start a scheduler (manage.py runscheduler): it makes the current period and "
            "the next ones within a minute (docs/operations.md, Partitions).",
            id="scheduling.W012",
        )
    ]


@register("scheduling")
def check_mysql_collation(**_: Any) -> list[CheckMessage]:
    """On MySQL and MariaDB the ledger's names compare with case, as on PostgreSQL and SQLite:
    a job named "Backup" beside "backup", a task or queue name told apart by case alone. A
    database made with the server's default collation (``utf8mb4_general_ci``) is not."""
    if not _ledger_ready():
        return []
    try:
        blind = engine().case_blind_columns()
    except DatabaseError:
        return []
    if not blind:
        return []
    first = blind[0]
    return [
        Warning(
            f"{len(blind)} of the ledger's text columns compare without case (such as "
            f"{first['table_name']}.{first['column_name']}, {first['collation']}): names "
            "that differ only in case are one name there.",
            hint="Make the database with CHARACTER SET utf8mb4 COLLATE utf8mb4_bin before "
            "migrating, or convert its tables to that collation (docs/install.md, MySQL and "
            "MariaDB).",
            id="scheduling.W015",
        )
    ]


@register("scheduling")
def check_mysql_clock(**_: Any) -> list[CheckMessage]:
    """The database's own clock stamps heartbeats and claims, and Django stores and compares
    DATETIME columns in UTC on MySQL: a session in another zone would date every heartbeat
    hours off, and live runs would be reaped (or dead ones never)."""
    if not _ledger_ready():
        return []
    try:
        offset = engine().clock_offset()
    except DatabaseError:
        return []
    if offset == 0:
        return []
    return [
        Error(
            f"The database session's clock is {offset:+d} s from UTC: its time_zone is not "
            "UTC, and the ledger's times are UTC.",
            hint="Add time_zone = '+00:00' to the connection's init_command (docs/install.md, "
            "MySQL and MariaDB).",
            id="scheduling.E017",
        )
    ]


@register("scheduling")
def check_mariadb_argument_depth(**_: Any) -> list[CheckMessage]:
    """Arguments the engine's rules accept must be arguments MariaDB keeps: deeper than
    ``Engine.json_depth_limit`` its JSON check refuses the row with an IntegrityError, where
    the rules would have refused it in one line naming the limit."""
    if "ARGS_MAX_DEPTH" in conf.refusals() or not _ledger_ready():
        return []
    try:
        kept = engine().json_depth_limit()
    except DatabaseError:
        return []
    depth = int(conf.get("ARGS_MAX_DEPTH"))
    if kept is None or depth <= kept:
        return []
    return [
        Warning(
            f"SCHEDULING_ARGS_MAX_DEPTH is {depth}, and MariaDB keeps arguments nested "
            f"{kept} levels deep at most: deeper ones that the rules accept "
            "are refused by the database when the job is saved.",
            hint=f"Set SCHEDULING_ARGS_MAX_DEPTH = {kept} (docs/install.md, "
            "MySQL and MariaDB).",
            id="scheduling.W016",
        )
    ]


#: Set while ``check_declarations`` runs: loading the registry runs every check again from
#: inside (Celery's Django fix-up), where this one has nothing to add.
_DECLARATIONS_CHECKING: list[bool] = []


@contextlib.contextmanager
def declarations_reported_here() -> Iterator[None]:
    """Within: ``check_declarations`` reports nothing, for a caller that reports each refused
    entry itself and applies the rest (``manage.py jobs sync``, as a scheduler at start)."""
    _DECLARATIONS_CHECKING.append(True)
    try:
        yield
    finally:
        _DECLARATIONS_CHECKING.pop()


@register("scheduling")
def check_declarations(**_: Any) -> list[CheckMessage]:
    """Every entry of ``beat_schedule`` and ``SCHEDULING_JOBS`` the scheduler would refuse,
    named with its reason: the same validation as the reconciliation's (the option parser of
    ``jobs add``, the timing, the task and its arguments, each field's limits), without the
    database. What only the ledger can tell (an owner, a task-table row) is
    ``jobs sync --check``'s to say."""
    if is_fallback(celery_app()) or _DECLARATIONS_CHECKING:
        return []
    _DECLARATIONS_CHECKING.append(True)
    try:
        # The registry loaded once, as the scheduler loads it; its modules imported without
        # Celery's Django fix-up running every check again.
        registry.load_tasks(run_checks=False)
        autodiscover_modules("tasks")
        refused = declarations.code_refusals(now=timezone.now())
    finally:
        _DECLARATIONS_CHECKING.pop()
    return [
        Error(
            f"{refusal.line}: this job declared in code cannot be expressed, and is not scheduled.",
            hint="Change the entry as the reason says, or remove it; docs/scheduling.md, "
            "Schedules in code.",
            obj=f"{refusal.origin}[{refusal.key!r}]",
            id="scheduling.E014",
        )
        for refusal in refused
    ]
