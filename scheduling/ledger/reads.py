"""The operators' hand-written reads: what the ORM cannot say in one bounded query.

- ``ping``: the database answers a query (``/health/``);
- ``lag_percentiles``: start minus due time at given quantiles, over one range of due times;
- ``job_names``: the names of many jobs at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from scheduling import ledger
from scheduling.models import Execution, Job

EXECUTION = Execution._meta.db_table
JOB = Job._meta.db_table

# -- ping: one round trip that touches no table.
PING = ledger.Statement.portable("SELECT 1 AS answer")


def ping() -> bool:
    """Whether the database answers (an error propagates: the caller reports it)."""
    return ledger.value(PING) == 1


# date_part, not EXTRACT: EXTRACT returns numeric since PostgreSQL 14, and sorting an hour's
# numerics (forty thousand at a million executions a day) costs several times the same sort
# of doubles, which percentile_cont takes anyway.
_LAG = """percentile_cont(%(quantiles)s::double precision[]) WITHIN GROUP
             (ORDER BY date_part('epoch', e.started_at - e.scheduled_for))"""

# -- lag_percentiles: start minus due time at the quantiles, over one bounded range of
#    ``scheduled_for``, every owner's executions; SQLite sorts in Python (``_lags_in_python``).
LAG_PERCENTILES = ledger.Statement(
    postgresql=f"""
    SELECT {_LAG} AS lags
      FROM {EXECUTION} e
     WHERE e.scheduled_for >= %(start)s AND e.scheduled_for < %(end)s
       AND e.started_at IS NOT NULL
    """
)
# -- lag_percentiles, for one owner's view: the job joined for its owner.
OWNER_LAG_PERCENTILES = ledger.Statement(
    postgresql=f"""
    SELECT {_LAG} AS lags
      FROM {EXECUTION} e JOIN {JOB} j ON j.id = e.job_id
     WHERE e.scheduled_for >= %(start)s AND e.scheduled_for < %(end)s
       AND e.started_at IS NOT NULL AND j.owner_id = %(owner_id)s
    """
)


def lag_percentiles(
    *, start: datetime, end: datetime, owner_id: int | None, quantiles: Sequence[float]
) -> dict[float, float | None]:
    """Start minus due time, in seconds, at each of ``quantiles`` (None where nothing started)."""
    if not ledger.on_postgresql():
        return _lags_in_python(start=start, end=end, owner_id=owner_id, quantiles=quantiles)
    params = {"start": start, "end": end, "quantiles": list(quantiles)}
    if owner_id is None:
        lags = ledger.value(LAG_PERCENTILES, params)
    else:
        lags = ledger.value(OWNER_LAG_PERCENTILES, {**params, "owner_id": owner_id})
    if lags is None:
        return dict.fromkeys(quantiles)
    return {q: float(v) for q, v in zip(quantiles, lags, strict=True)}


def _lags_in_python(
    *, start: datetime, end: datetime, owner_id: int | None, quantiles: Sequence[float]
) -> dict[float, float | None]:
    """``LAG_PERCENTILES`` on SQLite: the started executions' lags sorted and interpolated."""
    executions = Execution.objects.filter(
        scheduled_for__gte=start, scheduled_for__lt=end, started_at__isnull=False
    )
    if owner_id is not None:
        executions = executions.filter(job__owner_id=owner_id)
    lags = sorted(
        (started - due).total_seconds()
        for due, started in executions.values_list("scheduled_for", "started_at")
    )
    if not lags:
        return dict.fromkeys(quantiles)
    return {q: _interpolate(lags, q) for q in quantiles}


def _interpolate(values: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``values``, interpolated as percentile_cont does."""
    position = q * (len(values) - 1)
    low, high = math.floor(position), math.ceil(position)
    return values[low] + (values[high] - values[low]) * (position - low)


# -- job_names: a prune's report names every job it touched, ten thousand at a time: one array
#    parameter on PostgreSQL (a quarter of the time of ten thousand ``IN`` parameters, which
#    SQLite, without arrays, still gets through the ORM).
JOB_NAMES = ledger.Statement(
    postgresql=f"SELECT id, name FROM {JOB} WHERE id = ANY(%(ids)s::bigint[])",
    columns=("id", "name"),
)


def job_names(ids: Sequence[int]) -> dict[int, str]:
    """The name of each job of ``ids`` that exists."""
    if not ids:
        return {}
    if ledger.on_postgresql():
        return {found["id"]: found["name"] for found in ledger.rows(JOB_NAMES, {"ids": list(ids)})}
    return dict(Job.objects.filter(pk__in=ids).values_list("pk", "name"))
