"""A job removed: its row and history deleted, its audit trail kept.

A job the code declares is refused here (``removal_refusal``): the next reconciliation would
make it again, its history lost. The stage decides and writes the trail's ``removed`` row;
the ledger's engine deletes (``remove_job``, ``drop_unused_schedule``).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from scheduling.ledger.engines import engine
from scheduling.models import Job, JobChangeAction
from scheduling.stages import audit, jobs
from scheduling.stages.audit import Actor

logger = logging.getLogger("scheduling")


def removal_refusal(job: Job) -> str:
    """Why a job the code declares cannot be removed here, naming the setting and the key."""
    return (
        f"is declared in code; remove the entry from "
        f"{jobs.declaring_setting(job)}[{job.declared_key!r}] and run jobs sync: its job is then "
        "paused, its history kept"
    )


def remove_job(
    *, job: Job, now: datetime | None = None, by: Actor | None = None, row_gone: bool = False
) -> None:
    """Delete the job, its history (by cascade) and its schedule when nothing else uses it.

    Its audit trail stays: a ``removed`` row (with ``by``, code when None) is written first,
    and the deletion empties the rows' link to the job, which keep its name. A job the code
    declares is refused (``removal_refusal``): the next reconciliation would make it again,
    its history lost; only the deletion of the task-table row it runs (``row_gone``) takes it.
    """
    if job.declared and not row_gone:
        raise ValidationError({"name": removal_refusal(job)})
    job_id = job.pk
    with transaction.atomic():
        schedule = job.schedule
        audit.record(
            job=job,
            action=JobChangeAction.REMOVED,
            by=by or audit.CODE,
            now=now or timezone.now(),
            changes={"status": {"from": job.status, "to": None}},
        )
        engine().remove_job(job)
        jobs.drop_if_unused(schedule, owner_id=job.owner_id)
    logger.info("job.removed job=%s", job_id)


def remove_jobs_for_row(task_table: str, task_row_id: int, *, by: Actor | None = None) -> int:
    """Delete every job that runs the row (and, by cascade, their history), each removal a
    row of its trail by ``by`` (code when None)."""
    removed = 0
    for job in Job.objects.select_related("schedule").filter(
        task_table=task_table, task_row_id=task_row_id
    ):
        remove_job(job=job, by=by, row_gone=True)
        removed += 1
    return removed
