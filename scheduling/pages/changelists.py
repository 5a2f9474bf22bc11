"""Admin lists answer any query string as a list, never as a server error.

Django's list page answers a filter it cannot build (an unknown field, text where a number
belongs) by redirecting to the unfiltered list with ``?e=1``. Some values pass that check and
fail only when the list's query is compiled or run: a date part outside the calendar
(``created_at__year=99999``: Django computes the year's bounds while it compiles), a date
hierarchy on the calendar's last day (the next one is past the year 9999), a number past what
the column holds, text PostgreSQL cannot hold (a NUL). ``SafeListAdmin``, mixed into a
``ModelAdmin`` (the engine's, and a domain app's through ``scheduling.api``), answers those the
way Django answers a bad filter: text no row can hold is refused before the database sees it,
and an error of the value while the list is counted (in a savepoint, so a request inside a
transaction can go on) is a bad filter too. A search term no row can hold finds nothing.

``breakable`` is how a list's cell wraps a long name rather than widening the table.
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError
from django.db import DataError, router, transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from scheduling.rules.validation import storable

#: What a filter's value raises when the query is compiled or run, rather than when it is
#: read: ``ValueError`` (a year Python's dates cannot hold), ``OverflowError`` (a step past
#: the year 9999), ``DataError`` (a value the column's type cannot hold), ``ValidationError``
#: (a value a field refuses as it prepares it).
BAD_VALUE_ERRORS = (DataError, OverflowError, ValueError, ValidationError)


class SafeListAdmin:
    """A ``ModelAdmin`` mixin: any filter value in a list's URL is answered as Django
    answers a bad filter (the unfiltered list, ``?e=1``), never with a 500."""

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        for key, values in request.GET.lists():
            if not all(storable(text) for text in (key, *values)):
                raise IncorrectLookupParameters(f"{key}: holds text no row can hold")
        model = self.model  # type: ignore[attr-defined]
        try:
            with transaction.atomic(using=router.db_for_read(model)):
                return super().get_changelist_instance(request)  # type: ignore[misc]
        except BAD_VALUE_ERRORS as exc:
            raise IncorrectLookupParameters(str(exc)) from exc

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        if not storable(search_term):
            return queryset.none(), False
        return super().get_search_results(  # type: ignore[misc]
            request, queryset, search_term
        )


#: A break opportunity (``<wbr>``) after each dot, underscore, slash and at-sign of a name.
_AFTER_DOTS = re.compile(r"(?<=[._/@])")
#: The longest run without a space that a list column (at least 120 px) holds whole: shorter
#: runs ("(Europe/Paris)") are left as they are written.
_HELD_WHOLE = 16
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def breakable(name: str) -> str:
    """``name`` (a dotted task name, a zone such as America/Argentina/Buenos_Aires, an
    address) as HTML that may wrap after a dot, an underscore, a slash or an at-sign rather
    than inside a word, where a narrow list column needs it to wrap at all: browsers offer no
    break there by themselves, and a column is never narrower than its longest unbroken run
    (``scheduling/duecourse.css``). A word a column holds whole is left as written."""
    words = name.split(" ")
    return format_html_join(" ", "{}", ((_breakable_word(word),) for word in words))


def _breakable_word(word: str) -> str:
    if _DATE.search(word):  # a browser breaks "2026-11-30" at a hyphen; a date stays whole
        return format_html('<span class="dc-whole">{}</span>', word)
    if len(word) <= _HELD_WHOLE:
        return word
    pieces = ((part,) for part in _AFTER_DOTS.split(word))
    return format_html_join(format_html("<wbr>{}", ""), "{}", pieces)
