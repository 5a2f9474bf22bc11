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
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError
from django.db import DataError, router, transaction
from django.db.models import QuerySet
from django.http import HttpRequest

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
