"""Registered task tables: the allowlist of models whose rows jobs may run.

A domain app declares, in its own ``scheduled`` module, which of its models are task tables and
which function runs a row (``scheduling.api.task_table``). ``SchedulingConfig.ready`` imports
every installed app's ``scheduled`` module, so the registry is complete before the first job is
validated, claimed or run. Only a registered model can be a job's ``task_table``: a model that
happens to have a method of some name is not enough, just as a Celery task must be declared
with ``@schedulable_task`` before a job may target it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

#: The Celery task that runs a task-table row (``scheduling.tasks.run_task_row``).
TASK_ROW_TASK = "scheduling.run_task_row"


#: A task table's own words for its rows: given a queryset of some of them, each row's id
#: and a few words that say which row it is ("email \"welcome\" of project Acme"). Given the
#: queryset, not one row, so a page of runs costs the domain app one query, not one per row.
RowWords = Callable[[Any], Iterable[tuple[Any, str]] | Mapping[Any, str]]

#: The longest description of a row the engine shows; a longer one ends in "…".
MAX_ROW_WORDS = 200


@dataclass(frozen=True)
class TaskTable:
    """One registered task table: its label (``app_label.Model``), model and runner.

    ``internal`` tables (subscriptions' due batches) are run only by jobs their app's code
    makes, never by a job made by hand; ``owner`` names the field (a lookup path such as
    ``project__owner`` is allowed) holding the user a row belongs to, so that only its owner
    may point a job at it (``scheduling.rules.permissions``). ``describe`` is how its rows
    read in the engine's lists (``describe_rows``).
    """

    label: str
    model: Any
    runner: Callable[..., Any]
    internal: bool = False
    owner: str = ""
    describe: RowWords | None = None


_tables: dict[str, TaskTable] = {}


def label_of(model: Any) -> str:
    """``app_label.ModelName``, the spelling jobs store in ``task_table``."""
    return f"{model._meta.app_label}.{model.__name__}"


def register(
    model: Any,
    runner: Callable[..., Any],
    *,
    internal: bool = False,
    owner: str = "",
    describe: RowWords | None = None,
) -> TaskTable:
    """Allow jobs to run rows of ``model`` with ``runner(row, run)``.

    Registering the same model twice with another runner is a programming error, refused so
    that two apps cannot silently fight over one table; so is an ``owner`` the model lacks.
    """
    if owner:
        model._meta.get_field(owner.split("__")[0])  # FieldDoesNotExist names the mistake
    label = label_of(model)
    known = _tables.get(label)
    if known is not None and known.runner is not runner:
        raise ValueError(
            f"task table {label} is already registered to "
            f"{known.runner.__module__}.{known.runner.__qualname__}"
        )
    table = TaskTable(
        label=label,
        model=model,
        runner=runner,
        internal=internal,
        owner=owner,
        describe=describe,
    )
    _tables[label] = table
    return table


def get(label: str) -> TaskTable:
    """The registered task table ``label``, or LookupError saying why it is not one."""
    table = _tables.get(label)
    if table is not None:
        return table
    for known in _tables.values():
        if known.label.lower() == (label or "").lower():
            return known
    if "." not in (label or ""):
        raise LookupError(f"{label!r} is not a task table (use app_label.ModelName)")
    choices = ", ".join(sorted(_tables)) or "none are registered"
    raise LookupError(f"{label!r} is not a registered task table (registered: {choices})")


def describe_rows(label: str, row_ids: Collection[Any]) -> dict[Any, str]:
    """The rows ``row_ids`` of the task table ``label`` in words, by id, as the table's app
    declared them (``@task_table(Model, describe=...)``), else as "verbose name: str(row)".

    Rows that no longer exist, and tables no longer registered, are left out: the caller keeps
    the job's own name for them. One query for the rows (the app's ``describe`` may add its
    own), whatever their number.
    """
    try:
        table = get(label)
    except LookupError:
        return {}
    if not row_ids:
        return {}
    rows = table.model._default_manager.filter(pk__in=list(row_ids))
    if table.describe is not None:
        found = table.describe(rows)
        pairs = found.items() if isinstance(found, Mapping) else found
    else:
        name = table.model._meta.verbose_name
        pairs = ((row.pk, f"{name}: {row}") for row in rows)
    return {pk: _bounded(" ".join(str(words).split())) for pk, words in pairs}


def _bounded(words: str) -> str:
    return words if len(words) <= MAX_ROW_WORDS else words[: MAX_ROW_WORDS - 1] + "…"


def registered() -> list[TaskTable]:
    """Every registered task table, by label."""
    return [_tables[label] for label in sorted(_tables)]


def internal_jobs() -> Q:
    """The jobs that the engine made for a domain app on its own: those that run a row of an
    internal table (``@task_table(Model, internal=True)``: subscriptions' due batches).

    The job and schedule lists and the dashboard's job panels leave them out by default; their
    runs stay in the history, and ``prune_history`` removes them once they are finished.
    """
    return Q(task_table__in=[label for label in sorted(_tables) if _tables[label].internal])
