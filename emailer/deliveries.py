"""The delivery ledger's statements, each a named verb: claim, record, release, recover, count.

A run costs two statements per chunk, not two per message: ``claim_chunk`` selects the next due
participants *and* marks them sending in one INSERT (the unique key (task, participant,
occurrence) makes a second run that races for the same people insert nothing), and
``record_chunk`` marks each of them sent, failed or deferred in one UPDATE. Both commit at
once (autocommit), so a crash leaves at most the chunk in flight in ``sending``.

The statements are plain SQL that PostgreSQL and SQLite (the embedded default) both run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from emailer.models import DELIVERED_STATES, Delivery, DeliveryState, Participant
from emailer.text import one_line

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

    def where(self, params: dict[str, Any]) -> str:
        """The due-participant condition on ``p``, filling ``params``.

        "Has had this mail" is a scalar subquery with LIMIT, not NOT EXISTS, on purpose: the
        planner cannot turn it into an anti join, so it is always one probe of the unique index
        (task, participant, occurrence) per candidate. As NOT EXISTS, a ledger table without
        statistics yet (a first big run) was planned as a join that scanned every delivery of
        the occurrence for every candidate: quadratic, 60 messages/s at 3,000 participants.
        """
        params.update(task=self.task_id, project=self.project_id, occ=self.occurrence)
        params["reclaim"] = DeliveryState.UNCERTAIN if self.resend_uncertain else ""
        status = ""
        if self.statuses:
            names = []
            for i, value in enumerate(self.statuses):
                params[f"s{i}"] = value
                names.append(f"%(s{i})s")
            status = f"AND p.status IN ({', '.join(names)})"
        once = ""
        if self.once_per_participant:
            blocking = [s.value for s in DELIVERED_STATES]
            if not self.resend_uncertain:
                blocking.append(DeliveryState.UNCERTAIN.value)
            once = "OR d.state IN ({})".format(", ".join(f"'{s}'" for s in blocking))
        return f"""
            p.project_id = %(project)s
            AND p.unsubscribed_at IS NULL
            AND p.id > %(after)s
            {status}
            AND (SELECT 1 FROM {_D} d
                  WHERE d.task_id = %(task)s AND d.participant_id = p.id
                    AND ((d.occurrence = %(occ)s AND d.state <> %(reclaim)s) {once})
                  LIMIT 1) IS NULL"""


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


# -- claim_chunk --
def claim_chunk(
    *, selection: Selection, history_id: int, after: int, limit: int, now: datetime
) -> list[Claimed]:
    """Mark the next ``limit`` due participants (ids above ``after``) sending for this run.

    Participants a concurrent run of the same occurrence claimed first are left out (its row
    wins the unique key). With the resend policy an ``uncertain`` row of this occurrence is
    claimed again, its ``tries`` counted up.
    """
    params: dict[str, Any] = {"after": after, "limit": limit, "hist": history_id, "now": now}
    where = selection.where(params)
    conflict = "NOTHING"
    if selection.resend_uncertain:
        conflict = f"""UPDATE SET state = 'sending', history_id = excluded.history_id,
                   tries = {_D}.tries + 1, claimed_at = excluded.claimed_at,
                   finished_at = NULL, reply = ''
             WHERE {_D}.state = 'uncertain'"""
    sql = f"""
        INSERT INTO {_D} (task_id, occurrence, participant_id, history_id, email, state,
                          reply, tries, claimed_at)
        SELECT %(task)s, %(occ)s, p.id, %(hist)s, p.email, 'sending', '', 1, %(now)s
          FROM {_P} p
         WHERE {where}
         ORDER BY p.id
         LIMIT %(limit)s
        ON CONFLICT (task_id, participant_id, occurrence) DO {conflict}
        RETURNING id, participant_id, email,
                  (SELECT name FROM {_P} x WHERE x.id = participant_id),
                  (SELECT status FROM {_P} x WHERE x.id = participant_id),
                  tries"""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return sorted((Claimed(*row) for row in rows), key=lambda c: c.participant_id)


# -- has_due --
def has_due(*, selection: Selection, after: int = 0) -> bool:
    """Whether anyone with an id above ``after`` is still due (validity, and a lost race)."""
    params: dict[str, Any] = {"after": after}
    where = selection.where(params)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {_P} p WHERE {where} LIMIT 1", params)
        return cursor.fetchone() is not None


# -- unsubscribed_among --
def unsubscribed_among(participant_ids: Sequence[int]) -> set[int]:
    """Which of these participants have unsubscribed (a slow chunk's re-check)."""
    if not participant_ids:
        return set()
    return set(
        Participant.objects.filter(
            pk__in=list(participant_ids), unsubscribed_at__isnull=False
        ).values_list("pk", flat=True)
    )


# -- record_chunk --
def record_chunk(*, history_id: int, outcomes: Sequence[Outcome], now: datetime) -> int:
    """Write each delivery's outcome in one UPDATE; only rows this run still holds change.

    ``sent`` on the first try is the common case and is the ELSE branch, so the statement
    grows only with the exceptions.
    """
    if not outcomes:
        return 0
    params: list[Any] = []
    states, replies, tries = [], [], []
    for o in outcomes:
        if o.state != DeliveryState.SENT:
            states.append("WHEN %s THEN %s")
            params += [o.delivery_id, o.state]
    for o in outcomes:
        if o.reply:
            replies.append("WHEN %s THEN %s")
            params += [o.delivery_id, one_line(o.reply, limit=500)]  # a server's own words
    for o in outcomes:
        if o.tries != 1:
            tries.append("WHEN %s THEN %s")
            params += [o.delivery_id, o.tries]
    state_sql = f"CASE id {' '.join(states)} ELSE 'sent' END" if states else "'sent'"
    reply_sql = f"CASE id {' '.join(replies)} ELSE '' END" if replies else "''"
    tries_sql = f"CASE id {' '.join(tries)} ELSE tries END" if tries else "tries"
    ids = [o.delivery_id for o in outcomes]
    sql = f"""
        UPDATE {_D}
           SET state = {state_sql}, reply = {reply_sql}, tries = {tries_sql}, finished_at = %s
         WHERE id IN ({", ".join(["%s"] * len(ids))}) AND history_id = %s AND state = 'sending'"""
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, now, *ids, history_id])
        return int(cursor.rowcount)


