"""Deploy checks (``manage.py check --deploy``): what a production emailer must not keep from
its defaults.

| id | level | what |
| --- | --- | --- |
| emailer.W001 | warning | ``EMAILER_SITE_URL`` is not a public https address |
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.core.checks import CheckMessage, Warning, register

from emailer import conf

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


@register("emailer", deploy=True)
def check_site_url(**_: Any) -> list[CheckMessage]:
    """Every message carries an unsubscribe link built on ``EMAILER_SITE_URL``; left at its
    default (``http://localhost:8000``) the link reaches nobody, and over http the signed
    token travels in the clear."""
    url = conf.site_url()
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
