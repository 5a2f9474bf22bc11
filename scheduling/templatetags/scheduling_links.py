"""Links from the admin's pages to the engine's own pages, wherever the host mounted them."""

from __future__ import annotations

from django import template
from django.urls import NoReverseMatch, reverse

register = template.Library()


@register.simple_tag
def dashboard_url() -> str:
    """The dashboard's address, or "" when the host has not included ``scheduling.urls``."""
    try:
        return reverse("scheduling:dashboard")
    except NoReverseMatch:
        return ""
