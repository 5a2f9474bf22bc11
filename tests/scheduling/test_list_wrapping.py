"""A list's cell wraps a long name rather than widen the table past its box
(``scheduling.pages.changelists.breakable``): after a dot, an underscore, a slash or an at-sign of
a run too long for a column, never inside a date, and a word a column holds whole is left as
written."""

from __future__ import annotations

from scheduling.pages.changelists import breakable


def test_a_long_dotted_name_may_wrap_after_each_dot() -> None:
    assert str(breakable("scheduling.diagnostics.noop")) == (
        "scheduling.<wbr>diagnostics.<wbr>noop"
    )


def test_a_short_word_is_left_as_written() -> None:
    text = "at 09:00, Monday through Friday (Europe/Paris)"
    assert str(breakable(text)) == text


def test_a_date_in_a_text_stays_whole() -> None:
    assert str(breakable("once at 2026-11-30 18:00")) == (
        'once at <span class="dc-whole">2026-11-30</span> 18:00'
    )


def test_an_address_may_wrap_after_its_at_sign_and_dots_and_is_escaped() -> None:
    shown = str(breakable("2 (accounts@bistro.example.com) <b>"))
    assert shown == "2 (accounts@<wbr>bistro.<wbr>example.<wbr>com) &lt;b&gt;"
