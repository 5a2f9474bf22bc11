"""The running limits' lock: limited starts of one job, or one owner, go one at a time.

- ``lock_slot``: held until the caller's transaction ends.
"""

from __future__ import annotations

from django.db.models import F

from scheduling import ledger
from scheduling.models import Job

# -- lock_slot: a transaction-scoped advisory lock on a name (a job's, an owner's).
ADVISORY_LOCK = ledger.Statement(
    postgresql="SELECT pg_advisory_xact_lock(hashtextextended(%(name)s, 0)) AS locked"
)


def lock_slot(*, job_id: int, limit_job: bool, owner_id: int | None) -> None:
    """Serialise limited starts of ``job_id`` (when ``limit_job``) and of ``owner_id`` (when
    given) until this transaction ends.

    Must run inside the transaction that counts and starts. PostgreSQL: advisory locks, the
    job's before the owner's in every process, so two starts never wait on each other in a
    circle. SQLite: one writer at a time; a write takes it before anything is counted.
    """
    if not ledger.on_postgresql():
        Job.objects.filter(pk=job_id).update(updated_at=F("updated_at"))
        return
    if limit_job:
        ledger.value(ADVISORY_LOCK, {"name": f"duecourse.job.{job_id}"})
    if owner_id is not None:
        ledger.value(ADVISORY_LOCK, {"name": f"duecourse.owner.{owner_id}"})
