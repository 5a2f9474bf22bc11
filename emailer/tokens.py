"""Signed unsubscribe links: a token names one participant and cannot be forged or altered.

The token needs no expiry: RFC 8058 asks that the link in an old message still works, and
unsubscribing twice is harmless. It is signed with SECRET_KEY under a salt of its own, so no
other signed value of the project can be replayed as one.
"""

from __future__ import annotations

from django.core import signing
from django.urls import reverse

from emailer import conf

_SALT = "emailer.unsubscribe"


def make_token(participant_id: int) -> str:
    return signing.Signer(salt=_SALT).sign(str(participant_id))


def read_token(token: str) -> int | None:
    """The participant id a genuine token names, else None."""
    try:
        value = signing.Signer(salt=_SALT).unsign(token)
    except signing.BadSignature:
        return None
    return int(value) if value.isdigit() else None


def unsubscribe_url(participant_id: int) -> str:
    """The absolute one-click link, built from ``EMAILER_SITE_URL`` (https in production)."""
    path = reverse("emailer:unsubscribe", args=[make_token(participant_id)])
    return conf.site_url() + path
