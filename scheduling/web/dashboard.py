"""The admin dashboard: one page that answers "is it healthy?" (staff only).

Each panel is one read of ``scheduling.web.overview``, bounded in time and served by an index, so
the page stays fast however long the history grows. The chart is inline SVG drawn here: no
script, no CDN. A staff user who is not a superuser sees only the jobs they own, and only with
the view (or change) permission on jobs and on executions, which every panel shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from scheduling import conf
from scheduling.models import Execution, ExecutionStatus, Job
from scheduling.pages.csp import with_csp
from scheduling.rules import permissions
from scheduling.stages import selectors, ticks
from scheduling.timing import readable
from scheduling.web import overview

CHART_HEIGHT = 120
BAR_WIDTH = 22
BAR_GAP = 4

#: Stack order and colour of each status in the chart (bottom first).
CHART_SERIES = [
    ("completed", "#2e7d32", (ExecutionStatus.COMPLETED,)),
    ("failed", "#c62828", (ExecutionStatus.FAILED,)),
    (
        "skipped / superseded / cancelled",
        "#f9a825",
        (ExecutionStatus.SKIPPED, ExecutionStatus.SUPERSEDED, ExecutionStatus.CANCELLED),
    ),
    (
        "unfinished",
        "#78909c",
        (
            ExecutionStatus.PENDING,
            ExecutionStatus.QUEUED,
            ExecutionStatus.RETRY,
            ExecutionStatus.WAITING,
            ExecutionStatus.RUNNING,
        ),
    ),
]


@dataclass(frozen=True)
class Bar:
    x: int
    label: str
    total: int
    segments: list[dict[str, Any]]


def chart(hours: list[tuple[datetime, dict[str, int]]]) -> dict[str, Any]:
    """Lay out a stacked bar per hour for the template's inline SVG."""
    totals = [sum(counts.values()) for _, counts in hours]
    peak = max(totals, default=0) or 1
    bars = []
    for index, (hour, counts) in enumerate(hours):
        x = index * (BAR_WIDTH + BAR_GAP)
        y = CHART_HEIGHT
        segments = []
        for name, colour, statuses in CHART_SERIES:
            value = sum(counts.get(str(s), 0) for s in statuses)
            if not value:
                continue
            height = max(1, round(value / peak * CHART_HEIGHT))
            y -= height
            segments.append(
                {"y": y, "height": height, "colour": colour, "name": name, "value": value}
            )
        label = f"{timezone.localtime(hour):%H}"
        bars.append(Bar(x=x, label=label, total=totals[index], segments=segments))
    return {
        "bars": bars,
        "peak": peak if any(totals) else 0,
        "width": len(hours) * (BAR_WIDTH + BAR_GAP),
        "height": CHART_HEIGHT,
        "bar_width": BAR_WIDTH,
        # Each series' swatch is a class of scheduling/duecourse.css: no inline style.
        "legend": [(name, name.split()[0]) for name, _, _ in CHART_SERIES],
        "total": sum(totals),
    }


def judge(value: float | None, *, warn: float, alert: float) -> str:
    """A number against its two thresholds from settings: "ok", "warn" or "bad"."""
    if value is None or value < warn:
        return "ok"
    return "bad" if value >= alert else "warn"


def panels(*, now: datetime, owner_id: int | None, internal: bool = False) -> dict[str, Any]:
    """Every panel's data; ``owner_id`` limits them to one owner's jobs, and the job panels
    leave out the jobs made for a domain app on its own unless ``internal``."""
    lag = overview.lag_percentiles(now=now, owner_id=owner_id)
    failures = overview.recent_failures(now=now, owner_id=owner_id)
    items = overview.item_failures(now=now, owner_id=owner_id)
    failed = failures.count + items.count
    lag_warn, lag_alert = conf.get("DASHBOARD_LAG_WARN"), conf.get("DASHBOARD_LAG_ALERT")
    due_soon = overview.due_soon(now=now, owner_id=owner_id, internal=internal)
    running = overview.running(now=now, owner_id=owner_id)
    waiting = overview.waiting(now=now, owner_id=owner_id)
    stale = overview.stale(now=now, owner_id=owner_id)
    late = overview.late(now=now, owner_id=owner_id, internal=internal)
    never_completing = overview.never_completing(now=now, owner_id=owner_id)
    # Every job and run a panel lists, named for what it is (one query per task table).
    selectors.titled(
        [
            *due_soon.rows,
            *running.rows,
            *waiting.rows,
            *stale.rows,
            *late.jobs.rows,
            *late.executions.rows,
            *failures.rows,
            *items.runs.rows,
            *never_completing.rows,
        ]
    )
    return {
        "due_soon": due_soon,
        "running": running,
        "waiting": waiting,
        "stale": stale,
        "late": late,
        "failures": failures,
        "item_failures": items,
        "paused_after_failures": overview.paused_after_failures(owner_id=owner_id),
        "never_completing": never_completing,
        "never_completes_warning": selectors.never_completes_warning(),
        "failed_total": failed,
        "failures_judged": judge(
            failed,
            warn=conf.get("DASHBOARD_FAILURES_WARN"),
            alert=conf.get("DASHBOARD_FAILURES_ALERT"),
        ),
        "unconsumed": overview.unconsumed_queues(now=now, owner_id=owner_id),
        "awaiting_tasks": [
            each.describe(now) for each in overview.awaiting_tasks(owner_id=owner_id)
        ],
        "chart": chart(overview.executions_per_hour(now=now, owner_id=owner_id)),
        "lag": [
            (
                f"p{round(q * 100)}",
                None if seconds is None else readable.span(seconds),
                judge(seconds, warn=lag_warn, alert=lag_alert),
            )
            for q, seconds in lag.items()
        ],
        "failures_warn": conf.get("DASHBOARD_FAILURES_WARN"),
        "failures_alert": conf.get("DASHBOARD_FAILURES_ALERT"),
        "lag_warn": readable.span(lag_warn),
        "lag_alert": readable.span(lag_alert),
    }


def dashboard_view(request: HttpRequest) -> HttpResponse:
    user: Any = request.user
    if not permissions.may_view(user, Job, Execution):
        raise PermissionDenied("the dashboard needs the view permission on jobs and executions")
    now = timezone.now()
    owner_id = None if user.is_superuser else user.pk
    last_tick = ticks.last_tick()
    internal = request.GET.get("internal") == "1"
    context = {
        **admin.site.each_context(request),
        "title": "Dashboard",
        "now": now,
        "scoped": owner_id is not None,
        "last_tick": last_tick,
        "tick_age": (now - last_tick).total_seconds() if last_tick else None,
        "tick_ago": readable.ago(last_tick, now),
        "times_caption": readable.caption(),
        "internal": internal,
        "tick_age_limit": conf.get("HEALTH_TICK_AGE"),
        "queue_idle_after": readable.span(conf.get("QUEUE_IDLE_WARN")),
        **panels(now=now, owner_id=owner_id, internal=internal),
    }
    return TemplateResponse(request, "scheduling/dashboard.html", context)


def staff_dashboard_view() -> Any:
    """The dashboard behind the admin's login: staff only, as every admin page, with the apps'
    Content-Security-Policy where the host sends none (``scheduling.pages.csp``)."""
    return with_csp(admin.site.admin_view(dashboard_view))
