"""The worker side of an attempt: begin it from the task, end it from the signals.

``begin`` runs in ``ScheduledTask.before_start`` (inside Celery's trace, where raising
``Ignore`` acknowledges a duplicate message without running the body); the receivers in
``scheduling.signals`` record how the attempt ended.
"""

from __future__ import annotations

import os
from typing import Any

from django.db import close_old_connections
from django.utils import timezone

from scheduling import conf, services
from scheduling.heartbeats import heartbeat
from scheduling.registry import EXECUTION_HEADER


def execution_id_of(request: Any) -> int | None:
    """The execution id a message carries in its headers, if any."""
    value = getattr(request, EXECUTION_HEADER, None)
    if value is None:
        headers = getattr(request, "headers", None) or {}
        value = headers.get(EXECUTION_HEADER)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def begin(task: Any) -> bool:
    """Start the attempt this message asks for; False means: acknowledge and skip the body."""
    request = task.request
    close_old_connections()
    now = timezone.now()
    worker = request.hostname or ""
    execution_id = execution_id_of(request)
    if execution_id is None:
        if request.is_eager or not conf.get("RECORD_ADHOC") or not request.id:
            return True
        started = services.record_adhoc_start(
            task=task.name, task_id=request.id, worker=worker, pid=os.getpid(), now=now
        )
    else:
        started = services.start_execution(
            execution_id=execution_id, worker=worker, pid=os.getpid(), now=now
        )
    if started is None:
        return False
    request.duecourse_execution_id = started.execution_id
    request.duecourse_checkpoint = started.checkpoint
    heartbeat.track(started.execution_id)
    return True


def end(execution_id: int) -> None:
    heartbeat.untrack(execution_id)