# -- release --
def release(*, history_id: int, delivery_ids: Sequence[int]) -> None:
    """Give back claimed deliveries whose message was never handed to the server.

    A first claim is deleted (the participant is simply due again); a resend of an uncertain
    message goes back to uncertain.
    """
    if not delivery_ids:
        return
    marks = ", ".join(["%s"] * len(delivery_ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {_D} WHERE id IN ({marks}) AND history_id = %s"
            " AND state = 'sending' AND tries = 1",
            [*delivery_ids, history_id],
        )
        cursor.execute(
            f"UPDATE {_D} SET state = 'uncertain' WHERE id IN ({marks}) AND history_id = %s"
            " AND state = 'sending'",
            [*delivery_ids, history_id],
        )


# -- recover_run --
def recover_run(*, history_id: int, now: datetime) -> int:
    """Turn a dead attempt's ``sending`` rows into ``uncertain``; returns how many.

    Only the rows of this run (this execution): a concurrent run of the same occurrence is
    alive and owns its own.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_D} SET state = 'uncertain', finished_at = %s,"
            " reply = 'the attempt ended while this message was being sent'"
            " WHERE history_id = %s AND state = 'sending'",
            [now, history_id],
        )
        return int(cursor.rowcount)


# -- count_run --
def count_run(*, history_id: int) -> dict[str, int]:
    """The run's deliveries per state."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT state, COUNT(*) FROM {_D} WHERE history_id = %s GROUP BY state",
            [history_id],
        )
        return {state: int(n) for state, n in cursor.fetchall()}
