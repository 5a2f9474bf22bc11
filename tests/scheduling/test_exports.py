"""``manage.py executions --jsonl``, ``--since`` and ``--until``: history out in bulk.

An export holds every matching execution, oldest first by ``(scheduled_for, id)``, one JSON
object a line with the fields of ``--json``, with no row cap, read a page at a time; a window
includes ``--since`` and excludes ``--until``, so adjacent windows concatenate with neither
overlap nor gap; the window and the other filters combine in every view; a bad instant is
refused naming its option.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.commandline import exports
from scheduling.models import Execution, ExecutionStatus, Job
from scheduling.stages import selectors

pytestmark = [pytest.mark.django_db, pytest.mark.specification]
#: The execution table as this database quotes it in the statements a test reads.
EXECUTION_TABLE = connection.ops.quote_name("scheduling_execution")

MakeJob = Callable[..., Job]
SECOND = timedelta(seconds=1)
START = datetime(2026, 11, 1, tzinfo=UTC)


def call(*argv: str) -> str:
    out = StringIO()
    call_command("executions", *argv, stdout=out, stderr=StringIO())
    return out.getvalue()


def exported(*argv: str) -> list[dict[str, Any]]:
    """The objects ``--jsonl`` wrote, each line parsed on its own."""
    text = call("--jsonl", *argv)
    assert text == "" or text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def refusal(*argv: str) -> str:
    with pytest.raises(CommandError) as caught:
        call(*argv)
    message = str(caught.value)
    assert "\n" not in message
    return message


def runs(job: Job, *moments: datetime, status: str = ExecutionStatus.COMPLETED) -> list[int]:
    """Executions of ``job`` due at ``moments``, written as the history holds them."""
    made = Execution.objects.bulk_create(
        Execution(job=job, task=job.task, scheduled_for=at, status=status, worker="w@host")
        for at in moments
    )
    return [e.pk for e in made]


def keys(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(r["scheduled_for"], r["id"]) for r in rows]


def test_an_export_holds_every_row_oldest_first_past_the_listing_cap(make_job: MakeJob) -> None:
    job = make_job(name="busy")
    count = selectors.MAX_LISTED + 1
    runs(job, *(START + i * SECOND for i in range(count)))
    rows = exported()
    assert len(rows) == count
    assert keys(rows) == sorted(keys(rows))
    assert rows[0]["scheduled_for"] == START.isoformat()
    assert len(json.loads(call("--json"))) == 50  # the listing keeps its default and its cap


def test_an_export_reads_a_page_at_a_time_in_a_total_order(
    make_job: MakeJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows due at one instant (several jobs) are ordered by id, and no page repeats or
    skips one where a page ends between them."""
    monkeypatch.setattr(exports, "PAGE_SIZE", 7)
    jobs = [make_job(name=f"j{i}") for i in range(3)]
    for minute in range(10):
        for job in jobs:
            runs(job, START + timedelta(minutes=minute))
    with CaptureQueriesContext(connection) as queries:
        rows = exported()
    assert len(rows) == 30
    expected = list(
        Execution.objects.order_by("scheduled_for", "id").values_list("id", flat=True)
    )
    assert [r["id"] for r in rows] == expected
    pages = [q for q in queries.captured_queries if f"FROM {EXECUTION_TABLE}" in q["sql"]]
    assert len(pages) == 5  # 7 + 7 + 7 + 7 + 2: the short page is the last


