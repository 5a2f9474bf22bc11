"""Publishing bookkeeping: which executions' messages reached the broker, and which to send again.

The scheduler publishes after every claim commits; these verbs record the outcome
(``mark_queued``) and find what must be published again (``reclaim_for_publish``): a claim whose
scheduler died before publishing, a message the broker may have lost, a retry that fell due.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Max, Q, Subquery, Value
from django.db.models.functions import Coalesce

from scheduling import conf
from scheduling.ledger.engines import engine
from scheduling.messages.doorbell import Doorbell
from scheduling.models import (
    EXECUTION_STARTABLE,
    Attempt,
    AttemptOutcome,
    Execution,
    ExecutionStatus,
    Job,
)
from scheduling.rules.validation import (
    arguments_error,
    enqueued_error,
    queue_line,
    target_error,
    unknown_target,
)
from scheduling.stages.attempts import await_known_task, fail_attempt

logger = logging.getLogger("scheduling")


def _doorbell(execution: Execution, job: Job | None) -> Doorbell:
    if job is None and execution.call is not None:
        return call_doorbell(execution)
    return Doorbell(
        execution_id=execution.pk,
        task_id=str(execution.task_id),
        task=execution.task,
        args=list(job.args) if job else [],
        kwargs=dict(job.kwargs) if job else {},
        queue=job.queue if job else "celery",
        priority=job.priority if job else None,
        timeout=job.timeout if job else conf.get("DEFAULT_TIMEOUT"),
    )


def call_doorbell(execution: Execution) -> Doorbell:
    """The message of a run enqueued through Django's Tasks framework: all of it is on the row."""
    return doorbell_of_call(
        execution_id=execution.pk,
        task_id=str(execution.task_id),
        task=execution.task,
        call=execution.call or {},
    )


def doorbell_of_call(
    *, execution_id: int, task_id: str, task: str, call: dict[str, Any]
) -> Doorbell:
    return Doorbell(
        execution_id=execution_id,
        task_id=task_id,
        task=task,
        args=list(call.get("args", [])),
        kwargs=dict(call.get("kwargs", {})),
        queue=str(call.get("queue") or "celery"),
        priority=call.get("broker_priority"),
        timeout=int(call.get("timeout") or conf.get("DEFAULT_TIMEOUT")),
    )


def hand_to_scheduler(*, execution_ids: Iterable[int], now: datetime) -> int:
    """QUEUED rows whose message did not reach the broker: PENDING, for the scheduler to send."""
    return engine().hand_back_queued(execution_ids, now=now)


def mark_queued(*, execution_ids: Iterable[int], now: datetime) -> int:
    """Record that the messages of these executions reached the broker.

    On PostgreSQL this commit does not wait for the disk: if the server crashed and lost it,
    the rows would only be PENDING again and published once more, which workers absorb.
    """
    ids = list(execution_ids)
    if not ids:
        return 0
    return engine().mark_queued(execution_ids=ids, now=now)


def requeue_queued(*, now: datetime) -> int:
    """Make every QUEUED execution due for re-publishing now (the broker lost its messages)."""
    stale = now - timedelta(seconds=conf.get("PENDING_GRACE") + 1)
    return engine().requeue_queued(queued_at=stale, now=now)


def doorbells_for(*, execution_ids: Iterable[int]) -> list[Doorbell]:
    """The doorbells of these executions, if they are still waiting to be published."""
    rows = Execution.objects.select_related("job").filter(
        pk__in=list(execution_ids), status=ExecutionStatus.PENDING
    )
    return [_doorbell(row, row.job) for row in rows]


#: Tells how many messages wait in (queue, priority), or None where the broker cannot say.
QueueDepth = Callable[[str, "int | None"], "int | None"]

#: Newest attempts read for the evidence of progress on each queue (``queue_progress``).
PROGRESS_WINDOW = 2000


@dataclass(frozen=True)
class Progress:
    """What the newest attempts say about one queue: when one last started, and the latest
    publish time (``queued_at``) that any of them started from, per message priority."""

    last_start: datetime | None
    newest_started: dict[int | None, datetime]


def queue_progress(*, window: int = PROGRESS_WINDOW) -> dict[str, Progress]:
    """Per queue, the progress shown by the ``window`` newest attempts (a read, by primary key).

    An attempt counts for the publish time of its execution only if it started after that
    publish (``started_at >= queued_at``): it was started by that message or a later one.
    """
    # The window's oldest attempt id, and every attempt from it on: the newest ``window``
    # (every one when there are fewer), said so that MySQL and MariaDB, which take no LIMIT
    # inside IN (...), read it as the others do.
    oldest = Attempt.objects.order_by("-id").values("id")[window - 1 : window]
    rows = (
        Attempt.objects.filter(id__gte=Coalesce(Subquery(oldest), Value(0)))
        .values(
            on_queue=Coalesce("execution__job__queue", Value("celery")),
            on_priority=F("execution__job__priority"),
        )
        .annotate(
            newest=Max("execution__queued_at", filter=Q(started_at__gte=F("execution__queued_at"))),
            last=Max("started_at"),
        )
        .values_list("on_queue", "on_priority", "newest", "last")
    )
    found: dict[str, Progress] = {}
    for queue, priority, newest, last in rows:
        known = found.get(queue) or Progress(None, {})
        if newest is not None:
            known.newest_started[priority] = newest
        if last is not None and (known.last_start is None or last > known.last_start):
            known = Progress(last, known.newest_started)
        found[queue] = known
    return found


@dataclass(frozen=True)
class _Waiting:
    id: int
    queued_at: datetime
    base: datetime
    queue: str
    priority: int | None


