"""Celery tasks of the scheduling app (diagnostics are in ``scheduling.diagnostics``)."""

from __future__ import annotations

from typing import Any

from scheduling import diagnostics  # noqa: F401  (registers the diagnostic tasks)
from scheduling.registry import PermanentError, schedulable_task


@schedulable_task(name="scheduling.run_task_row", bind=True)
def run_task_row(self: Any) -> Any:
    """Run the task-table row a job points at (seed 000's TaskTable + TaskId)."""
    from scheduling.models import Execution
    from scheduling.validation import task_row_model

    if self.execution_id is None:
        raise PermanentError("run_task_row runs only for a job's execution")
    execution = Execution.objects.select_related("job").get(pk=self.execution_id)
    job = execution.job
    if job is None or not job.task_table:
        raise PermanentError("the job has no task-table target")
    try:
        model = task_row_model(job.task_table)
    except LookupError as exc:
        raise PermanentError(f"task_table: {exc}") from None
    row = model._default_manager.filter(pk=job.task_row_id).first()
    if row is None:
        raise PermanentError(f"task_row_id: no {job.task_table} row with id {job.task_row_id}")
    return row.run_scheduled(execution=execution, task=self)
