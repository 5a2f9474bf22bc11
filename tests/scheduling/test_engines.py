"""The ledger's engines: one per database, chosen once per connection, their SQL in named
statements that are all used."""

from __future__ import annotations

import inspect
import re
import uuid
from collections.abc import Callable
from datetime import datetime

import pytest
from django.db import connection, connections

from scheduling.ledger import engines, named
from scheduling.ledger.engines import engine, orm, postgresql, postgresql_history
from scheduling.models import EXECUTION_UNFINISHED, Execution, ExecutionStatus, Job, Schedule

pytestmark = [pytest.mark.django_db, pytest.mark.specification]


def test_the_engine_is_chosen_once_per_connection_for_its_database() -> None:
    chosen = engine()
    assert chosen is engine() is engine(connections["default"])
    assert chosen.vendor == connection.vendor
    assert type(chosen) is engines.engine.makers[connection.vendor]


@pytest.mark.parametrize(
    ("statements", "modules"),
    [
        (postgresql.STATEMENTS, (postgresql,)),
        (postgresql_history.STATEMENTS, (postgresql_history,)),
        (orm.STATEMENTS, (orm,)),
    ],
)
def test_every_named_statement_is_used_by_its_engine(statements: object, modules: tuple) -> None:
    source = "\n".join(inspect.getsource(module) for module in modules)
    used = set(re.findall(r'"([a-z_]+)"', source))
    assert set(statements) - used == set()  # type: ignore[call-overload]


def test_a_statement_must_say_what_it_does_and_be_named_once() -> None:
    with pytest.raises(named.BadStatementFile, match="no line saying what it does"):
        named.parse("-- name: bare\nSELECT 1", form="shared")
    with pytest.raises(named.BadStatementFile, match="named twice"):
        named.parse("-- name: a\n-- One.\nSELECT 1\n-- name: a\n-- Two.\nSELECT 2", form="shared")
    parsed = named.parse(
        "-- The file.\n\n-- name: one\n-- The number one.\n-- columns: one\nSELECT 1 AS one\n",
        form="shared",
    )
    assert parsed["one"].shared == "SELECT 1 AS one"
    assert parsed["one"].columns == ("one",)


def test_a_dropped_period_keeps_every_unfinished_state_the_models_name() -> None:
    text = postgresql_history.STATEMENTS["keep_current"].postgresql or ""
    kept = set(re.findall(r"e\.status = '([a-z]+)'", text))
    assert kept == {str(status) for status in EXECUTION_UNFINISHED}


def test_a_schedule_is_dropped_only_while_no_job_uses_it(
    make_job: Callable[..., Job], owner: object
) -> None:
    used = make_job(every="PT1H").schedule
    unused = Schedule.objects.create(owner=owner, interval="PT2H")
    assert not engine().drop_unused_schedule(used.pk)
    assert engine().drop_unused_schedule(unused.pk)
    assert list(Schedule.objects.values_list("pk", flat=True)) == [used.pk]


def test_an_ad_hoc_call_is_recorded_once_by_its_message_id(now: datetime) -> None:
    message = str(uuid.uuid4())
    first = engine().record_adhoc_call(task="scheduling.diagnostics.noop", task_id=message, now=now)
    again = engine().record_adhoc_call(task="scheduling.diagnostics.noop", task_id=message, now=now)
    assert first == again
    row = Execution.objects.get(task_id=message)
    assert (row.pk, row.job_id, row.status) == (first, None, ExecutionStatus.QUEUED)
    assert row.queued_at == row.scheduled_for == now
