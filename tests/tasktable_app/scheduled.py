"""The test app's declaration, exactly as a domain app makes one."""

from __future__ import annotations

import functools
from typing import Any

from django.db import transaction

from scheduling.api import PermanentError, RunContext, schedulable_task, task_table
from tests.tasktable_app.models import Chore, ChoreBatch, TeamChore


def describe_chores(rows: Any) -> dict[int, str]:
    """How a chore's runs read in the engine's lists, as its app declares it."""
    return {chore.pk: f"chore {chore.name!r}" for chore in rows}


@task_table(Chore, describe=describe_chores)
def run_chore(chore: Chore, run: RunContext) -> dict[str, Any]:
    """Record what the run context says, save a checkpoint, and fail as often as asked."""
    entry = {
        "execution_id": run.execution_id,
        "job_id": run.job_id,
        "scheduled_for": run.scheduled_for.isoformat(),
        "attempt": run.attempt,
        "checkpoint": run.checkpoint,
    }
    with transaction.atomic():
        locked = Chore.objects.select_for_update().get(pk=chore.pk)
        locked.runs = [*locked.runs, entry]
        locked.save(update_fields=["runs"])
    run.progress({"attempt": run.attempt})
    if chore.name == "permanent":
        raise PermanentError("this chore can never succeed")
    if run.attempt <= chore.fail_first:
        raise RuntimeError(f"failing attempt {run.attempt} of {chore.fail_first}")
    return {"attempt": run.attempt}


@task_table(TeamChore, owner="owner")
def run_team_chore(chore: TeamChore, run: RunContext) -> dict[str, Any]:
    return {"chore": chore.name}


@task_table(ChoreBatch, internal=True)
def run_chore_batch(batch: ChoreBatch, run: RunContext) -> dict[str, Any]:
    return {"batch": batch.name}


@schedulable_task(name="tasktable_app.remind_team", permission="tasktable_app.send_reminders")
def remind_team() -> str:
    """A task only users with the ``send_reminders`` permission may schedule."""
    return "reminded"


def with_ledger_client(fun: Any) -> Any:
    """A decorator that hands the body a client: the task is called with ``ledger`` alone."""

    @functools.wraps(fun)
    def wrapper(ledger: str) -> Any:
        return fun(f"client-for-{ledger}", ledger)

    return wrapper


@schedulable_task(name="tasktable_app.close_ledger")
@with_ledger_client
def close_ledger(client: str, ledger: str) -> str:
    """A task whose wrapper, not its body, says what a call takes (as Celery checks it)."""
    return f"{client} closed {ledger}"
