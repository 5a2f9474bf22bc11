"""Schedulable tasks for smoke tests and demos: do nothing, sleep, fail."""

from __future__ import annotations

import logging
import time
from typing import Any

from scheduling.rules.registry import PermanentError
from scheduling.worker.taskbase import schedulable_task

logger = logging.getLogger("scheduling")


@schedulable_task(name="scheduling.diagnostics.noop", bind=True)
def noop(self: Any, *args: Any, **kwargs: Any) -> str:
    """Return at once; proves the path from due row to worker and back."""
    return "ok"


@schedulable_task(name="scheduling.diagnostics.sleep", bind=True)
def sleep(self: Any, seconds: float = 1.0) -> float:
    """Sleep ``seconds``; useful to see heartbeats, timeouts and overlap at work."""
    deadline = time.monotonic() + float(seconds)
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.5))
    return float(seconds)


@schedulable_task(name="scheduling.diagnostics.fail", bind=True)
def fail(self: Any, message: str = "diagnostic failure", permanent: bool = False) -> None:
    """Raise an error so retries and the failure history can be watched."""
    if permanent:
        raise PermanentError(message)
    raise RuntimeError(message)


@schedulable_task(name="scheduling.diagnostics.steps", bind=True)
def steps(self: Any, count: int = 3, seconds: float = 1.0) -> list[int]:
    """A multi-step task that checkpoints after each step and resumes after the last one done."""
    done: list[int] = list((self.checkpoint or {}).get("done", []))
    for step in range(len(done) + 1, int(count) + 1):
        time.sleep(float(seconds))
        done.append(step)
        self.save_checkpoint({"done": done})
        logger.info("diagnostics.step execution=%s step=%s", self.execution_id, step)
    return done
