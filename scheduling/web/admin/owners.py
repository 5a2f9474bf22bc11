"""Who owns a job or a schedule, as the admin asks it: nobody types a user's id.

A new row belongs to the user saving it. A staff user who is not a superuser is never asked:
the owner is not on their form, and whatever a POST says, their rows are theirs
(``base.sees_everything``; the model admins set it again when saving). A superuser may name
another owner, or leave the field empty for themselves:

- with a search box (Django's ``autocomplete_fields``) where the host's admin site can search
  its users: the user model registered there with ``search_fields``, as Django's own
  ``UserAdmin`` is. The search answers only who may view users in that admin
  (``AutocompleteJsonView`` asks the user admin's view permission);
- otherwise (no user admin, or a custom one without ``search_fields``: Django's checks
  ``admin.E039`` and ``admin.E040`` would refuse ``autocomplete_fields`` at startup, so it is
  never declared on the class) with a select of the active staff users, and the row's
  current owner, who may be neither (the inactive system owner of jobs made by code).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.exceptions import NotRegistered
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import Field, Q, QuerySet
from django.http import HttpRequest

OWNER = "owner"
OWNER_HELP = "Who the row belongs to: they see and change it. Left empty: you."


def user_search_admin(site: admin.AdminSite) -> admin.ModelAdmin | None:
    """The user model's admin in ``site`` when it can answer an autocomplete search (the
    conditions of Django's checks E039 and E040), else None."""
    try:
        found = site.get_model_admin(get_user_model())
    except NotRegistered:
        return None
    return found if found.search_fields else None


def offered_owners(current_owner_id: Any = None) -> QuerySet[Any]:
    """The owners the select offers where no search box can be: the active staff users, and
    the row's current owner."""
    users = get_user_model()._default_manager
    keep = Q(is_active=True, is_staff=True)
    if current_owner_id is not None:
        keep |= Q(pk=current_owner_id)
    return users.filter(keep).order_by(get_user_model().USERNAME_FIELD)


class OwnerField(forms.ModelChoiceField):
    """A row's owner; left empty, ``saving_user`` (the user saving the form)."""

    saving_user: Any = None

    def clean(self, value: Any) -> Any:
        chosen = super().clean(value)
        return self.saving_user if chosen is None else chosen


class OwnerChoiceAdmin:
    """Mix into a ``ModelAdmin`` whose model has an ``owner`` foreign key to the user model,
    before ``admin.ModelAdmin`` (see the module docstring)."""

    admin_site: admin.AdminSite

    def get_autocomplete_fields(self, request: HttpRequest) -> Any:
        found = tuple(super().get_autocomplete_fields(request))  # type: ignore[misc]
        if user_search_admin(self.admin_site) is not None:
            return (*found, OWNER)
        return found

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        """A new row shows its saving user as the owner."""
        initial = super().get_changeform_initial_data(request)  # type: ignore[misc]
        return {OWNER: request.user.pk, **initial}

    def formfield_for_foreignkey(
        self, db_field: Field[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> Any:
        if db_field.name != OWNER:
            return super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]
        kwargs.update(form_class=OwnerField, required=False, help_text=OWNER_HELP)
        if user_search_admin(self.admin_site) is None:
            kwargs["queryset"] = offered_owners(_object_owner(request, db_field))
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]
        field.saving_user = request.user
        return field


def _object_owner(request: HttpRequest, db_field: Field[Any, Any]) -> Any:
    """The owner id of the row a change page shows, so the select keeps it; None on add."""
    match = request.resolver_match
    object_id = match.kwargs.get("object_id") if match else None
    if object_id is None:
        return None
    rows = db_field.model._default_manager.values_list(db_field.attname, flat=True)
    try:
        return rows.filter(pk=unquote(object_id)).first()
    except (ValueError, ValidationError):  # a malformed id: the page says "not found"
        return None
