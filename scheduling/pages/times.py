"""Times in admin pages by ``scheduling.timing.readable``'s rule, for the engine's admin and the
domain apps' (through ``scheduling.api``).

Django's admin shows a date-time field as "Nov. 25, 2026, 11:35 a.m.": to the minute, in
``TIME_ZONE``, with no zone named. ``ReadableTimesAdmin`` shows every date-time field of its
model, in the list and on the page, as the rest of the apps do: the instant to the second with
its zone named, and the time from now beside it ("2026-11-25 11:35:07 EST (in 5 min)"). It
swaps each such field, wherever the admin shows it read-only or in a list column, for a
``TimeColumn`` of the same name (same label, help text, CSS class and sort order).

The date-time fields a form edits get ``ZonedSplitDateTime``: Django's split date and time
with the zone named once beside it, instead of the admin script's "You are N hours ahead"
under every one of them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib.admin.widgets import AdminSplitDateTime
from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from scheduling.timing import readable


def shown(moment: datetime | None, now: datetime | None = None) -> SafeString | str:
    """A time in a page: "2026-11-25 11:35:07 EST (in 5 min)", in a ``<time>`` element that
    carries the instant for machines and names the zone in full on hover; "-" for none."""
    if moment is None:
        return "-"
    now = now or timezone.now()
    exact = readable.instant(moment)
    relative = "" if readable.is_far(moment, now) else f" ({readable.ago(moment, now)})"
    return format_html(
        '<time datetime="{}" title="{}">{}</time>{}',
        _machine(moment),
        readable.caption(),
        exact,
        relative,
    )


def _machine(moment: datetime) -> str:
    try:
        return moment.astimezone(UTC).isoformat(timespec="seconds")
    except (OverflowError, ValueError):
        return moment.isoformat(timespec="seconds")


class TimeColumn:
    """A model's date-time field as an admin shows it by ``shown``: a callable the admin
    accepts in ``list_display`` and ``readonly_fields``, named as the field is."""

    def __init__(self, field: models.DateTimeField) -> None:
        self.field = field
        self.__name__ = field.name
        self.__qualname__ = field.name
        self.short_description = field.verbose_name
        self.admin_order_field = field.name

    def __call__(self, obj: Any) -> SafeString | str:
        return shown(getattr(obj, self.field.attname, None))

    def __str__(self) -> str:
        return self.field.name

    def __repr__(self) -> str:
        return f"TimeColumn({self.field.model.__name__}.{self.field.name})"


_columns: dict[tuple[Any, str], TimeColumn | None] = {}


def time_column(model: Any, name: Any) -> Any:
    """``name``'s ``TimeColumn`` when it names a date-time field of ``model``; else ``name``.
    One column per field, so the admin finds the same object in every list it compares."""
    if not isinstance(name, str):
        return name
    key = (model, name)
    if key not in _columns:
        try:
            field = model._meta.get_field(name)
        except FieldDoesNotExist:
            field = None
        _columns[key] = TimeColumn(field) if isinstance(field, models.DateTimeField) else None
    return _columns[key] or name


class ZonedSplitDateTime(AdminSplitDateTime):
    """Django's split date and time with the zone named beside it, and without the admin
    script's "You are N hours ahead" note (see the template)."""

    template_name = "scheduling/widgets/zoned_split_datetime.html"

    def get_context(self, name: str, value: Any, attrs: Any) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        context["zone_caption"] = readable.zone_name()
        return context


def _mapped(names: Iterable[Any], swap: Any) -> list[Any]:
    return [tuple(_mapped(n, swap)) if isinstance(n, (list, tuple)) else swap(n) for n in names]


def _mapping(method: Any, *, takes_obj: bool) -> Any:
    """``method`` (a subclass's own ``get_list_display``, ``get_readonly_fields`` or
    ``get_fieldsets``) with its answer passed through ``ReadableTimesAdmin``'s swap."""
    swap = f"_times_{method.__name__}"
    if takes_obj:

        @functools.wraps(method)
        def with_obj(self: Any, request: HttpRequest, obj: Any = None) -> Any:
            return getattr(self, swap)(request, method(self, request, obj), obj)

        wrapped = with_obj
    else:

        @functools.wraps(method)
        def without_obj(self: Any, request: HttpRequest) -> Any:
            return getattr(self, swap)(request, method(self, request), None)

        wrapped = without_obj
    wrapped.readable_times = True  # type: ignore[attr-defined]
    return wrapped


