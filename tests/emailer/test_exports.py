"""``emailer history`` and ``emailer deliveries`` exported: ``--jsonl``, ``--since``, ``--until``.

Every run or delivery of the window, oldest first by its due time and id, one JSON object a
line with the fields of ``--json``, with no row cap, a page at a time; the window also narrows
the listings; a bad instant is refused naming its option.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from emailer.models import Delivery, DeliveryState, Participant, SendEmailHistory, SendEmailTask
from scheduling.commandline import exports
from tests.emailer.conftest import address

pytestmark = [pytest.mark.django_db, pytest.mark.specification]

START = datetime(2026, 11, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def emailer(*args: str) -> str:
    out = StringIO()
    call_command("emailer", *args, stdout=out)
    return out.getvalue()


def exported(*args: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in emailer(*args, "--jsonl").splitlines()]


@pytest.fixture
def task(make_project: Any, make_task: Any) -> SendEmailTask:
    return make_task(make_project(participants=3))


def run_at(task: SendEmailTask, due: datetime, *, execution: int) -> SendEmailHistory:
    """A run of ``task`` due at ``due`` that mailed every participant."""
    run = SendEmailHistory.objects.create(
        task=task,
        execution_id=execution,
        scheduled_batch_start_time=due,
        started_at=due + timedelta(seconds=1),
        finished_at=due + timedelta(seconds=5),
        status="completed",
        sent=3,
        updated_at=due + timedelta(seconds=5),
    )
    Delivery.objects.bulk_create(
        Delivery(
            task=task,
            occurrence=due,
            participant=person,
            history=run,
            email=person.email,
            state=DeliveryState.SENT,
            reply="250 OK",
            claimed_at=due + timedelta(seconds=1),
            finished_at=due + timedelta(seconds=2),
        )
        for person in Participant.objects.filter(project=task.project).order_by("email")
    )
    return run


@pytest.fixture
def four_runs(task: SendEmailTask) -> list[SendEmailHistory]:
    """Runs due at START - 1 h, START, START + 1 h and START + 2 h."""
    return [run_at(task, START + i * HOUR, execution=9000 + i) for i in range(-1, 3)]


def test_history_exports_every_run_of_the_window_oldest_first(
    four_runs: list[SendEmailHistory], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exports, "PAGE_SIZE", 1)
    window = ("--since", START.isoformat(), "--until", (START + 2 * HOUR).isoformat())
    rows = exported("history", *window)
    assert [r["id"] for r in rows] == [four_runs[1].pk, four_runs[2].pk]
    assert rows[0]["scheduled_batch_start_time"] == START.isoformat()
    listed = json.loads(emailer("history", *window, "--json"))
    assert exported("history", *window) == list(reversed(listed))  # the --json objects
    assert len(exported("history")) == 4
    assert [r["id"] for r in exported("history", "--limit", "1")] == [four_runs[0].pk]
    assert len(emailer("history", *window).splitlines()) == 3  # headers and two runs


def test_deliveries_export_every_delivery_of_the_window_past_the_listing_default(
    make_project: Any, make_task: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More deliveries than the listing shows by default (100), read two at a time."""
    monkeypatch.setattr(exports, "PAGE_SIZE", 2)
    task = make_task(make_project(participants=35))
    for i in range(4):
        run_at(task, START + i * HOUR, execution=9100 + i)
    assert len(json.loads(emailer("deliveries", "--task", "invite", "--json"))) == 100
    rows = exported("deliveries", "--task", "invite")
    assert len(rows) == 140
    assert [(r["occurrence"], r["email"]) for r in rows] == sorted(
        (r["occurrence"], r["email"]) for r in rows
    )
    assert set(rows[0]) == set(json.loads(emailer("deliveries", "--task", "invite", "--json"))[0])
    window = exported(
        "deliveries", "--task", "invite", "--since", (START + HOUR).isoformat(),
        "--until", (START + 3 * HOUR).isoformat(),
    )
    assert {r["occurrence"] for r in window} == {
        (START + HOUR).isoformat(), (START + 2 * HOUR).isoformat(),
    }
    assert len(window) == 70
    assert exported("deliveries", "--task", "invite", "--state", "failed") == []
    assert [r["email"] for r in exported("deliveries", "--task", "invite", "--limit", "2")] == [
        address(0), address(1),
    ]


def test_a_date_alone_is_midnight_in_the_projects_zone(
    task: SendEmailTask, settings: Any
) -> None:
    settings.TIME_ZONE = "America/New_York"
    before = run_at(task, datetime(2026, 11, 1, 3, 59, tzinfo=UTC), execution=9200)
    inside = run_at(task, datetime(2026, 11, 1, 4, 0, tzinfo=UTC), execution=9201)  # 00:00 EDT
    assert before.pk != inside.pk
    assert [r["id"] for r in exported("history", "--since", "2026-11-01")] == [inside.pk]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("history", "--since", "yesterday"), "since (--since): 'yesterday' is not an ISO-8601"),
        (
            ("deliveries", "--task", "invite", "--until", "2026-11-01T09:00"),
            "until (--until): '2026-11-01T09:00' has no offset",
        ),
        (
            ("history", "--since", "2026-11-02T00:00Z", "--until", "2026-11-01T00:00Z"),
            "until (--until): 2026-11-01T00:00:00+00:00 is not after --since",
        ),
        (("history", "--jsonl", "--json"), "--jsonl: not allowed with --json"),
    ],
)
def test_bad_windows_are_refused_naming_the_option(
    task: SendEmailTask, args: tuple[str, ...], message: str
) -> None:
    with pytest.raises(CommandError) as caught:
        emailer(*args)
    assert str(caught.value).startswith(message)

