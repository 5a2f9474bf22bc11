"""Who may point a job at what, and whose jobs a user may see: one answer for every door.

Django's admin convention carried to a job's target: a user may do what their permissions say
and nothing more. The admin form asks here for the choices it offers and again when it is
saved (a crafted POST meets the same rule), and so does an API call that makes a job for an
``owner``.

- A schedulable task is open to anyone who may make jobs, unless its declaration narrows it:
  ``@schedulable_task(superuser_only=True)`` (the engine's maintenance tasks, such as
  ``scheduling.prune_history``, which reach every owner's history) or
  ``@schedulable_task(permission="app_label.codename")``.
- A row of a task table needs the change permission on the table's model and, when the table
  names an owner field (``@task_table(Model, owner="owner")``), to be the row's owner.
- An internal task table (``@task_table(Model, internal=True)``, such as subscriptions' due
  batches) is never the target of a job a person makes; its app's code makes those jobs.

An active superuser passes every rule but the last, as everywhere in Django's admin.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_permission_codename
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from scheduling.rules import registry, tasktables
from scheduling.rules.tasktables import TASK_ROW_TASK


def is_superuser(user: Any) -> bool:
    """An active superuser: the one who passes every permission check."""
    return bool(user.is_active and user.is_superuser)


def model_permission(model: Any, action: str) -> str:
    """``app_label.<action>_<model>``, the permission Django's admin checks for ``action``."""
    meta = model._meta
    return f"{meta.app_label}.{get_permission_codename(action, meta)}"


def task_refusal(user: Any, task_name: str) -> str | None:
    """Why ``user`` may not make a job that calls ``task_name``; None when they may.

    A name that is not a schedulable task is left to the job's validation, which says so.
    """
    try:
        task = registry.get_schedulable(task_name)
    except registry.UnknownTask:
        return None
    if getattr(task, "superuser_only", False):
        return None if is_superuser(user) else f"{task_name!r} is for superusers only"
    needed = getattr(task, "permission", None)
    if needed and not user.has_perm(needed):
        return f"{task_name!r} needs the permission {needed!r}"
    return None


def internal_refusal(label: str) -> str | None:
    """Why no job made by hand (admin, command line) may point at ``label``; None if one may."""
    try:
        table = tasktables.get(label)
    except LookupError:
        return None
    if table.internal:
        return f"{table.label} rows are run by their app's own jobs, never by a job made by hand"
    return None


def table_refusal(user: Any, label: str) -> str | None:
    """Why ``user`` may not point a job at any row of the task table ``label``; None if they may."""
    internal = internal_refusal(label)
    if internal is not None:
        return internal
    try:
        table = tasktables.get(label)
    except LookupError:
        return None
    needed = model_permission(table.model, "change")
    if not user.has_perm(needed):
        return f"a job on {table.label} rows needs the permission {needed!r}"
    return None


def row_refusal(user: Any, label: str, row_id: Any) -> str | None:
    """Why ``user`` may not point a job at row ``row_id`` of ``label``; None when they may.

    Another owner's row is refused in the words the job's validation uses for a missing row
    (which it reports itself), so that the answer does not tell whether the row exists.
    """
    refused = table_refusal(user, label)
    if refused is not None or row_id in (None, ""):
        return refused
    table = tasktables.get(label)
    if not table.owner or is_superuser(user):
        return None
    rows = table.model._default_manager.filter(pk=row_id)
    if not rows.exists() or rows.filter(**{table.owner: user}).exists():
        return None
    return f"no {label} row with id {row_id}"


def targetable_rows(user: Any, label: str) -> QuerySet[Any]:
    """The rows of the task table ``label`` that ``user`` may point a job at, by id: none where
    the table is refused them, else every row, or their own where the table names an owner."""
    table = tasktables.get(label)
    rows = table.model._default_manager.order_by("pk")
    if table_refusal(user, label) is not None:
        return rows.none()
    if table.owner and not is_superuser(user):
        return rows.filter(**{table.owner: user})
    return rows


def target_errors(
    user: Any, *, task: str = "", task_table: str = "", task_row_id: Any = None
) -> dict[str, str]:
    """The refusals for ``user`` making a job with this target, by the field that set it."""
    if task_table:
        refused = table_refusal(user, task_table)
        if refused is not None:
            return {"task_table": refused}
        refused = row_refusal(user, task_table, task_row_id)
        return {} if refused is None else {"task_row_id": refused}
    refused = task_refusal(user, task) if task else None
    return {} if refused is None else {"task": refused}


def check_may_target(
    user: Any, *, task: str = "", task_table: str = "", task_row_id: Any = None
) -> None:
    """Raise ``ValidationError`` naming the field when ``user`` may not make this job."""
    errors = target_errors(user, task=task, task_table=task_table, task_row_id=task_row_id)
    if errors:
        raise ValidationError(errors)


def allowed_task_names(user: Any) -> list[str]:
    """The schedulable tasks ``user`` may make a job call, sorted (rows go by their table)."""
    return [
        name
        for name in registry.schedulable_names()
        if name != TASK_ROW_TASK and task_refusal(user, name) is None
    ]


def allowed_table_labels(user: Any) -> list[str]:
    """The task tables whose rows ``user`` may point a job at, by label."""
    return [
        table.label for table in tasktables.registered() if table_refusal(user, table.label) is None
    ]


def visible_jobs(user: Any, jobs: QuerySet[Any]) -> QuerySet[Any]:
    """``jobs`` narrowed to those ``user`` may see: all for a superuser, else their own, and
    none without the view (or change) permission on jobs."""
    if is_superuser(user):
        return jobs
    model = jobs.model
    if not (
        user.has_perm(model_permission(model, "view"))
        or user.has_perm(model_permission(model, "change"))
    ):
        return jobs.none()
    return jobs.filter(owner=user)


def may_view(user: Any, *models: Any) -> bool:
    """Whether ``user`` may see rows of every one of ``models``: the view or the change
    permission on each, as Django's admin asks before it shows a list."""
    return is_superuser(user) or all(
        user.has_perm(model_permission(model, "view"))
        or user.has_perm(model_permission(model, "change"))
        for model in models
    )


def may_delete_job(user: Any, job: Any) -> bool:
    """Whether ``user`` may delete ``job`` (and its history with it): a superuser, or the
    job's owner with the delete permission on jobs, as the job list's Delete asks."""
    if is_superuser(user):
        return True
    return bool(user.has_perm(model_permission(type(job), "delete")) and job.owner_id == user.pk)


def jobs_deleted_with(rows: dict[Any, Any]) -> Q | None:
    """Which jobs deleting these task-table rows deletes too, as a filter on jobs; None: none.

    ``rows`` maps a model to the instances about to be deleted (a deletion collector's
    ``data``: the rows named and everything they cascade to). A job runs a row by its table and
    id, not by a foreign key, so Django's own deletion never lists it; ``scheduling.api``'s
    ``post_delete`` hook removes it after the row is gone. Jobs of an internal table are the
    row's app's own and go with the row.
    """
    found: Q | None = None
    for model, instances in rows.items():
        concrete = model._meta.concrete_model  # a proxy's rows are its table's rows
        try:
            table = tasktables.get(tasktables.label_of(concrete))
        except LookupError:
            continue
        if table.internal or table.model._meta.concrete_model is not concrete:
            continue
        ids = [row.pk for row in instances]
        if ids:
            clause = Q(task_table=table.label, task_row_id__in=ids)
            found = clause if found is None else found | clause
    return found
