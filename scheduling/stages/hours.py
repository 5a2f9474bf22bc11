"""The dashboard's hourly chart: settled hours counted once and kept in the ledger.

The chart shows the executions due in each of the last 24 hours by status. Counting a day
anew on every page costs what a day brings (a million index entries at a million executions a
day, most of them out of memory on the first page after a start). An hour that ended
``SETTLED_AFTER`` ago rarely changes any more, so it is counted once, by job owner and status,
into a ``SettledHour`` row: by the scheduler as the hour settles (``scheduling.scheduler.hours``),
or by the first page that finds it missing. The row serves every web process and survives a
restart, so a page counts only the hours that have not settled, whatever the history holds.

A run that changes status after its hour has settled (a retry hours later) keeps the status
it had when the hour was counted, in the chart only; the executions list reads the rows.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Count
from django.db.models.functions import TruncHour
from django.utils import timezone

from scheduling.models import Execution, SettledHour

HOUR = timedelta(hours=1)
#: An hour this long past its end is settled: counted once and kept.
SETTLED_AFTER = timedelta(hours=1)
#: The hours the chart shows.
CHART_HOURS = 24
#: Settled hours older than this are forgotten (the chart reaches back ``CHART_HOURS``).
KEEP = timedelta(hours=2 * CHART_HOURS)
#: The owner key of executions whose job has no owner, and of Django task runs (no job).
NO_OWNER = "none"

#: Executions by status.
Counts = dict[str, int]


def chart_hours(now: datetime, hours: int = CHART_HOURS) -> list[datetime]:
    """The starts of the last ``hours`` hours in the current time zone, the current hour last."""
    end = timezone.localtime(now).replace(minute=0, second=0, microsecond=0) + HOUR
    return [end - (hours - step) * HOUR for step in range(hours)]


def is_settled(hour: datetime, now: datetime) -> bool:
    return hour + HOUR <= now - SETTLED_AFTER


def per_hour(
    *, now: datetime, hours: int = CHART_HOURS, owner_id: int | None = None
) -> list[tuple[datetime, Counts]]:
    """Executions due in each of the last ``hours`` hours by status, oldest hour first (of
    ``owner_id``'s jobs alone when given): settled hours from their rows (counting the ones
    missing, once, for every owner), the others counted now."""
    every = chart_hours(now, hours)
    known, _ = _settled_of(every, now)
    counts = {hour: _of_owner(by_owner, owner_id) for hour, by_owner in known.items()}
    live = [hour for hour in every if hour not in known]
    if live:
        rows = Execution.objects.filter(
            scheduled_for__gte=live[0], scheduled_for__lt=every[-1] + HOUR
        )
        if owner_id is not None:
            rows = rows.filter(job__owner_id=owner_id)
        counts.update({hour: {} for hour in live})
        for row in (
            rows.annotate(hour=TruncHour("scheduled_for"))
            .values("hour", "status")
            .annotate(n=Count("*"))
            .order_by()
        ):
            counts.setdefault(row["hour"], {})[row["status"]] = row["n"]
    return [(hour, counts.get(hour, {})) for hour in every]


def kept(hours: list[datetime]) -> dict[datetime, dict[str, Counts]]:
    """The kept counts of those of ``hours`` that have a row, by owner."""
    if not hours:
        return {}
    rows = SettledHour.objects.filter(hour__in=hours).values_list("hour", "counts")
    return {hour: counts for hour, counts in rows}


def settle(hours: list[datetime]) -> dict[datetime, dict[str, Counts]]:
    """Count settled ``hours`` by owner and status (one statement over the span they cover)
    and keep them. Two processes may count the same hour at once: the first row stays."""
    if not hours:
        return {}
    counted: dict[datetime, dict[str, Counts]] = {hour: {} for hour in hours}
    rows = (
        Execution.objects.filter(scheduled_for__gte=min(hours), scheduled_for__lt=max(hours) + HOUR)
        .annotate(hour=TruncHour("scheduled_for"))
        .values("hour", "job__owner_id", "status")
        .annotate(n=Count("*"))
        .order_by()
    )
    for row in rows:
        if row["hour"] in counted:
            owner = NO_OWNER if row["job__owner_id"] is None else str(row["job__owner_id"])
            counted[row["hour"]].setdefault(owner, {})[row["status"]] = row["n"]
    SettledHour.objects.bulk_create(
        [SettledHour(hour=hour, counts=counts) for hour, counts in counted.items()],
        ignore_conflicts=True,
    )
    return counted


def settle_due(*, now: datetime) -> int:
    """Count the chart's settled hours that have no row yet, and forget rows past ``KEEP``:
    the scheduler's duty, so that no page has to. Returns the hours counted."""
    SettledHour.objects.filter(hour__lt=now - KEEP).delete()
    return _settled_of(chart_hours(now), now)[1]


def _settled_of(
    every: list[datetime], now: datetime
) -> tuple[dict[datetime, dict[str, Counts]], int]:
    """The counts by owner of those of ``every`` that have settled, from their rows, counting
    (and keeping) the ones that have none yet; and how many that was."""
    settled = [hour for hour in every if is_settled(hour, now)]
    known = kept(settled)
    counted = settle([hour for hour in settled if hour not in known])
    return known | counted, len(counted)


def _of_owner(by_owner: dict[str, Counts], owner_id: int | None) -> Counts:
    if owner_id is not None:
        return dict(by_owner.get(str(owner_id), {}))
    total: Counts = {}
    for counts in by_owner.values():
        for status, n in counts.items():
            total[status] = total.get(status, 0) + n
    return total
