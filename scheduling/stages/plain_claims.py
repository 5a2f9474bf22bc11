"""The plain claim: which due rows the ledger's locking statement may plan itself.

On PostgreSQL ``lock_due`` plans and writes the common case in its own statement (an
interval job due once, moved one interval on); ``sql_planning`` hands it the conditions, each
decided here in Python, and ``claims`` plans every other row. What an interval text means is
read once, in Python (``schedules.parse_duration``), and the statement only adds the steps
this process has read (``STEPS``); the specification tests check the statement against
``claim_plans.plan_claim`` case by case.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduling.models import Overlap
from scheduling.rules import arguments
from scheduling.rules.registry import schedulable_names
from scheduling.rules.tasktables import TASK_ROW_TASK
from scheduling.rules.validation import (
    MAX_QUEUE,
    RESERVED_QUEUE_PREFIXES,
    RESERVED_QUEUE_SUFFIXES,
    RESERVED_QUEUES,
)
from scheduling.stages import waiting
from scheduling.timing.schedules import Misfire

# The rows ``lock_due`` plans have every time within these bounds: far from the ends of
# the calendar, where Python cannot read a time and a step could run past the year 9999.
PLANNED_EARLIEST = datetime(1000, 1, 1, tzinfo=UTC)
PLANNED_LATEST = datetime(9000, 1, 1, tzinfo=UTC)
# The longest interval planned in SQL, in microseconds (142 years): PostgreSQL multiplies an
# interval in double precision, exact for whole numbers below 2**53.
MAX_PLANNED_STEP = 2**52
# Distinct interval texts remembered; a process meeting more plans the others in Python.
MAX_KNOWN_STEPS = 1000


class Steps:
    """Interval texts this process has read (``schedules.parse_duration``), in microseconds.

    ``lock_due`` plans a job only when its schedule's interval text is here, so what an
    interval means is decided in one place, Python, and SQL only adds it. The claim learns a
    text the first time it plans a row with it in Python (a new interval's first batch goes
    that way). Read by every flood lane at once: a new text replaces the whole JSON document,
    never edits it in place.
    """

    def __init__(self) -> None:
        self.known: dict[str, int] = {}
        self.text = "{}"
        self._lock = threading.Lock()

    def learn(self, interval: str, step: timedelta) -> None:
        """Remember that ``interval`` (a schedule's stored text) parses to ``step``."""
        micros = step // timedelta(microseconds=1)
        if interval in self.known or not 0 < micros <= MAX_PLANNED_STEP:
            return
        with self._lock:
            if interval not in self.known and len(self.known) < MAX_KNOWN_STEPS:
                self.known = {**self.known, interval: micros}
                self.text = json.dumps(self.known)


#: What this process has read, handed to ``lock_due`` (replaced whole by the tests).
STEPS = Steps()


def sql_planning(now: datetime, grace: timedelta) -> dict[str, Any]:
    """The conditions under which the ledger's locking statement plans a job itself.

    Those of the plain claim: an interval schedule whose step this process has already read
    (``STEPS``), in UTC, without cron, instant, jitter or task table, a schedulable task,
    ``args`` a list and ``kwargs`` an object well inside their limits, a queue the broker takes
    as it is, every time of the row in the calendar's middle (no 'infinity', no year the
    arithmetic could overflow), its occurrence on the schedule's grid, not after its due time
    and not late (or late under ``catch_up``), and its next occurrence inside the window and,
    with overlap allowed, after ``now``. For such a job ``claim_plans.plan_claim`` runs the
    occurrence alone and moves the job one interval on, ``due_time`` adds no jitter and the
    target and argument checks find nothing: the statement writes exactly what ``claims._plan``
    and ``write_claim`` would, and no row's JSON or times travel through Python.
    """
    return {
        "steps": STEPS.text,
        "tasks": [name for name in schedulable_names() if name != TASK_ROW_TASK],
        "forbid": Overlap.FORBID.value,
        "catch_up": Misfire.CATCH_UP.value,
        "misfires": [policy.value for policy in Misfire],
        # The policies whose plain claim is the one planned here; the others go to Python.
        "overlaps": [Overlap.FORBID.value, Overlap.ALLOW.value],
        "on_time_from": now - grace,
        "earliest": PLANNED_EARLIEST,
        "latest": PLANNED_LATEST,
        "max_step": MAX_PLANNED_STEP,
        **_argument_bounds(),
        "queue_pattern": QUEUE_PATTERN,
        "reserved_queues": RESERVED_QUEUE_LIKE,
        **waiting.sql_bound(),
    }


#: The queue names ``lock_due`` plans itself: ``validation.QUEUE_NAME`` within its
#: length, and none like a name the broker keeps (``_`` is a wildcard in LIKE, so a few good
#: names go to Python too, which decides them exactly with ``validation.queue_error``).
QUEUE_PATTERN = f"^[A-Za-z0-9][A-Za-z0-9._:-]{{0,{MAX_QUEUE - 1}}}$"
RESERVED_QUEUE_LIKE = [
    *(f"{prefix}%" for prefix in RESERVED_QUEUE_PREFIXES),
    *(f"%{suffix}" for suffix in RESERVED_QUEUE_SUFFIXES),
    *sorted(RESERVED_QUEUES),
]


def _argument_bounds() -> dict[str, Any]:
    """Where ``lock_due`` may plan a row's arguments itself: well inside the limits.

    PostgreSQL's text of a value can be shorter than Python's (``1E2`` reads back as ``100``
    there and as ``100.0`` here), so the statement plans only texts under half the size
    limit and leaves the rest to ``_argument_error``; a text of fewer than twice the depth
    limit's characters cannot nest deeper than it. The path finds a list or object at the
    depth limit's level: one level deeper than allowed.
    """
    max_depth, max_bytes = arguments.limits()
    return {
        "planned_bytes": max_bytes // 2,
        "shallow_text": 2 * (max_depth + 1),
        "too_deep": f'strict $.**{{{max_depth}}} ? (@.type() == "object" || @.type() == "array")',
    }
