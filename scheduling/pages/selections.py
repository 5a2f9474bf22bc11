"""Admin list actions refuse a selection that holds something other than ids.

Django filters the changelist by the selected values as they came, so a hand-made POST whose
selection holds text where an id belongs answers 500. ``IdSelectionAdmin``, mixed into a
``ModelAdmin`` (the engine's, and a domain app's through ``scheduling.api``), checks every
selected value against the model's primary key first and, if one is not an id, says so with
``refused_selection`` and changes nothing.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin import helpers
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest


class IdSelectionAdmin:
    """A ``ModelAdmin`` mixin: an action runs only on a selection of ids."""

    refused_selection = "The selection holds something that is not an id; nothing was done."

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> Any:
        pk = self.model._meta.pk  # type: ignore[attr-defined]
        try:
            for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
                pk.to_python(value)
        except ValidationError:
            self.message_user(  # type: ignore[attr-defined]
                request, self.refused_selection, level=messages.WARNING
            )
            return None  # Django redirects back to the list
        return super().response_action(  # type: ignore[misc]
            request, queryset, *args, **kwargs
        )