def test_every_line_names_its_job_when_the_export_has_met_more_jobs_than_it_keeps(
    make_job: MakeJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The names of the jobs met are kept up to a bound; past it they are read again, those
    of the page in hand included."""
    monkeypatch.setattr(exports, "PAGE_SIZE", 2)
    monkeypatch.setattr(selectors, "_JOBS_KEPT", 2)
    first, second, third = (make_job(name=f"j{i}") for i in range(3))
    runs(first, START)
    runs(second, START + SECOND)
    runs(third, START + 2 * SECOND)
    runs(first, START + 3 * SECOND)
    rows = exported()
    assert [r["job"] for r in rows] == ["j0", "j1", "j2", "j0"]


def test_each_line_is_the_json_views_object_for_that_execution(
    make_job: MakeJob, now: datetime
) -> None:
    job = make_job(name="nightly")
    runs(job, now, now + SECOND)
    failed = Execution.objects.get(scheduled_for=now + SECOND)
    failed.status, failed.last_error = ExecutionStatus.FAILED, "RuntimeError: boom\n  File x"
    failed.started_at, failed.finished_at = now + 2 * SECOND, now + 3 * SECOND
    failed.checkpoint, failed.result = {"page": 3}, {"value": [1, "ü"]}
    failed.save()
    listed = json.loads(call("--json"))
    assert exported() == list(reversed(listed))  # the same objects, oldest first
    line = call("--jsonl").splitlines()[1]
    assert json.loads(line)["started_at"] == (now + 2 * SECOND).isoformat()  # with its offset


def test_since_is_included_and_until_is_not_in_every_view(make_job: MakeJob) -> None:
    job = make_job(name="edges")
    since, until = START, START + timedelta(days=30)
    tiny = timedelta(microseconds=1)
    before, first, last, at_until = runs(job, since - tiny, since, until - tiny, until)
    window = ("--since", since.isoformat(), "--until", until.isoformat())
    assert [r["id"] for r in exported(*window)] == [first, last]
    assert [r["id"] for r in json.loads(call(*window, "--json"))] == [last, first]
    assert len(call(*window).splitlines()) == 2
    assert [r["id"] for r in exported("--since", since.isoformat())] == [first, last, at_until]
    assert [r["id"] for r in exported("--until", until.isoformat())] == [before, first, last]


def test_adjacent_windows_concatenate_without_overlap_or_gap(
    make_job: MakeJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exports, "PAGE_SIZE", 4)
    for name in ("a", "b"):
        job = make_job(name=name)
        runs(job, *(START + timedelta(hours=6 * i) for i in range(20)))
    bounds = ["2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z", "2026-11-03T06:00:00Z", "2026-11-06"]
    parts = [
        exported("--since", a, "--until", b, "--tz", "UTC")
        for a, b in itertools.pairwise(bounds)
    ]
    whole = exported("--since", bounds[0], "--until", bounds[-1], "--tz", "UTC")
    assert [r["id"] for part in parts for r in part] == [r["id"] for r in whole]
    assert len(whole) == 2 * 20


def test_a_date_alone_is_midnight_in_the_listings_zone(make_job: MakeJob, settings: Any) -> None:
    settings.TIME_ZONE = "Europe/Berlin"
    job = make_job(name="berlin")
    midnight = datetime(2026, 10, 31, 23, 0, tzinfo=UTC)  # 2026-11-01 00:00 in Berlin (CET)
    _before, inside, last, after = runs(
        job, midnight - SECOND, midnight, datetime(2026, 11, 30, 22, 59, 59, tzinfo=UTC),
        datetime(2026, 11, 30, 23, 0, tzinfo=UTC),
    )
    november = ("--since", "2026-11-01", "--until", "2026-12-01")
    assert [r["id"] for r in exported(*november)] == [inside, last]
    in_utc = exported(*november, "--tz", "UTC")  # --tz names the zone the dates are read in
    assert [r["id"] for r in in_utc] == [last, after]


def test_the_window_combines_with_job_owner_status_and_limit(
    make_job: MakeJob, django_user_model: Any
) -> None:
    mine = make_job(name="mine")
    theirs = make_job(name="theirs", owner=django_user_model.objects.create(username="bob"))
    times = [START + timedelta(hours=i) for i in range(6)]
    done = runs(mine, *times[:3])
    failed = runs(mine, *times[3:], status=ExecutionStatus.FAILED)
    runs(theirs, *times)
    window = ("--since", times[1].isoformat(), "--until", times[5].isoformat())
    assert [r["id"] for r in exported(*window, "--job", "mine")] == done[1:] + failed[:2]
    assert [r["id"] for r in exported(*window, "--job", "mine", "--status", "failed")] == failed[
        :2
    ]
    assert {r["job"] for r in exported(*window, "--owner", "bob")} == {"theirs"}
    assert len(exported(*window, "--owner", "bob")) == 4
    assert [r["id"] for r in exported(*window, "--job", "mine", "--limit", "2")] == done[1:]
    listed = json.loads(call(*window, "--job", "mine", "--status", "completed", "--json"))
    assert [r["id"] for r in listed] == [done[2], done[1]]


def test_an_export_of_nothing_writes_nothing(make_job: MakeJob) -> None:
    make_job(name="idle")
    assert call("--jsonl") == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--since", "last tuesday"], "since (--since): 'last tuesday' is not an ISO-8601 date"),
        (["--until", "2026-11-01T00:00"], "until (--until): '2026-11-01T00:00' has no offset"),
        (["--since", "2026-02-30"], "since (--since): '2026-02-30' is not a date in the calendar"),
        (
            ["--since", "2026-12-01", "--until", "2026-11-01", "--tz", "UTC"],
            "until (--until): 2026-11-01T00:00:00+00:00 is not after --since",
        ),
        (["--since", "0001-01-01", "--tz", "Asia/Tokyo"], "since (--since): '0001-01-01' falls"),
        (["--jsonl", "--json"], "--jsonl: not allowed with --json"),
        (["--jsonl", "--attempts"], "--jsonl: not allowed with --attempts"),
        (["--jsonl", "--limit", "0"], "--limit: '0' is not a whole number from 1 to 10,000"),
    ],
)
def test_bad_windows_and_options_are_refused_naming_the_option(
    argv: list[str], message: str
) -> None:
    assert refusal(*argv).startswith(message)


def test_a_refused_instant_says_which_forms_are_taken() -> None:
    message = refusal("--since", "soon", "--tz", "Europe/Paris")
    assert "is not an ISO-8601 date-time such as 2030-01-01T09:00:00Z" in message
    assert message.endswith("or give a date alone (2026-11-01: its midnight in Europe/Paris)")


@pytest.mark.postgres
def test_a_time_past_the_calendars_end_is_exported_once_and_the_export_ends(
    make_job: MakeJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL holds ``infinity``, which Python reads as the calendar's last instant: the
    page after such a row starts from the stored time, not from the one Python read."""
    monkeypatch.setattr(exports, "PAGE_SIZE", 2)
    job = make_job(name="far")
    ids = runs(job, START, START + SECOND)
    with connection.cursor() as cursor:
        for offset in (1, 2, 3):
            cursor.execute(
                "INSERT INTO scheduling_execution (job_id, task, scheduled_for, status,"
                " retry_count, task_id, worker, created_at, last_error, duplicates,"
                " item_failures, item_failure_detail, updated_at) SELECT %s, %s,"
                " CASE WHEN %s = 3 THEN 'infinity'::timestamptz"
                " ELSE '12000-01-01'::timestamptz + %s * interval '1 day' END, 'completed', 0,"
                " gen_random_uuid(), '', now(), '', 0, 0, '', now() RETURNING id",
                [job.pk, job.task, offset, offset],
            )
            ids.append(cursor.fetchone()[0])
    rows = exported()
    assert [r["id"] for r in rows] == ids
    assert rows[-1]["scheduled_for"] == "infinity"


@pytest.mark.django_db(databases=[])
def test_an_export_whose_reader_stops_early_ends_quietly() -> None:
    """``... --jsonl | head -1``: the pipe closes after the first line; the writer stops at
    the next page, with no traceback and no complaint from the interpreter's exit."""
    script = (
        "import sys\n"
        "from scheduling.commandline.exports import write_jsonl\n"
        "pages = ([{'id': n, 'pad': 'x' * 100} for n in range(1000)] for _ in range(100))\n"
        "write_jsonl(sys.stdout.write, pages)\n"
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert writer.stdout is not None
    first = writer.stdout.readline()
    writer.stdout.close()
    _, errors = writer.communicate(timeout=60)
    assert json.loads(first) == {"id": 0, "pad": "x" * 100}
    assert errors == b""
    assert writer.returncode == 0
