"""Links from the admin's pages to the engine's own pages, wherever the host mounted them."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import NoReverseMatch, reverse

from scheduling.models import Execution, Job
from scheduling.rules import permissions

register = template.Library()


@register.simple_tag(takes_context=True)
def dashboard_url(context: Any) -> str:
    """The dashboard's address, or "" when the host has not included ``scheduling.urls`` or
    the page's user may not open it (a page offers only what its user may do)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not permissions.may_view(user, Job, Execution):
        return ""
    try:
        return reverse("scheduling:dashboard")
    except NoReverseMatch:
        return ""
