"""``/health/``, ``/metrics`` and the scheduler ticks they are built on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from config.celery import app
from scheduling.models import Execution, Job, SchedulerState, SettledHour
from scheduling.scheduler.loop import Dispatcher
from scheduling.stages import ticks
from tests.conftest import celery_settings, free_port

db = pytest.mark.django_db
SECOND = timedelta(seconds=1)


@pytest.fixture(autouse=True)
def fresh_liveness(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test's scheduler starts with nothing unwritten, as a new process does."""
    settings.SCHEDULING_SCHEDULER_NAME = "test-scheduler"
    monkeypatch.setattr(ticks, "_local", None)
    yield


def ticked(seconds_ago: float = 0.0) -> None:
    ticks.record_tick(
        stats={"claimed": 7, "republished": 2, "reaped": 1},
        seconds=0.004,
        now=timezone.now() - seconds_ago * SECOND,
    )


# --- ticks -------------------------------------------------------------------------------------


@db
@pytest.mark.specification  # one upsert, written for every database
def test_a_tick_is_written_at_most_once_per_interval(settings: Any) -> None:
    settings.SCHEDULING_SCHEDULER_NAME = "test-scheduler"
    settings.SCHEDULING_LIVENESS_INTERVAL = 60
    stats = {"claimed": 0, "republished": 0, "reaped": 0}
    assert ticks.record_tick(stats=stats, seconds=0.01)
    stats["reaped"] = 3
    assert not ticks.record_tick(stats=stats, seconds=0.5)
    row = SchedulerState.objects.get(name="test-scheduler")
    assert row.reaped_total == 0 and row.ticks_total == 1
    settings.SCHEDULING_SCHEDULER_NAME = "test-scheduler"
    settings.SCHEDULING_LIVENESS_INTERVAL = 0
    assert ticks.record_tick(stats=stats, seconds=0.02)
    row.refresh_from_db()
    assert row.reaped_total == 3 and row.ticks_total == 3
    assert row.last_tick_seconds == 0.5  # the longest tick since the previous write


