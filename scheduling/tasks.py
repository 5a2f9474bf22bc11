"""Celery tasks of the scheduling app (diagnostics are in ``scheduling.diagnostics``)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from scheduling import diagnostics  # noqa: F401  (registers the diagnostic tasks)
from scheduling.rules import tasktables
from scheduling.rules.registry import CELERY_TASK_RUNNER, PermanentError
from scheduling.rules.tasktables import TASK_ROW_TASK
from scheduling.rules.validation import first_error as error_line
from scheduling.rules.validation import fit_errors
from scheduling.stages import retention, selectors
from scheduling.worker.taskbase import schedulable_task


@schedulable_task(name=TASK_ROW_TASK, bind=True, superuser_only=True)
def run_task_row(self: Any) -> Any:
    """Run the task-table row a job points at with the runner its table registered.

    The row is read fresh for every attempt and handed to the runner its table registered,
    with the attempt's ``RunContext``.
    """
    run = self.run_context
    if run is None:
        raise PermanentError("run_task_row runs only for a job's execution")
    target = selectors.task_row_target(run.execution_id)
    if target is None:
        raise PermanentError("the job has no task-table target")
    label, row_id = target
    try:
        table = tasktables.get(label)
    except LookupError as exc:
        raise PermanentError(f"task_table: {exc}") from None
    row = table.model._default_manager.filter(pk=row_id).first()
    if row is None:
        raise PermanentError(f"task_row_id: no {label} row with id {row_id}")
    return table.runner(row, run)


# Superusers only: a job made by a person names a schedulable task; only the code declares
# jobs that run any task of the project's Celery app (``scheduling.stages.declarations``).
@schedulable_task(name=CELERY_TASK_RUNNER, bind=True, superuser_only=True)
def run_celery_task(self: Any, *args: Any, **kwargs: Any) -> Any:
    """Run the plain Celery task a declared job names (``Job.declared_task``), in this attempt.

    Its body runs here, inside this attempt, so the ledger records the execution like any
    other (start, end, retries under the job's policy, history). What Celery's own
    ``apply_async`` would add around the body (the task's own retry options, ``rate_limit``,
    its routing) does not apply: the job's policies and queue do.
    """
    run = self.run_context
    if run is None:
        raise PermanentError("run_celery_task runs only for a job's execution")
    name = selectors.declared_target(run.execution_id)
    task = self.app.tasks.get(name) if name else None
    if task is None:
        raise PermanentError(f"task: {name or 'none'!r} is not a registered Celery task")
    unfit = fit_errors(task, list(args), kwargs)
    if unfit:
        raise PermanentError("; ".join(f"{f}: {r}" for f, r in unfit.items()))
    return task(*args, **kwargs)


# Superusers only: it trims every owner's history, not the job owner's.
@schedulable_task(name="scheduling.prune_history", bind=True, superuser_only=True)
def prune_history(
    self: Any,
    older_than: str = "30d",
    keep_last: int = 10,
    batch_size: int = 1000,
    max_seconds: float = 240.0,
    partitions_only: bool = False,
) -> dict[str, Any]:
    """Trim the execution history as a job of its own (``manage.py prune_history`` as a task).

    ``max_seconds`` stays under the default 300 s job timeout; what is left goes next time.
    """
    # Arguments of the wrong type or out of range: no retry can fix them; fail once, naming
    # the argument.
    try:
        numbers = {"keep_last": int(keep_last), "batch_size": int(batch_size)}
        seconds = float(max_seconds)
    except (TypeError, ValueError) as exc:
        raise PermanentError(f"keep_last, batch_size, max_seconds: {exc}") from None
    try:
        report = retention.prune_history(
            older_than=retention.parse_age(older_than),
            now=timezone.now(),
            max_seconds=seconds,
            partitions_only=bool(partitions_only),
            **numbers,
        )
    except ValidationError as exc:
        raise PermanentError(error_line(exc)) from None
    return report.as_dict(retention.job_names(list(report.by_job)))
