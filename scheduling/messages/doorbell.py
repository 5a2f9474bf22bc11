"""The doorbell: the one message the engine publishes for an execution, and what it carries.

A message only rings the bell; the row is the truth. Whoever publishes (the scheduler after a
claim, the outbox after an enqueue, the republish of a lost message) hands the publisher
(``scheduling.scheduler.publisher``) a ``Doorbell`` made from the execution's row, and the
worker that receives it reads the row again before it runs anything
(``scheduling.worker.runtime.begin``). The Celery task id is the execution's ``task_id``, so a
message published twice names the same run, and the start refuses the second.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Doorbell:
    """Everything needed to publish the message for one execution."""

    execution_id: int
    task_id: str
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    priority: int | None
    timeout: int
