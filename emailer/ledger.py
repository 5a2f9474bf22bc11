"""The emailer's ledger: every hand-written statement of the app, each beside its function.

A run costs two statements per chunk, not two per message, and the ORM cannot say either of
them: ``claim_chunk`` selects the next due participants *and* marks them sending in one INSERT
(the unique key (task, participant, occurrence) makes a second run that races for the same
people insert nothing), and ``record_chunk`` marks each of them sent, failed or deferred in
one UPDATE. Both commit at once (autocommit), so a crash leaves at most the chunk in flight in
``sending``. Keeping every such statement here, run through the engine's ``ledger`` runner,
means one place to read when the delivery table changes, and one rule for all of them: named
parameters only, the SQLite form (the embedded default) beside the PostgreSQL one, rows read
by column name, and the database decided by the runner, never by this app.

Lists travel as one JSON parameter (``json_array_elements_text`` / ``json_to_recordset`` on
PostgreSQL, ``json_each`` on SQLite), so each statement has one fixed text whatever the chunk.

Functions:

- ``claim_chunk``: mark the next due participants ``sending`` for a run; what it now owns.
- ``has_due``: whether anyone after a participant id is still due.
- ``record_chunk``: each delivery's outcome, in one UPDATE.
- ``release``: give back claimed deliveries never handed to the server.
- ``recover_run``: a dead attempt's ``sending`` rows become ``uncertain``.
- ``count_run``: a run's deliveries per state.
- ``unsubscribed_among``: which participants have unsubscribed (an ORM read).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from emailer.models import DELIVERED_STATES, Delivery, DeliveryState, Participant
from emailer.text import one_line
from scheduling.api import ledger

_D = Delivery._meta.db_table
_P = Participant._meta.db_table


@dataclass(frozen=True)
class Selection:
    """Who a run of a task mails for one occurrence."""

    task_id: int
    project_id: int
    occurrence: datetime
    statuses: Sequence[str]
    once_per_participant: bool
    resend_uncertain: bool

    def params(self, *, after: int) -> dict[str, Any]:
        """The parameters of the due-participant condition (``_due``), for ids above ``after``.

        The condition's shape never changes with the task: a task that mails every status says
        so with ``every_status``, a one-time task with ``once`` (and ``blocking``, the states
        that mean "has had this task's mail"), and a task that resends uncertain messages with
        ``reclaim`` (its uncertain rows of this occurrence do not count as mailed).
        """
        blocking = [str(s.value) for s in DELIVERED_STATES]
        if not self.resend_uncertain:
            blocking.append(str(DeliveryState.UNCERTAIN.value))
        return {
            "task": self.task_id,
            "project": self.project_id,
            "occ": self.occurrence,
            "after": after,
            "every_status": not self.statuses,
            "statuses": json.dumps([str(s) for s in self.statuses]),
            "once": self.once_per_participant,
            "blocking": json.dumps(blocking),
            "reclaim": DeliveryState.UNCERTAIN.value if self.resend_uncertain else "",
        }


@dataclass(frozen=True)
class Claimed:
    """One delivery a run now owns, with what rendering its message needs."""

    delivery_id: int
    participant_id: int
    email: str
    name: str
    status: str
    tries: int


@dataclass(frozen=True)
class Outcome:
    delivery_id: int
    state: str
    reply: str = ""
    tries: int = 1


def _due(*, statuses: str, blocking: str) -> str:
    """The due-participant condition on ``p``, given each database's "member of this list".

    "Has had this mail" is a scalar subquery with LIMIT, not NOT EXISTS, on purpose: the
    planner cannot turn it into an anti join, so it is always one probe of the unique index
    (task, participant, occurrence) per candidate. As NOT EXISTS, a ledger table without
    statistics yet (a first big run) was planned as a join that scanned every delivery of
    the occurrence for every candidate: quadratic, 60 messages/s at 3,000 participants. The
    flags (``every_status``, ``once``) are values in the text Django sends, and PostgreSQL
    folds ``true OR …`` and ``false AND …`` away when it plans: a condition a flag turns off
    is not in the plan, which is the plan of a text written without it.
    """
    return f"""
            p.project_id = %(project)s
            AND p.unsubscribed_at IS NULL
            AND p.id > %(after)s
            AND (%(every_status)s OR p.status IN ({statuses}))
            AND (SELECT 1 FROM {_D} d
                  WHERE d.task_id = %(task)s AND d.participant_id = p.id
                    AND ((d.occurrence = %(occ)s AND d.state <> %(reclaim)s)
                         OR (%(once)s AND d.state IN ({blocking})))
                  LIMIT 1) IS NULL"""


# The due condition that ``claim_chunk`` and ``has_due`` share, in each database's words.
_DUE_POSTGRESQL = _due(
    statuses="SELECT value FROM json_array_elements_text(%(statuses)s::json)",
    blocking="SELECT value FROM json_array_elements_text(%(blocking)s::json)",
)
_DUE_SQLITE = _due(
    statuses="SELECT value FROM json_each(%(statuses)s)",
    blocking="SELECT value FROM json_each(%(blocking)s)",
)


def _claim(*, due: str, conflict: str) -> str:
    """The claim INSERT around a due condition and an ON CONFLICT action (each policy's)."""
    return f"""
        INSERT INTO {_D} (task_id, occurrence, participant_id, history_id, email, state,
                         reply, tries, claimed_at)
        SELECT %(task)s, %(occ)s, p.id, %(hist)s, p.email, 'sending', '', 1, %(now)s
          FROM {_P} p
         WHERE {due}
         ORDER BY p.id
         LIMIT %(limit)s
        ON CONFLICT (task_id, participant_id, occurrence) DO {conflict}
        RETURNING id AS delivery_id, participant_id, email,
                  (SELECT name FROM {_P} x WHERE x.id = participant_id) AS name,
                  (SELECT status FROM {_P} x WHERE x.id = participant_id) AS status,
                  tries"""


# -- claim_chunk: mark the next due participants sending for this run, in one INSERT.
CLAIM = ledger.Statement(
    postgresql=_claim(due=_DUE_POSTGRESQL, conflict="NOTHING"),
    sqlite=_claim(due=_DUE_SQLITE, conflict="NOTHING"),
)

# -- claim_chunk (resend policy): the same, and this occurrence's uncertain rows claimed again.
_RECLAIM = f"""UPDATE SET state = 'sending', history_id = excluded.history_id,
                   tries = {_D}.tries + 1, claimed_at = excluded.claimed_at,
                   finished_at = NULL, reply = ''
             WHERE {_D}.state = 'uncertain'"""
CLAIM_RESENDING = ledger.Statement(
    postgresql=_claim(due=_DUE_POSTGRESQL, conflict=_RECLAIM),
    sqlite=_claim(due=_DUE_SQLITE, conflict=_RECLAIM),
)


def claim_chunk(
    *, selection: Selection, history_id: int, after: int, limit: int, now: datetime
) -> list[Claimed]:
    """Mark the next ``limit`` due participants (ids above ``after``) sending for this run.

    Participants a concurrent run of the same occurrence claimed first are left out (its row
    wins the unique key). With the resend policy an ``uncertain`` row of this occurrence is
    claimed again, its ``tries`` counted up.
    """
    statement = CLAIM_RESENDING if selection.resend_uncertain else CLAIM
    params = {**selection.params(after=after), "limit": limit, "hist": history_id, "now": now}
    claimed: list[Claimed] = ledger.rows(statement, params, into=Claimed)
    return sorted(claimed, key=lambda c: c.participant_id)


# -- has_due: find one participant still due after ``after``.
HAS_DUE = ledger.Statement(
    postgresql=f"SELECT 1 AS due FROM {_P} p WHERE {_DUE_POSTGRESQL} LIMIT 1",
    sqlite=f"SELECT 1 AS due FROM {_P} p WHERE {_DUE_SQLITE} LIMIT 1",
)


def has_due(*, selection: Selection, after: int = 0) -> bool:
    """Whether anyone with an id above ``after`` is still due (validity, and a lost race)."""
    return ledger.row(HAS_DUE, selection.params(after=after)) is not None


def unsubscribed_among(participant_ids: Sequence[int]) -> set[int]:
    """Which of these participants have unsubscribed (a slow chunk's re-check)."""
    if not participant_ids:
        return set()
    return set(
        Participant.objects.filter(
            pk__in=list(participant_ids), unsubscribed_at__isnull=False
        ).values_list("pk", flat=True)
    )


# -- record_chunk: write each delivery's outcome in one UPDATE, on rows this run still holds.
RECORD_CHUNK = ledger.Statement(
    postgresql=f"""
        UPDATE {_D} AS d
           SET state = o.state, reply = o.reply,
               tries = CASE WHEN o.tries = 1 THEN d.tries ELSE o.tries END,
               finished_at = %(now)s
          FROM json_to_recordset(%(outcomes)s::json)
               AS o(id bigint, state text, reply text, tries integer)
         WHERE d.id = o.id AND d.history_id = %(hist)s AND d.state = 'sending'""",
    sqlite=f"""
        UPDATE {_D} AS d
           SET state = o.state, reply = o.reply,
               tries = CASE WHEN o.tries = 1 THEN d.tries ELSE o.tries END,
               finished_at = %(now)s
          FROM (SELECT json_extract(value, '$.id') AS id,
                       json_extract(value, '$.state') AS state,
                       json_extract(value, '$.reply') AS reply,
                       json_extract(value, '$.tries') AS tries
                  FROM json_each(%(outcomes)s)) AS o
         WHERE d.id = o.id AND d.history_id = %(hist)s AND d.state = 'sending'""",
)


def record_chunk(*, history_id: int, outcomes: Sequence[Outcome], now: datetime) -> int:
    """Write each delivery's outcome in one UPDATE; only rows this run still holds change.

    The outcomes travel as one JSON list, so the statement is the same text for a chunk of one
    or of a thousand. A ``tries`` of 1, the default (a message that failed to render was never
    tried), leaves the row's own count. A server's reply is stored as one line of at most 500
    characters: it is someone else's words.
    """
    if not outcomes:
        return 0
    rows = [
        {
            "id": o.delivery_id,
            "state": str(o.state),
            "reply": one_line(o.reply, limit=500) if o.reply else "",
            "tries": o.tries,
        }
        for o in outcomes
    ]
    return ledger.execute(
        RECORD_CHUNK, {"outcomes": json.dumps(rows), "hist": history_id, "now": now}
    )


# -- release: delete first claims never handed to the server (the participant is due again).
RELEASE_FIRST = ledger.Statement(
    postgresql=f"""
        DELETE FROM {_D}
         WHERE id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json))
           AND history_id = %(hist)s AND state = 'sending' AND tries = 1""",
    sqlite=f"""
        DELETE FROM {_D}
         WHERE id IN (SELECT value FROM json_each(%(ids)s))
           AND history_id = %(hist)s AND state = 'sending' AND tries = 1""",
)

# -- release: put resends never handed to the server back to uncertain.
RELEASE_RESEND = ledger.Statement(
    postgresql=f"""
        UPDATE {_D} SET state = 'uncertain'
         WHERE id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json))
           AND history_id = %(hist)s AND state = 'sending'""",
    sqlite=f"""
        UPDATE {_D} SET state = 'uncertain'
         WHERE id IN (SELECT value FROM json_each(%(ids)s))
           AND history_id = %(hist)s AND state = 'sending'""",
)


def release(*, history_id: int, delivery_ids: Sequence[int]) -> None:
    """Give back claimed deliveries whose message was never handed to the server.

    A first claim is deleted (the participant is simply due again); a resend of an uncertain
    message goes back to uncertain.
    """
    if not delivery_ids:
        return
    params = {"ids": json.dumps(list(delivery_ids)), "hist": history_id}
    ledger.execute(RELEASE_FIRST, params)
    ledger.execute(RELEASE_RESEND, params)


# -- recover_run: turn this run's ``sending`` rows, left by a dead attempt, into ``uncertain``.
_RECOVER_RUN = f"""
        UPDATE {_D}
           SET state = 'uncertain', finished_at = %(now)s,
               reply = 'the attempt ended while this message was being sent'
         WHERE history_id = %(hist)s AND state = 'sending'"""
RECOVER_RUN = ledger.Statement.portable(_RECOVER_RUN)


def recover_run(*, history_id: int, now: datetime) -> int:
    """Turn a dead attempt's ``sending`` rows into ``uncertain``; returns how many.

    Only the rows of this run (this execution): a concurrent run of the same occurrence is
    alive and owns its own.
    """
    return ledger.execute(RECOVER_RUN, {"hist": history_id, "now": now})


# -- count_run: count the run's deliveries per state.
_COUNT_RUN = f"""
        SELECT state, COUNT(*) AS deliveries FROM {_D}
         WHERE history_id = %(hist)s GROUP BY state"""
COUNT_RUN = ledger.Statement.portable(_COUNT_RUN)


def count_run(*, history_id: int) -> dict[str, int]:
    """The run's deliveries per state."""
    found = ledger.rows(COUNT_RUN, {"hist": history_id})
    return {row["state"]: int(row["deliveries"]) for row in found}
