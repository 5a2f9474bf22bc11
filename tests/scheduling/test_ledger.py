"""The ledger's runner: one place decides the database, runs a statement and names its rows."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.db import connection

from scheduling import ledger
from scheduling.ledger import ColumnsDiffer, NoForm, Statement

pytestmark = [pytest.mark.django_db, pytest.mark.specification]

BOTH = Statement.portable("SELECT 7 AS seven, 'x' AS letter")


@dataclass(frozen=True)
class Pair:
    seven: int
    letter: str


def test_rows_come_back_by_column_name_as_dicts_or_as_the_named_dataclass() -> None:
    assert ledger.rows(BOTH) == [{"seven": 7, "letter": "x"}]
    assert ledger.row(BOTH, into=Pair) == Pair(7, "x")
    assert ledger.value(BOTH) == 7


def test_named_parameters_reach_the_statement_on_every_database() -> None:
    echo = Statement.portable("SELECT %(a)s AS a, %(b)s AS b, %(a)s AS again")
    assert ledger.row(echo, {"a": 1, "b": "two"}) == {"a": 1, "b": "two", "again": 1}


def test_the_database_is_decided_once_per_connection() -> None:
    assert ledger.dialect() == connection.vendor
    assert ledger.dialect(connection) == connection.vendor


def test_a_statement_without_a_form_for_this_database_says_so() -> None:
    only_other = (
        Statement(postgresql="SELECT 1", sqlite=None)
        if ledger.dialect() == "sqlite"
        else Statement(postgresql=None, sqlite="SELECT 1")  # type: ignore[arg-type]
    )
    with pytest.raises(NoForm, match=f"no form for {connection.vendor}"):
        ledger.value(only_other)


def test_declared_columns_must_be_the_ones_the_text_returns() -> None:
    declared = Statement.portable("SELECT 1 AS one, 2 AS two", columns=("one", "two"))
    assert ledger.row(declared) == {"one": 1, "two": 2}
    assert ledger.row(declared) == {"one": 1, "two": 2}  # then read without the description
    wrong = Statement.portable("SELECT 1 AS one, 2 AS three", columns=("one", "two"))
    differ = r"declared \('one', 'two'\), returned \('one', 'three'\)"
    with pytest.raises(ColumnsDiffer, match=differ):
        ledger.row(wrong)


def test_execute_answers_how_many_rows_changed() -> None:
    from scheduling.models import SchedulerState

    table = SchedulerState._meta.db_table
    touch = Statement.portable(f"UPDATE {table} SET name = name WHERE name = %(name)s")
    assert ledger.execute(touch, {"name": "nobody"}) == 0
