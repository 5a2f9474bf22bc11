"""The emailer's ledger: every hand-written statement of the app, each beside its function.

A run costs two statements per chunk, not two per message, and the ORM cannot say either of
them: ``claim_chunk`` selects the next due participants *and* marks them sending in one INSERT
(the unique key (task, participant, occurrence) makes a second run that races for the same
people insert nothing), and ``record_chunk`` marks each of them sent, failed or deferred in
one UPDATE. Both commit at once (autocommit), so a crash leaves at most the chunk in flight in
``sending``. Keeping every such statement here, run through the engine's ``ledger`` runner,
means one place to read when the delivery table changes, and one rule for all of them: each
database's statements in a named ``.sql`` file (``emailer/sql/postgresql.sql``,
``emailer/sql/sqlite.sql``, loaded by name), named parameters only, rows read by column name,
and the database decided once per connection by the engine's runner (``ledger.Engines``),
never by this app. These functions are the verbs; each database answers them with its own
statements, and a third database is a third file and a third name.

Lists travel as one JSON parameter (``json_array_elements_text`` / ``json_to_recordset`` on
PostgreSQL, ``json_each`` on SQLite, ``JSON_TABLE`` on MySQL and MariaDB), so each statement has
one fixed text whatever the chunk. MySQL has no ``RETURNING`` (MariaDB none on UPDATE) and no
``ON CONFLICT … WHERE``: its file has the claim as steps run in one transaction
(``_claim_in_steps``).

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from emailer.models import DELIVERED_STATES, DeliveryState, Participant
from emailer.text import one_line
from scheduling.api import ledger, load_statements

POSTGRESQL = load_statements("emailer", "sql/postgresql.sql", form="postgresql")
SQLITE = load_statements("emailer", "sql/sqlite.sql", form="sqlite")
MYSQL = load_statements("emailer", "sql/mysql.sql", form="shared")

#: Each database's statements, by name, chosen once per connection.
statements = ledger.Engines(
    "emailer",
    postgresql=lambda _: POSTGRESQL,
    sqlite=lambda _: SQLITE,
    mysql=lambda _: MYSQL,
)


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
        """The parameters of the due-participant condition, for ids above ``after``.

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


def claim_chunk(
    *, selection: Selection, history_id: int, after: int, limit: int, now: datetime
) -> list[Claimed]:
    """Mark the next ``limit`` due participants (ids above ``after``) sending for this run.

    Participants a concurrent run of the same occurrence claimed first are left out (its row
    wins the unique key). With the resend policy an ``uncertain`` row of this occurrence is
    claimed again, its ``tries`` counted up.
    """
    found = statements()
    params = {**selection.params(after=after), "limit": limit, "hist": history_id, "now": now}
    if "claim_chunk" not in found:
        claimed = _claim_in_steps(found, params, resend=selection.resend_uncertain)
    else:
        statement = found["claim_chunk_resending" if selection.resend_uncertain else "claim_chunk"]
        claimed = ledger.rows(statement, params, into=Claimed)
    return sorted(claimed, key=lambda c: c.participant_id)


def _claim_in_steps(
    found: Mapping[str, ledger.Statement], params: dict[str, Any], *, resend: bool
) -> list[Claimed]:
    """The claim where a database has no one statement for it (MySQL, MariaDB): the same rows
    claimed, in one transaction of its steps (``sql/mysql.sql``)."""
    with transaction.atomic():
        ids = [row["id"] for row in ledger.rows(found["due_ids"], params)]
        if not ids:
            return []
        step = {**params, "ids": json.dumps(ids)}
        ledger.execute(found["insert_claimed"], step)
        if resend:
            ledger.execute(found["reclaim_uncertain"], step)
        claimed: list[Claimed] = ledger.rows(found["held_by_run"], step, into=Claimed)
        return claimed


def has_due(*, selection: Selection, after: int = 0) -> bool:
    """Whether anyone with an id above ``after`` is still due (validity, and a lost race)."""
    return ledger.row(statements()["has_due"], selection.params(after=after)) is not None


def unsubscribed_among(participant_ids: Sequence[int]) -> set[int]:
    """Which of these participants have unsubscribed (a slow chunk's re-check)."""
    if not participant_ids:
        return set()
    return set(
        Participant.objects.filter(
            pk__in=list(participant_ids), unsubscribed_at__isnull=False
        ).values_list("pk", flat=True)
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
        statements()["record_chunk"], {"outcomes": json.dumps(rows), "hist": history_id, "now": now}
    )


def release(*, history_id: int, delivery_ids: Sequence[int]) -> None:
    """Give back claimed deliveries whose message was never handed to the server.

    A first claim is deleted (the participant is simply due again); a resend of an uncertain
    message goes back to uncertain.
    """
    if not delivery_ids:
        return
    params = {"ids": json.dumps(list(delivery_ids)), "hist": history_id}
    ledger.execute(statements()["release_first"], params)
    ledger.execute(statements()["release_resend"], params)


def recover_run(*, history_id: int, now: datetime) -> int:
    """Turn a dead attempt's ``sending`` rows into ``uncertain``; returns how many.

    Only the rows of this run (this execution): a concurrent run of the same occurrence is
    alive and owns its own.
    """
    return ledger.execute(statements()["recover_run"], {"hist": history_id, "now": now})


def count_run(*, history_id: int) -> dict[str, int]:
    """The run's deliveries per state."""
    found = ledger.rows(statements()["count_run"], {"hist": history_id})
    return {row["state"]: int(row["deliveries"]) for row in found}