@db
def test_a_failed_liveness_write_never_stops_the_scheduler(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def unmigrated(*args: Any) -> None:
        raise DatabaseError('relation "scheduling_schedulerstate" does not exist')

    monkeypatch.setattr(ticks, "_write", unmigrated)
    assert ticks.record_tick(stats={}, seconds=0.01) is False
    assert "ticks.write_failed" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_every_dispatcher_tick_records_the_scheduler(make_job: Callable[..., Job]) -> None:
    dispatcher = Dispatcher(app)
    try:
        dispatcher.tick()
    finally:
        dispatcher.close()
    row = SchedulerState.objects.get(name="test-scheduler")
    assert (timezone.now() - row.last_tick_at) < 5 * SECOND
    assert ticks.last_tick() == row.last_tick_at
    # and counts the dashboard's settled hours, so that no page has to
    assert SettledHour.objects.count() == 22


# --- /health/ ---------------------------------------------------------------------------------


@db
def test_health_is_ok_with_a_recent_tick(admin_client: Any) -> None:
    ticked()
    response = admin_client.get("/health/")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "ok"
    assert set(body["checks"]) == {
        "database",
        "broker",
        "scheduler",
        "stale_executions",
        "queues",
        "unknown_tasks",
    }
    assert body["checks"]["scheduler"]["age_seconds"] < 5
    assert body["checks"]["stale_executions"]["count"] == 0


@db
def test_health_fails_when_no_scheduler_ever_ticked(admin_client: Any) -> None:
    response = admin_client.get("/health/")
    assert response.status_code == 503
    assert response.json()["checks"]["scheduler"] == {
        "ok": False,
        "last_tick_at": None,
        "error": "no scheduler has ticked",
        "ms": response.json()["checks"]["scheduler"]["ms"],
    }


@db
def test_health_fails_when_the_last_tick_is_too_old(admin_client: Any, settings: Any) -> None:
    settings.SCHEDULING_SCHEDULER_NAME = "test-scheduler"
    settings.SCHEDULING_HEALTH_TICK_AGE = 30
    ticked(seconds_ago=45)
    response = admin_client.get("/health/")
    assert response.status_code == 503
    assert response.json()["checks"]["scheduler"]["ok"] is False


@db
def test_health_fails_while_stale_executions_go_unreaped(
    admin_client: Any, make_job: Callable[..., Job]
) -> None:
    ticked()
    job = make_job()
    now = timezone.now()
    Execution.objects.create(
        job=job,
        task=job.task,
        scheduled_for=now - 300 * SECOND,
        status="running",
        last_heartbeat_at=now - 200 * SECOND,  # STALE_AFTER is 60: twice that has passed
    )
    response = admin_client.get("/health/")
    assert response.status_code == 503
    assert response.json()["checks"]["stale_executions"] == {
        "ok": False,
        "count": 1,
        "unreaped": 1,
        "ms": response.json()["checks"]["stale_executions"]["ms"],
    }


@db
def test_health_fails_when_the_broker_does_not_answer(admin_client: Any, free_broker: str) -> None:
    ticked()
    response = admin_client.get("/health/")
    assert response.status_code == 503
    broker = response.json()["checks"]["broker"]
    assert broker["ok"] is False and broker["error"]


@db
def test_an_anonymous_probe_learns_which_component_is_down_and_nothing_more(
    client: Any, free_broker: str
) -> None:
    ticked()
    response = client.get("/health/")
    assert response.status_code == 503
    body = response.json()
    assert body["checks"] == {
        "database": {"ok": True},
        "broker": {"ok": False},
        "scheduler": {"ok": True},
        "stale_executions": {"ok": True},
        "queues": {"ok": True},
        "unknown_tasks": {"ok": True},
    }
    port = free_broker.rsplit(":", 1)[1].split("/")[0]
    assert port not in response.content.decode() and "Error" not in response.content.decode()


@pytest.fixture
def free_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Point the Celery app at a Redis port nobody listens on."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    # Celery reads CELERY_BROKER_URL from the environment before its own configuration.
    monkeypatch.setenv("CELERY_BROKER_URL", url)
    with celery_settings(app, broker_url=url):
        yield url


# --- /metrics ---------------------------------------------------------------------------------


def scrape(client: Any) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[key] = sample.value
    return samples


@db
def test_metrics_expose_executions_lag_and_scheduler_counters(
    client: Any, make_job: Callable[..., Job]
) -> None:
    ticked()
    job = make_job()
    now = timezone.now()
    for minutes, status, lag in (
        (10, "completed", 1.0),
        (20, "completed", 3.0),
        (30, "failed", 5.0),
    ):
        due = now - timedelta(minutes=minutes)
        Execution.objects.create(
            job=job,
            task=job.task,
            scheduled_for=due,
            status=status,
            started_at=due + lag * SECOND,
            finished_at=due + 10 * SECOND,
        )
    Execution.objects.create(job=job, task=job.task, scheduled_for=now, status="queued")
    metrics = scrape(client)
    assert metrics["duecourse_executions_unfinished"][(("status", "queued"),)] == 1
    assert metrics["duecourse_executions_last_hour"][(("status", "completed"),)] == 2
    assert metrics["duecourse_executions_last_hour"][(("status", "failed"),)] == 1
    assert metrics["duecourse_dispatch_lag_seconds"][(("quantile", "0.5"),)] == pytest.approx(3)
    scheduler = (("scheduler", "test-scheduler"),)
    assert metrics["duecourse_scheduler_republished_total"][scheduler] == 2
    assert metrics["duecourse_scheduler_reaped_total"][scheduler] == 1
    assert metrics["duecourse_scheduler_claimed_total"][scheduler] == 7
    assert metrics["duecourse_scheduler_tick_seconds"][scheduler] == pytest.approx(0.004)
    assert metrics["duecourse_stale_executions"][()] == 0
    assert metrics["duecourse_oldest_due_seconds"][()] >= 0


@db
def test_metrics_count_django_task_runs_apart_from_job_executions(
    client: Any, make_job: Callable[..., Job]
) -> None:
    job = make_job()
    due = timezone.now() - timedelta(minutes=10)
    Execution.objects.create(job=job, task=job.task, scheduled_for=due, status="completed")
    Execution.objects.create(
        task="reports.build", scheduled_for=due, status="completed", call={"queue": "default"}
    )
    metrics = scrape(client)
    assert metrics["duecourse_executions_last_hour"][(("status", "completed"),)] == 2
    assert metrics["duecourse_django_task_runs_last_hour"][(("status", "completed"),)] == 1


@db
def test_metrics_are_read_at_scrape_time(client: Any, make_job: Callable[..., Job]) -> None:
    job = make_job()
    assert scrape(client)["duecourse_executions_unfinished"][(("status", "running"),)] == 0
    Execution.objects.create(
        job=job,
        task=job.task,
        scheduled_for=timezone.now(),
        status="running",
        last_heartbeat_at=timezone.now(),
    )
    assert scrape(client)["duecourse_executions_unfinished"][(("status", "running"),)] == 1


def test_health_and_metrics_refuse_writes(client: Any) -> None:
    assert client.post("/health/").status_code == 405
    assert client.post("/metrics").status_code == 405


def test_liveness_answers_without_the_database(client: Any) -> None:
    response = client.get("/health/live/")  # no django_db mark: any query would fail the test
    assert response.status_code == 200 and response.json() == {"status": "ok"}
