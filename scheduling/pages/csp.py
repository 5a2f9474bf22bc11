"""The Content-Security-Policy of the apps' own pages, sent without taking over the host's.

The apps ship into host projects, so the policy belongs to the host: a shipped app never
requires a setting or a middleware for it, and never replaces a policy the host chose. What
an app can do is see that its own pages (its admin pages, the dashboard, ``/health/`` and
``/metrics``) do not go out without one. ``with_csp`` (for a view) and
``ContentSecurityPolicyAdmin`` (for every view of a ``ModelAdmin``) attach ``PAGE_POLICY`` or
``DATA_POLICY`` to a response, in this order of precedence:

1. A response that already carries a ``Content-Security-Policy`` header keeps it (the view or
   something between it and here set one).
2. Django 6's ``ContentSecurityPolicyMiddleware`` ran (``django.middleware.csp``):

   - the host's ``SECURE_CSP`` is set: the host's policy governs every page, the apps' too;
   - a ``@csp_override`` on the view already chose one: kept;
   - otherwise the response asks the middleware for the apps' policy (the attribute
     ``@csp_override`` sets), and the middleware writes it with its per-request nonce, which
     the admin's templates put on their ``<script>`` and ``<link>`` tags.

3. No such middleware (Django 5.2, or a host without it): the header is set here, without a
   nonce; the apps' pages load every script and style from the site itself, so none is needed.

``SCHEDULING_CSP = False`` leaves every page to the host: the setting for a host whose policy
comes from a middleware of its own (django-csp, say) that does not overwrite a header a view
set.

The page policy allows what the admin needs and nothing else: scripts, styles, images and
fonts from the site (and from ``STATIC_URL``'s origin when static files are served from
elsewhere), forms posted to the site, no plugins, no ``<base>``, no framing by other sites.
No inline script, inline ``<style>`` or ``style`` attribute is allowed: the apps' templates
have none (their styles are in ``scheduling/static/scheduling/duecourse.css``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.urls import URLPattern

from scheduling import conf

try:  # Django 6: its own policy builder and nonce placeholder
    from django.utils.csp import CSP, build_policy
except ImportError:  # Django 5.2 has neither: the header is written here, without a nonce
    CSP = None
    build_policy = None

HEADER = "Content-Security-Policy"
#: The placeholder Django 6's middleware replaces with its per-request nonce.
NONCE = str(CSP.NONCE) if CSP is not None else "<CSP_NONCE_SENTINEL>"

Policy = dict[str, list[str]]

#: HTML pages: the admin's, and the dashboard.
PAGE_POLICY: Policy = {
    "default-src": ["'self'"],
    "script-src": ["'self'", NONCE],
    "style-src": ["'self'", NONCE],
    "img-src": ["'self'"],
    "font-src": ["'self'"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'none'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'self'"],
}
#: JSON and text (``/health/``, ``/metrics``): nothing to load, run or frame.
DATA_POLICY: Policy = {
    "default-src": ["'none'"],
    "base-uri": ["'none'"],
    "form-action": ["'none'"],
    "frame-ancestors": ["'none'"],
}
#: Directives that load files, and so take the origin static files are served from.
_LOADING = ("script-src", "style-src", "img-src", "font-src")


def _static_origin() -> str | None:
    """The origin of ``STATIC_URL`` when it is another site (a CDN), else None."""
    parts = urlsplit(str(getattr(settings, "STATIC_URL", "") or ""))
    if not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme else parts.netloc


def policy_for(base: Policy) -> Policy:
    """``base`` with the static files' origin added where files are loaded from."""
    origin = _static_origin()
    if origin is None or base is DATA_POLICY:
        return {name: list(values) for name, values in base.items()}
    return {
        name: [*values, origin] if name in _LOADING else list(values)
        for name, values in base.items()
    }


def render(policy: Policy) -> str:
    """The header's value, without a nonce (the middleware renders its own with one)."""
    if build_policy is not None:
        return str(build_policy(policy))
    return "; ".join(
        f"{name} {' '.join(value for value in values if value != NONCE)}"
        for name, values in policy.items()
    )


def apply(request: HttpRequest, response: HttpResponseBase, base: Policy = PAGE_POLICY) -> None:
    """Give ``response`` the apps' policy, unless the host or the view already decided
    (the order of precedence is in the module docstring)."""
    if not conf.get("CSP") or HEADER in response:
        return
    if hasattr(request, "_csp_nonce"):  # django.middleware.csp ran for this request
        if getattr(settings, "SECURE_CSP", None) or hasattr(response, "_csp_config"):
            return
        response._csp_config = policy_for(base)  # type: ignore[attr-defined]
        return
    response[HEADER] = render(policy_for(base))


def with_csp(view: Callable[..., Any], *, policy: Policy = PAGE_POLICY) -> Callable[..., Any]:
    """``view`` whose responses carry the apps' policy (see ``apply``)."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        response = view(request, *args, **kwargs)
        apply(request, response, policy)
        return response

    return wrapped


class ContentSecurityPolicyAdmin:
    """Mix into a ``ModelAdmin`` (first among its bases): every page of it (list, add,
    change, delete, history, and the pages its actions answer with) carries the apps' policy
    where the host sends none (``apply``). The admin site's own pages (index, login) are the
    host's and keep whatever the host sends.

        @admin.register(Report)
        class ReportAdmin(ContentSecurityPolicyAdmin, admin.ModelAdmin): ...
    """

    def get_urls(self) -> list[Any]:
        return [
            URLPattern(url.pattern, with_csp(url.callback), url.default_args, url.name)
            if isinstance(url, URLPattern)
            else url
            for url in super().get_urls()  # type: ignore[misc]
        ]
