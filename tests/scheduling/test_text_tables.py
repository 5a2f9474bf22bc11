"""The commands' tables line up on screen whatever the script of a name.

``jobs list`` once padded names by their count of characters, so a name in CJK characters
(two cells each in a terminal) pushed every column after it out of line.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from scheduling.commandline.options import text_table
from scheduling.timing.readable import display_width, pad


def columns_start_at(line: str, values: list[str]) -> list[int]:
    """The screen column at which each of ``values`` starts in ``line``."""
    starts, at = [], 0
    for value in values:
        index = line.index(value, at)
        starts.append(display_width(line[:index]))
        at = index + len(value)
    return starts


@pytest.mark.parametrize(
    ("text", "width"),
    [
        ("report", 6),
        ("日報", 4),
        ("\uff52\uff45\uff50\uff4f\uff52\uff54", 12),  # full-width "report"
        ("café", 4),
        ("cafe\u0301", 4),  # e and a combining acute accent
        ("", 0),
    ],
)
def test_display_width_counts_wide_characters_twice_and_combining_marks_not_at_all(
    text: str, width: int
) -> None:
    assert display_width(text) == width
    assert display_width(pad(text, 14)) == 14


def test_a_table_aligns_wide_names_with_ascii_ones() -> None:
    table = text_table(("NAME", "STATUS"), [("日次レポート", "active"), ("nightly", "paused")])
    header, wide, narrow = table.splitlines()
    assert columns_start_at(header, ["NAME", "STATUS"]) == [0, 14]
    assert columns_start_at(wide, ["日次レポート", "active"]) == [0, 14]
    assert columns_start_at(narrow, ["nightly", "paused"]) == [0, 14]


@pytest.mark.django_db
def test_jobs_list_aligns_a_cjk_name_with_the_others(admin_user: Any) -> None:
    for name in ("日次レポート", "nightly-report"):
        call_command(
            "jobs", "add", name, "--task", "scheduling.diagnostics.noop", "--every", "PT1H",
            stdout=StringIO(),
        )
    out = StringIO()
    call_command("jobs", "list", stdout=out)
    lines = out.getvalue().splitlines()
    owner_column = {
        columns_start_at(line, [admin_user.username])[0]
        for line in lines
        if admin_user.username in line
    }
    assert len(owner_column) == 1, out.getvalue()
