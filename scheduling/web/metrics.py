"""``/metrics``: Prometheus metrics, computed when Prometheus scrapes.

The scheduler and the workers are other processes, so nothing here counts in memory: a custom
collector reads the ledger (the same indexed, time-bounded reads as the dashboard) and the
schedulers' ``SchedulerState`` rows on every scrape. Metric names start with ``duecourse_``;
docs/operations.md lists them with a sample alert rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scheduling.stages import drops, ticks
from scheduling.web import overview

#: Schedulers silent for longer than this drop out of the per-scheduler series.
SCHEDULER_WINDOW = timedelta(hours=1)
RECENT_WINDOW = timedelta(hours=1)


class LedgerCollector(Collector):
    """Reads the ledger at scrape time; every read is index-backed and bounded."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        unfinished = GaugeMetricFamily(
            "duecourse_executions_unfinished",
            "Executions not finished yet, by status.",
            labels=["status"],
        )
        for status, count in overview.unfinished_by_status().items():
            unfinished.add_metric([status], count)
        yield unfinished

        recent = GaugeMetricFamily(
            "duecourse_executions_last_hour",
            "Executions due in the last hour, by status.",
            labels=["status"],
        )
        for status, count in overview.recent_by_status(now=now, within=RECENT_WINDOW).items():
            recent.add_metric([status], count)
        yield recent

        enqueued = GaugeMetricFamily(
            "duecourse_django_task_runs_last_hour",
            "Runs enqueued through Django's Tasks framework and due in the last hour, by status.",
            labels=["status"],
        )
        runs = overview.recent_by_status(now=now, within=RECENT_WINDOW, enqueued_only=True)
        for status, count in runs.items():
            enqueued.add_metric([status], count)
        yield enqueued

        yield GaugeMetricFamily(
            "duecourse_item_failures_last_day",
            "Single items that failed inside runs due in the last 24 hours, as the runs "
            "reported them (declined renewals, undelivered messages).",
            value=overview.item_failures(now=now).count,
        )

        lag = GaugeMetricFamily(
            "duecourse_dispatch_lag_seconds",
            "Start minus due time of executions due in the last hour, by quantile.",
            labels=["quantile"],
        )
        for quantile, seconds in overview.lag_percentiles(now=now, within=RECENT_WINDOW).items():
            lag.add_metric([str(quantile)], float("nan") if seconds is None else seconds)
        yield lag

        oldest = overview.oldest_due(now=now)
        yield GaugeMetricFamily(
            "duecourse_oldest_due_seconds",
            "How long the most overdue unclaimed job has been due (0 when none is).",
            value=(now - oldest).total_seconds() if oldest else 0.0,
        )
        yield GaugeMetricFamily(
            "duecourse_jobs_paused_after_failures",
            "Jobs that paused themselves after pause_after_failures failed occurrences in a row "
            "(they stay paused until resumed).",
            value=overview.paused_after_failures(limit=1).count,
        )
        yield GaugeMetricFamily(
            "duecourse_stale_executions",
            "Running executions whose heartbeat is older than SCHEDULING_STALE_AFTER.",
            value=overview.stale_count(now=now),
        )
        dropped = CounterMetricFamily(
            "duecourse_worker_messages_dropped",
            "Broker messages each worker acknowledged without running them (undecodable, "
            "malformed, or nested or sized past the limits), by kind.",
            labels=["worker", "kind"],
        )
        for row in drops.totals():
            dropped.add_metric([row.worker, row.kind], row.dropped_total)
        yield dropped
        yield from self._schedulers(now)

    def _schedulers(self, now: datetime) -> Iterator[Metric]:
        rows = ticks.schedulers(active_within=SCHEDULER_WINDOW, now=now)
        last = GaugeMetricFamily(
            "duecourse_scheduler_last_tick_timestamp_seconds",
            "When each scheduler last recorded a tick (Unix time).",
            labels=["scheduler"],
        )
        duration = GaugeMetricFamily(
            "duecourse_scheduler_tick_seconds",
            "Longest tick of each scheduler in its last recording interval.",
            labels=["scheduler"],
        )
        counters = {
            field: CounterMetricFamily(
                f"duecourse_scheduler_{name}", help_text, labels=["scheduler"]
            )
            for field, name, help_text in (
                ("ticks_total", "ticks", "Ticks since the scheduler started."),
                ("claimed_total", "claimed", "Occurrences claimed since it started."),
                (
                    "republished_total",
                    "republished",
                    "Executions published again (lost or unpublished doorbells, due retries).",
                ),
                ("reaped_total", "reaped", "Running executions reaped for a stale heartbeat."),
            )
        }
        for row in rows:
            last.add_metric([row.name], row.last_tick_at.timestamp())
            duration.add_metric([row.name], row.last_tick_seconds)
            for field, family in counters.items():
                family.add_metric([row.name], getattr(row, field))
        yield last
        yield duration
        yield from counters.values()


registry = CollectorRegistry(auto_describe=False)
registry.register(LedgerCollector())


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
