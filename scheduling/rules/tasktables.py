"""Registered task tables: the allowlist of models whose rows jobs may run.

A domain app declares, in its own ``scheduled`` module, which of its models are task tables and
which function runs a row (``scheduling.api.task_table``). ``SchedulingConfig.ready`` imports
every installed app's ``scheduled`` module, so the registry is complete before the first job is
validated, claimed or run. Only a registered model can be a job's ``task_table``: a model that
happens to have a method of some name is not enough, just as a Celery task must be declared
with ``@schedulable_task`` before a job may target it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

#: The Celery task that runs a task-table row (``scheduling.tasks.run_task_row``).
TASK_ROW_TASK = "scheduling.run_task_row"


@dataclass(frozen=True)
class TaskTable:
    """One registered task table: its label (``app_label.Model``), model and runner.

    ``internal`` tables (subscriptions' due batches) are run only by jobs their app's code
    makes, never by a job made by hand; ``owner`` names the field (a lookup path such as
    ``project__owner`` is allowed) holding the user a row belongs to, so that only its owner
    may point a job at it (``scheduling.rules.permissions``).
    """

    label: str
    model: Any
    runner: Callable[..., Any]
    internal: bool = False
    owner: str = ""


_tables: dict[str, TaskTable] = {}


def label_of(model: Any) -> str:
    """``app_label.ModelName``, the spelling jobs store in ``task_table``."""
    return f"{model._meta.app_label}.{model.__name__}"


def register(
    model: Any, runner: Callable[..., Any], *, internal: bool = False, owner: str = ""
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
    table = TaskTable(label=label, model=model, runner=runner, internal=internal, owner=owner)
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
