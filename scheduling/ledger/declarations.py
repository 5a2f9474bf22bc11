"""The declarations' lock: one process at a time reconciles the ledger with the code.

- ``lock_declarations``: held until the caller's transaction ends.
"""

from __future__ import annotations

from scheduling import ledger
from scheduling.models import DeclarationSet

# -- lock_declarations: a transaction-scoped advisory lock on the declarations' name.
DECLARATIONS_LOCK = ledger.Statement(
    postgresql="SELECT pg_advisory_xact_lock(hashtextextended('duecourse.declarations', 0))"
    " AS locked"
)


def lock_declarations() -> None:
    """Serialise reconciliations until this transaction ends: several schedulers starting at
    once reconcile one after the other, and each after the first finds nothing to change.

    PostgreSQL: an advisory lock, so nothing else (claims, edits) waits on it. SQLite: one
    writer at a time; a write takes it before anything is read.
    """
    if not ledger.on_postgresql():
        DeclarationSet.objects.filter(pk=0).update(entries=0)
        return
    ledger.value(DECLARATIONS_LOCK)
