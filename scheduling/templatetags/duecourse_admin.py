"""The admin's breadcrumbs in the shape the running Django's admin styles, for the pages the
apps add to it: ``{% load duecourse_admin %}``.

Django 6.1's admin writes its breadcrumbs as a list (``<ol class="breadcrumbs">``, one item a
crumb, the separators drawn by its stylesheet) and styles no other shape; 5.2 and 6.0 write and
style a ``<div class="breadcrumbs">`` with "&rsaquo;" between the crumbs. A page that wrote either
shape by hand would sit unstyled, outside the admin's bar, on the other versions.
"""

from __future__ import annotations

from typing import Any

import django
from django import template

register = template.Library()

#: The first Django whose admin draws breadcrumbs as an ordered list.
LIST_FROM = (6, 1)


@register.inclusion_tag("scheduling/breadcrumbs.html")
def admin_breadcrumbs(*parts: Any) -> dict[str, Any]:
    """``{% admin_breadcrumbs home_url "Home" jobs_url "Jobs" "" "Pause" %}``: pairs of an
    address and a label, the page itself last (an empty address: shown as text)."""
    if len(parts) % 2:
        raise template.TemplateSyntaxError(
            "admin_breadcrumbs takes pairs of an address and a label"
        )
    crumbs = [(parts[i] or "", parts[i + 1]) for i in range(0, len(parts), 2)]
    return {"crumbs": crumbs, "as_list": django.VERSION[:2] >= LIST_FROM}
