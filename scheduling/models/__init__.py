"""The ledger's tables: schedules, jobs, executions and their attempts, the engine's counters and
the audit trail.

Every occurrence of a job is an Execution row, unique on ``(job, scheduled_for)``; the broker
only carries doorbells that point at these rows. State changes are compare-and-set updates in
``scheduling.stages``; the models hold the shapes, the rules of valid input (``clean``) and the
indexes, each of which names the query that needs it. One module per table and what belongs
to it; every name is exported here, so ``scheduling.models.Job`` is where it always was.
"""

from scheduling.models.audit import ChangeSource, JobChange, JobChangeAction
from scheduling.models.counters import DropKind, MessageDrops, SchedulerState, SettledHour
from scheduling.models.executions import (
    EXECUTION_FINISHED,
    EXECUTION_STARTABLE,
    EXECUTION_UNFINISHED,
    Attempt,
    AttemptOutcome,
    Execution,
    ExecutionQuerySet,
    ExecutionStatus,
)
from scheduling.models.jobs import (
    JOB_POLICY_FIELDS,
    OVERLAP_BACKLOG,
    OVERLAP_HOLDS,
    DeclarationSet,
    DeclaredIn,
    Job,
    JobStatus,
    Overlap,
    PauseKind,
    job_due_index,
)
from scheduling.models.schedules import Schedule

__all__ = [
    "EXECUTION_FINISHED",
    "EXECUTION_STARTABLE",
    "EXECUTION_UNFINISHED",
    "JOB_POLICY_FIELDS",
    "OVERLAP_BACKLOG",
    "OVERLAP_HOLDS",
    "Attempt",
    "AttemptOutcome",
    "ChangeSource",
    "DeclarationSet",
    "DeclaredIn",
    "DropKind",
    "Execution",
    "ExecutionQuerySet",
    "ExecutionStatus",
    "Job",
    "JobChange",
    "JobChangeAction",
    "JobStatus",
    "MessageDrops",
    "Overlap",
    "PauseKind",
    "Schedule",
    "SchedulerState",
    "SettledHour",
    "job_due_index",
]
