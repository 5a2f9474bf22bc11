"""Task tables through the API: ``task_table`` declares a model whose rows jobs run, a row's
delete removes its jobs, and ``TaskTableAdmin`` makes the admin's delete confirmation list
those jobs and refuse a user who may not delete them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from django.contrib.admin.utils import NestedObjects
from django.db import router
from django.db.models.signals import post_delete
from django.http import HttpRequest
from django.utils.text import capfirst

from scheduling.api.actors import admin_actor
from scheduling.models import Job
from scheduling.rules import permissions, tasktables
from scheduling.stages import audit as _audit
from scheduling.stages import removals as _removals

R = TypeVar("R", bound=Callable[..., Any])


#: Who is deleting task-table rows in this context (``TaskTableAdmin``'s deletes), for the
#: delete hook that removes their jobs; None: code (``system``).
_deleting_as: ContextVar[_audit.Actor | None] = ContextVar("duecourse_deleting_as", default=None)


@contextmanager
def _deleting(by: _audit.Actor) -> Iterator[None]:
    token = _deleting_as.set(by)
    try:
        yield
    finally:
        _deleting_as.reset(token)


def task_table(
    model: Any,
    *,
    internal: bool = False,
    owner: str | None = None,
    describe: tasktables.RowWords | None = None,
) -> Callable[[R], R]:
    """Declare ``model`` a task table whose rows jobs may run, with the decorated runner.

    ``runner(row, run)`` receives the row (read fresh for every attempt) and a ``RunContext``;
    its return value (JSON) is logged. Deleting a row deletes the jobs that run it and their
    history, so a task stays scheduled exactly as long as it exists.

    A person may point a job at a row when they have the change permission on ``model``;
    ``owner="field"`` (or a lookup such as ``"project__owner"``) narrows that to the row's
    owner, and ``internal=True`` keeps the table for jobs your app's code makes (never one made
    in the admin or for an ``owner``).

    ``describe(rows)`` says what each row is, in words, wherever the engine names a run of it
    (the admin's lists, the dashboard, ``manage.py jobs`` and ``executions``): given a queryset
    of some rows, it returns each row's id with its words, as pairs or a mapping, in one query
    (``rows.select_related(...)``), e.g. ``{t.pk: f"email {t.name!r} of {t.project}" for t in
    rows.select_related("project")}``. Without it a row reads as "verbose name: str(row)".
    A job made with ``schedule_row`` and no ``name`` is named by these words, never by its
    stored ``app.Model:id:n``.
    """

    def declare(runner: R) -> R:
        tasktables.register(model, runner, internal=internal, owner=owner or "", describe=describe)
        post_delete.connect(
            _unschedule_deleted_row, sender=model, weak=False, dispatch_uid=f"duecourse:{model}"
        )
        return runner

    return declare


def _unschedule_deleted_row(sender: Any, instance: Any, **_: Any) -> None:
    by = _deleting_as.get()
    _removals.remove_jobs_for_row(tasktables.label_of(sender), instance.pk, by=by)


class TaskTableAdmin:
    """Mix into the ``ModelAdmin`` of a task table, and of any model whose rows cascade to one.

    Deleting a task-table row deletes the jobs that run it, and their history. Those jobs are
    not linked by a foreign key, so Django's delete confirmation would neither list them nor
    ask whether the user may delete them: a user who may delete the row would take another
    owner's jobs with it. With this mixin first among its bases, the confirmation (the delete
    page and the ``delete_selected`` action alike, on GET and on POST) lists the jobs the user
    may see and is refused, naming "job", unless the user may delete every one of them
    (``scheduling.rules.permissions.may_delete_job``). Jobs of an internal table are the row's app's
    own and go with the row. Each job a delete made here removes (the delete page or
    ``delete_selected``) is in its audit trail by the signed-in user, source ``admin``
    (``admin_actor``), not ``system``.

        @admin.register(Report)
        class ReportAdmin(TaskTableAdmin, admin.ModelAdmin): ...
    """

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        to_delete, model_count, perms_needed, protected = super().get_deleted_objects(  # type: ignore[misc]
            objs, request
        )
        objs = list(objs)
        if not objs:
            return to_delete, model_count, perms_needed, protected
        collector = NestedObjects(using=router.db_for_write(type(objs[0])))
        collector.collect(objs)
        found = permissions.jobs_deleted_with(collector.data)
        if found is None:
            return to_delete, model_count, perms_needed, protected
        going = list(Job.objects.filter(found).order_by("name", "pk"))
        shown = set(
            permissions.visible_jobs(request.user, Job.objects.filter(found)).values_list(
                "pk", flat=True
            )
        )
        meta = Job._meta
        if any(not permissions.may_delete_job(request.user, job) for job in going):
            perms_needed.add(meta.verbose_name)
        listed = [job for job in going if job.pk in shown]
        if listed:
            # Top-level items: a list here would render as the previous item's children.
            to_delete.extend(
                f"{capfirst(meta.verbose_name)}: {job.name} (and its history)" for job in listed
            )
            model_count[meta.verbose_name_plural] = len(listed)
        return to_delete, model_count, perms_needed, protected

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        with _deleting(admin_actor(request)):
            super().delete_model(request, obj)  # type: ignore[misc]

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        with _deleting(admin_actor(request)):
            super().delete_queryset(request, queryset)  # type: ignore[misc]
