"""System checks: what the emailer needs from its host project.

| id | level | what |
| --- | --- | --- |
| emailer.W001 | warning, ``--deploy`` only | ``EMAILER_SITE_URL`` is not a public https address |
| emailer.W002 | warning | the emailer's URLs are not included: no unsubscribe link can be built |
| emailer.E001 … | error | an ``EMAILER_*`` setting of a wrong type or out of range |
| emailer.E014 | error | ``EMAILER_BACKOFF_MAX`` is below ``EMAILER_BACKOFF_BASE`` |
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.urls import NoReverseMatch, reverse

from emailer import conf

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


@register("emailer", deploy=True)
def check_site_url(**_: Any) -> list[CheckMessage]:
    """Every message carries an unsubscribe link built on ``EMAILER_SITE_URL``; left at its
    default (``http://localhost:8000``) the link reaches nobody, and over http the signed
    token travels in the clear."""
    url = str(conf.raw("SITE_URL")).rstrip("/")
    parts = urlsplit(url)
    if parts.scheme == "https" and (parts.hostname or "") not in LOCAL_HOSTS:
        return []
    return [
        Warning(
            f"EMAILER_SITE_URL is {url!r}: the unsubscribe link in every message is built on "
            "it, and it is not a public https address.",
            hint="Set EMAILER_SITE_URL to the site's public https address; see docs/emailer.md.",
            id="emailer.W001",
        )
    ]


@register("emailer")
def check_urls_included(**_: Any) -> list[CheckMessage]:
    """Every message carries a one-click unsubscribe link: without the emailer's URLs none can
    be built, and every run fails. A warning, not an error, so that ``migrate`` runs before
    the URLs are added, as docs/install.md orders the steps. A URLconf that is missing or does
    not import is Django's own checks' to report."""
    if not getattr(settings, "ROOT_URLCONF", None):
        return []
    try:
        reverse("emailer:unsubscribe", args=["token"])
    except NoReverseMatch:
        return [
            Warning(
                "The emailer's URLs are not included: every message's unsubscribe link is "
                "built on them, so no run can send.",
                hint='Add path("emailer/", include("emailer.urls")) to your URLconf; '
                "see docs/install.md.",
                id="emailer.W002",
            )
        ]
    except Exception:  # the URLconf itself is broken: Django's url checks say how
        return []
    return []


@register("emailer")
def check_settings(**_: Any) -> list[CheckMessage]:
    """Each ``EMAILER_*`` setting has the type and range ``conf.SETTINGS`` gives it. Without
    this check a chunk size of 0 or a site URL that is not one passes ``manage.py check`` and
    surfaces later, as an error page or a failed run."""
    found: list[CheckMessage] = []
    for setting in conf.SETTINGS:
        problem = setting.problem(conf.raw(setting.name))
        if problem:
            found.append(
                Error(
                    f"{problem}.",
                    hint=f"Set {setting.setting} to {setting.accepted()}, or remove it for the "
                    f"default ({setting.default!r}); see docs/install.md.",
                    id=setting.check_id,
                )
            )
    base, longest = conf.raw("BACKOFF_BASE"), conf.raw("BACKOFF_MAX")
    ranged = ("BACKOFF_BASE", "BACKOFF_MAX")
    if not any(conf.BY_NAME[name].problem(conf.raw(name)) for name in ranged) and longest < base:
        found.append(
            Error(
                f"EMAILER_BACKOFF_MAX is {longest!r}, below EMAILER_BACKOFF_BASE ({base!r}): the "
                "longest delay after a \"try later\" reply must be at least the first one.",
                hint="Raise EMAILER_BACKOFF_MAX or lower EMAILER_BACKOFF_BASE.",
                id="emailer.E014",
            )
        )
    return found
