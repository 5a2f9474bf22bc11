"""The admin dashboard: what each panel counts, who may see it, and that every read is indexed."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.models import Execution, Job, SettledHour
from scheduling.scheduler.hours import HourKeeper
from scheduling.stages import hours as settled_hours
from scheduling.web import overview

pytestmark = pytest.mark.specification

db = pytest.mark.django_db
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


def execution(job: Job, *, due: datetime, status: str, **fields: Any) -> Execution:
    return Execution.objects.create(
        job=job, task=job.task, scheduled_for=due, status=status, **fields
    )


@pytest.fixture
def ledger(make_job: Callable[..., Job], now: datetime) -> dict[str, Any]:
    """A small ledger with one row for every panel, seen from ``now``."""
    soon = make_job(name="soon", every="PT30M")
    Job.objects.filter(pk=soon.pk).update(next_due_at=now + 20 * MINUTE)
    later = make_job(name="later", every="PT3H")
    Job.objects.filter(pk=later.pk).update(next_due_at=now + 2 * HOUR)
    behind = make_job(name="behind")
    Job.objects.filter(pk=behind.pk).update(next_due_at=now - 10 * MINUTE)
    worker = make_job(name="worker", every="PT6H")
    Job.objects.filter(pk=worker.pk).update(next_due_at=now + 3 * HOUR)
    execution(
        worker,
        due=now - 30 * MINUTE,
        status="completed",
        started_at=now - 30 * MINUTE + timedelta(seconds=2),
        finished_at=now - 29 * MINUTE,
    )
    execution(
        worker,
        due=now - 90 * MINUTE,
        status="completed",
        started_at=now - 90 * MINUTE + timedelta(seconds=4),
        finished_at=now - 89 * MINUTE,
    )
    execution(
        worker,
        due=now - 5 * MINUTE,
        status="running",
        started_at=now - 5 * MINUTE + timedelta(seconds=1),
        last_heartbeat_at=now - timedelta(seconds=5),
    )
    execution(
        worker,
        due=now - 20 * MINUTE,
        status="running",
        started_at=now - 20 * MINUTE,
        last_heartbeat_at=now - 10 * MINUTE,
    )
    execution(worker, due=now - 15 * MINUTE, status="queued", queued_at=now - 15 * MINUTE)
    execution(worker, due=now - 3 * HOUR, status="failed", finished_at=now - 2 * HOUR)
    execution(worker, due=now - 30 * HOUR, status="failed", finished_at=now - 30 * HOUR)
    return {"soon": soon, "behind": behind, "worker": worker}


@db
def test_due_soon_counts_jobs_due_within_the_next_hour(ledger: Any, now: datetime) -> None:
    panel = overview.due_soon(now=now)
    assert panel.count == 1
    assert [job.name for job in panel.rows] == ["soon"]


@db
def test_running_and_stale_split_by_heartbeat_age(ledger: Any, now: datetime) -> None:
    assert overview.running(now=now).count == 2
    stale = overview.stale(now=now)
    assert stale.count == 1
    assert stale.rows[0].last_heartbeat_at == now - 10 * MINUTE


@db
def test_late_counts_unclaimed_jobs_and_unstarted_executions(ledger: Any, now: datetime) -> None:
    late = overview.late(now=now)
    assert [job.name for job in late.jobs.rows] == ["behind"]
    assert [e.status for e in late.executions.rows] == ["queued"]
    assert late.count == 2


@db
def test_failures_count_only_the_last_24_hours(ledger: Any, now: datetime) -> None:
    assert overview.recent_failures(now=now).count == 1


@db
def test_executions_per_hour_cover_24_hours_by_status(ledger: Any, now: datetime) -> None:
    hours = overview.executions_per_hour(now=now)
    assert len(hours) == 24
    assert hours[-1][0] == now.replace(minute=0)  # the current hour is the last bar
    assert sum(sum(counts.values()) for _, counts in hours) == 6  # the 30 h old one is out
    assert hours[-2][1] == {"completed": 1, "running": 2, "queued": 1}  # 08:00 to 09:00


@db
def test_settled_hours_are_counted_once_and_kept(
    ledger: Any, now: datetime, make_job: Callable[..., Job]
) -> None:
    first = dict(overview.executions_per_hour(now=now))
    job = make_job(name="late-arrival")
    execution(job, due=now - 5 * HOUR, status="completed")  # a settled hour, already counted
    execution(job, due=now - 10 * MINUTE, status="completed")  # the current hour
    second = dict(overview.executions_per_hour(now=now))
    assert second[now - 5 * HOUR] == first[now - 5 * HOUR] == {}
    assert second[now - HOUR]["completed"] == first[now - HOUR]["completed"] + 1
    SettledHour.objects.all().delete()
    assert dict(overview.executions_per_hour(now=now))[now - 5 * HOUR] == {"completed": 1}


@db
def test_settled_hours_are_kept_in_the_ledger_for_every_process(ledger: Any, now: datetime) -> None:
    """A page counts the settled hours it lacks into rows; the next page (another process, or
    after a restart) reads them and counts only the hours that have not settled."""
    overview.executions_per_hour(now=now)
    kept = dict(SettledHour.objects.values_list("hour", "counts"))
    assert len(kept) == 22  # 24 hours less the current one and the one that just ended
    assert kept[now - 3 * HOUR] == {str(ledger["worker"].owner_id): {"failed": 1}}
    with CaptureQueriesContext(connection) as captured:
        overview.executions_per_hour(now=now)
    assert len(captured.captured_queries) == 2  # the kept rows; the two latest hours


@db
def test_an_owner_sees_only_their_jobs_in_settled_hours(
    ledger: Any, now: datetime, make_job: Callable[..., Job], django_user_model: Any
) -> None:
    other = django_user_model.objects.create_user("other-owner")
    theirs = make_job(name="theirs", owner=other)
    execution(theirs, due=now - 4 * HOUR, status="completed")
    execution(theirs, due=now - 4 * HOUR + MINUTE, status="failed")
    everyone = dict(overview.executions_per_hour(now=now))
    assert everyone[now - 4 * HOUR] == {"completed": 1, "failed": 1}
    assert everyone[now - 3 * HOUR] == {"failed": 1}
    mine = dict(overview.executions_per_hour(now=now, owner_id=other.pk))
    assert mine[now - 4 * HOUR] == {"completed": 1, "failed": 1}
    assert mine[now - 3 * HOUR] == {}


@db
def test_the_scheduler_counts_each_hour_once_it_settles(ledger: Any, now: datetime) -> None:
    clock = [0.0]
    keeper = HourKeeper(clock=lambda: clock[0])
    assert keeper.maybe(now) == 22
    clock[0] = 10.0
    assert keeper.maybe(now + HOUR) == 0  # not yet time to look again
    clock[0] = HOUR.total_seconds()
    assert keeper.maybe(now + HOUR) == 1  # the hour that settled since
    assert SettledHour.objects.count() == 23


@db
def test_settled_hours_past_two_days_are_forgotten(ledger: Any, now: datetime) -> None:
    settled_hours.settle_due(now=now - 3 * 24 * HOUR)
    assert SettledHour.objects.filter(hour__lt=now - 2 * 24 * HOUR).exists()
    settled_hours.settle_due(now=now)
    assert not SettledHour.objects.filter(hour__lt=now - 2 * 24 * HOUR).exists()


@db
def test_lag_percentiles_interpolate_start_minus_due(ledger: Any, now: datetime) -> None:
    lag = overview.lag_percentiles(now=now)
    # started within the last hour, lags: 0 s, 1 s, 2 s (the 4 s one is 90 minutes old)
    assert lag[0.5] == pytest.approx(1.0)
    assert lag[0.99] == pytest.approx(1.98)
    assert overview.lag_percentiles(now=now, within=24 * HOUR)[0.5] == pytest.approx(1.5)


@db
def test_lag_percentiles_are_empty_without_started_executions(now: datetime) -> None:
    assert overview.lag_percentiles(now=now) == {0.5: None, 0.95: None, 0.99: None}


@db
def test_owner_scoping_hides_other_owners_work(
    ledger: Any, now: datetime, django_user_model: Any, make_job: Callable[..., Job]
) -> None:
    stranger = django_user_model.objects.create(username="stranger")
    theirs = make_job(name="theirs", owner=stranger)
    execution(theirs, due=now - 10 * MINUTE, status="failed", finished_at=now - 9 * MINUTE)
    assert overview.recent_failures(now=now).count == 2
    assert overview.recent_failures(now=now, owner_id=stranger.pk).count == 1
    assert overview.running(now=now, owner_id=stranger.pk).count == 0
    assert overview.lag_percentiles(now=now, owner_id=stranger.pk)[0.5] is None


# --- the page ---------------------------------------------------------------------------------


@pytest.fixture
def staff(django_user_model: Any) -> Any:
    """Staff who may look at jobs and executions, as the dashboard asks."""
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(codename__in=["view_job", "view_execution"])
    )
    return user


@db
def test_dashboard_is_for_staff_only(client: Any, django_user_model: Any) -> None:
    assert client.get("/dashboard/").status_code == 302  # to the login page
    django_user_model.objects.create_user("plain", password="pw")
    client.login(username="plain", password="pw")
    response = client.get("/dashboard/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


@db
def test_dashboard_shows_every_panel_to_a_superuser(
    client: Any, admin_user: Any, make_job: Callable[..., Job]
) -> None:
    from django.utils import timezone

    job = make_job(name="nightly-report")
    now = timezone.now()
    execution(job, due=now - MINUTE, status="failed", finished_at=now, last_error="boom")
    client.force_login(admin_user)
    page = client.get("/dashboard/").content.decode()
    for panel in ("panel-due", "panel-running", "panel-late", "panel-stale", "panel-failures"):
        assert f'id="{panel}"' in page
    assert "nightly-report" in page and "boom" in page
    assert "<svg" in page and "<rect" in page
    assert "no scheduler has ticked yet" in page


@db
def test_dashboard_shows_a_staff_user_only_their_own_jobs(
    client: Any, staff: Any, make_job: Callable[..., Job]
) -> None:
    from django.utils import timezone

    now = timezone.now()
    mine = make_job(name="mine", owner=staff)
    other = make_job(name="someone-elses")
    execution(mine, due=now - MINUTE, status="failed", finished_at=now)
    execution(other, due=now - MINUTE, status="failed", finished_at=now)
    client.force_login(staff)
    page = client.get("/dashboard/").content.decode()
    assert "mine" in page and "someone-elses" not in page
    assert "your jobs only" in page


@db
def test_admin_index_links_the_dashboard(client: Any, admin_user: Any) -> None:
    client.force_login(admin_user)
    assert 'href="/dashboard/"' in client.get("/admin/").content.decode()


# --- every read is served by an index ----------------------------------------------------------


def panel_queries(now: datetime, owner_id: int | None = None) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        overview.due_soon(now=now, owner_id=owner_id, limit=1)
        overview.running(now=now, owner_id=owner_id, limit=1)
        overview.stale(now=now, owner_id=owner_id, limit=1)
        overview.late(now=now, owner_id=owner_id, limit=1)
        overview.recent_failures(now=now, owner_id=owner_id, limit=1)
        overview.item_failures(now=now, owner_id=owner_id, limit=1)
        overview.executions_per_hour(now=now, owner_id=owner_id)
        overview.lag_percentiles(now=now, owner_id=owner_id)
        overview.recent_by_status(now=now)
        overview.recent_by_status(now=now, enqueued_only=True)
        overview.unfinished_by_status()
        overview.stale_count(now=now)
        overview.oldest_due(now=now)
    return [q["sql"] for q in captured.captured_queries]


@db
def test_no_panel_reads_the_whole_execution_or_job_table(ledger: Any, now: datetime) -> None:
    """With sequential scans priced out, every panel still finds an index to read."""
    if connection.vendor != "postgresql":
        pytest.skip("plans are PostgreSQL's")
    queries = panel_queries(now)
    assert len(queries) >= 11
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        for sql in queries:
            cursor.execute(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "Seq Scan on scheduling_execution" not in plan, (sql, plan)
            assert "Seq Scan on scheduling_job" not in plan, (sql, plan)