#: The admin's answers that name fields, and whether each takes ``obj``.
_SWAPPED = {"get_list_display": False, "get_readonly_fields": True, "get_fieldsets": True}


class ReadableTimesAdmin:
    """Mix into a ``ModelAdmin`` or an inline, before it: its date-time fields read by
    ``scheduling.timing.readable``'s rule in lists and on pages, and edit with the zone named once
    (see the module docstring).

    A subclass may override ``get_list_display``, ``get_readonly_fields`` or
    ``get_fieldsets`` as usual, with or without ``super()``: its answer is swapped too
    (``__init_subclass__`` wraps the override), so no page of it shows Django's own format.
    """

    formfield_overrides = {
        models.DateTimeField: {"form_class": forms.SplitDateTimeField, "widget": ZonedSplitDateTime}
    }

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, takes_obj in _SWAPPED.items():
            own = cls.__dict__.get(name)
            if own is not None and not getattr(own, "readable_times", False):
                setattr(cls, name, _mapping(own, takes_obj=takes_obj))

    def _time_column(self, name: Any) -> Any:
        return time_column(self.model, name)  # type: ignore[attr-defined]

    def _columns(self) -> list[TimeColumn]:
        model = self.model  # type: ignore[attr-defined]
        found = (time_column(model, field.name) for field in model._meta.fields)
        return [column for column in found if isinstance(column, TimeColumn)]

    def _view_only(self, request: HttpRequest, obj: Any) -> bool:
        """A page its user may only view: Django shows every field of it read-only."""
        return obj is not None and not self.has_change_permission(request, obj)  # type: ignore[attr-defined]

    # --- the swaps

    def _times_get_list_display(self, request: HttpRequest, found: Any, obj: Any) -> Any:
        return _mapped(found, self._time_column)

    def _times_get_readonly_fields(self, request: HttpRequest, found: Any, obj: Any) -> Any:
        return _mapped(found, self._time_column)

    def _times_get_fieldsets(self, request: HttpRequest, found: Any, obj: Any) -> Any:
        """The read-only date-time fields swapped for their columns; on a page its user may
        only view, every date-time field (Django shows them all read-only)."""
        view_only = self._view_only(request, obj)
        readonly = set(self.get_readonly_fields(request, obj))  # type: ignore[attr-defined]

        def swap(name: Any) -> Any:
            column = self._time_column(name)
            return column if view_only or column in readonly else name

        return [
            (title, {**options, "fields": _mapped(options.get("fields", ()), swap)})
            for title, options in found
        ]

    # --- Django's hooks

    def get_list_display(self, request: HttpRequest) -> Any:
        found = super().get_list_display(request)  # type: ignore[misc]
        return self._times_get_list_display(request, found, None)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        found = super().get_readonly_fields(request, obj)  # type: ignore[misc]
        return self._times_get_readonly_fields(request, found, obj)

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        found = super().get_fieldsets(request, obj)  # type: ignore[misc]
        return self._times_get_fieldsets(request, found, obj)

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> Any:
        """Keep out of the form every date-time field the page shows as a column. Django
        excludes read-only fields by what it was given, which are the columns: their names go
        too, or the form would edit what the page shows read-only. On a view-only page the
        form keeps every other field (Django lists the page's fields from it) and the columns
        its fieldsets name are left out."""
        excluded = super().get_exclude(request, obj)  # type: ignore[misc]
        if excluded is None:  # Django then takes the form's own, which a list here replaces
            excluded = getattr(getattr(self.form, "_meta", None), "exclude", None)  # type: ignore[attr-defined]
        readonly = self.get_readonly_fields(request, obj)
        columns = [column for column in readonly if isinstance(column, TimeColumn)]
        names = [column.field.name for column in columns]
        if self._view_only(request, obj):
            columns = self._columns()
        if not columns:
            return excluded
        return [*(excluded or ()), *columns, *names]