def find_lost_messages(
    *, now: datetime, limit: int, queue_depth: QueueDepth | None = None
) -> dict[int, str]:
    """QUEUED executions whose message is probably gone, each with the evidence (a read).

    Age alone is no evidence: a row waiting behind a backlog is older than REQUEUE_AFTER too,
    and publishing it again every REQUEUE_AFTER floods the broker when it is already behind.
    A QUEUED row is taken as lost when it has waited at least REQUEUE_AFTER, and at least as
    long as it had waited before its last publish (so each row's delay doubles: a wrong guess
    costs one extra message per doubling), and one of these holds:

    - ``overtaken``: an execution published to the same queue and priority more than a tick
      after it has started; a FIFO queue hands messages out in order, so ours is gone;
    - ``stalled``: nothing on its queue started within REQUEUE_AFTER (a lost message on a queue
      whose only work was that message; a queue nobody consumes);
    - ``emptied``: the broker says the queue holds no message at all (Redis only; other
      producers may share a queue, so a non-empty queue proves nothing).
    """
    requeue_after = timedelta(seconds=conf.get("REQUEUE_AFTER"))
    waiting = [
        _Waiting(**row)
        for row in Execution.objects.lost(now - requeue_after)  # execution_waiting_idx
        .order_by("queued_at")
        .annotate(
            base=Coalesce("retry_at", "created_at"),
            queue=Coalesce("job__queue", Value("celery")),
            priority=F("job__priority"),
        )
        .values("id", "queued_at", "base", "queue", "priority")[:limit]
    ]
    # The growing delay: wait as long again as the row had waited before its last publish.
    waiting = [w for w in waiting if now - w.queued_at >= max(requeue_after, w.queued_at - w.base)]
    if not waiting:
        return {}
    progress = queue_progress()
    slack = timedelta(seconds=max(1.0, 2 * conf.get("MAX_SLEEP")))
    depths: dict[tuple[str, int | None], int | None] = {}
    lost: dict[int, str] = {}
    for row in waiting:
        seen = progress.get(row.queue, Progress(None, {}))
        newest = seen.newest_started.get(row.priority)
        if newest is not None and newest > row.queued_at + slack:
            lost[row.id] = "overtaken"
        elif seen.last_start is None or now - seen.last_start >= requeue_after:
            lost[row.id] = "stalled"
        elif queue_depth is not None:
            key = (row.queue, row.priority)
            if key not in depths:
                depths[key] = queue_depth(*key)
            if depths[key] == 0:
                lost[row.id] = "emptied"
    return lost


def send_error(execution: Execution, targets: dict[tuple[Any, ...], str]) -> str:
    """Why this execution's message must not be published, or "" (``targets`` caches).

    The claim's checks, on the values the message would carry: the execution's task (with
    its job's task-table row), the job's arguments, then its queue.
    """
    job = execution.job
    if job is None and execution.call is not None:
        return enqueued_error(execution.task)
    key = (
        execution.task,
        job.task_table if job else "",
        job.task_row_id if job else None,
    )
    if key not in targets:
        targets[key] = target_error(task=key[0], task_table=key[1], task_row_id=key[2])
    if targets[key]:
        return targets[key]
    if job is None:
        return ""
    return arguments_error(job.args, job.kwargs) or queue_line(job.queue)


def reclaim_for_publish(
    *, now: datetime, limit: int, queue_depth: QueueDepth | None = None
) -> list[Doorbell]:
    """Take back executions whose message must be published (again).

    - PENDING past the grace: a scheduler died between its commit and its publish.
    - QUEUED whose message is probably lost (``find_lost_messages``: evidence, not age).
    - RETRY whose retry_at has passed: the next attempt is due.

    Each row is moved to PENDING with a fresh ``queued_at`` under SKIP LOCKED, so concurrent
    schedulers do not publish the same row in the same tick. A row the claim would have
    refused is failed instead, with the claim's own line naming the field (``send_error``):
    its task is not (or no longer) a schedulable task, its task-table row is gone, or its
    job's ``args`` or ``kwargs`` has the wrong JSON type (written behind the model).
    """
    pending_before = now - timedelta(seconds=conf.get("PENDING_GRACE"))
    lost = find_lost_messages(now=now, limit=limit, queue_depth=queue_depth)
    bad: dict[int, str] = {}
    awaiting: dict[int, str] = {}
    targets: dict[tuple[Any, ...], str] = {}
    with transaction.atomic(durable=True):
        rows = engine().lock_republishable(
            pending_before=pending_before, now=now, lost=lost, limit=limit
        )
        if not rows:
            return []
        for row in rows:
            unknown = unknown_target(
                task=row.task,
                task_table=row.job.task_table if row.job else "",
                enqueued=row.job is None,
            )
            if unknown:  # left for a process that knows it (``attempts.await_known_task``)
                awaiting[row.pk] = unknown
                continue
            error = send_error(row, targets)
            if error:
                bad[row.pk] = error
                continue
            logger.info(
                "execution.republished execution=%s status=%s retry_count=%s evidence=%s",
                row.pk,
                row.status,
                row.retry_count,
                lost.get(row.pk, "-"),
            )
        good = [row for row in rows if row.pk not in bad and row.pk not in awaiting]
        engine().mark_pending([r.pk for r in good], now=now)
    for execution_id, target in awaiting.items():
        await_known_task(execution_id=execution_id, target=target, now=now, who="this scheduler")
    for execution_id, error in bad.items():
        logger.error("execution.failed execution=%s error=%s", execution_id, error)
        fail_attempt(
            execution_id=execution_id,
            error=error,
            outcome=AttemptOutcome.FAILED,
            now=now,
            permanent=True,
            from_statuses=EXECUTION_STARTABLE,
        )
    return [_doorbell(row, row.job) for row in good]
