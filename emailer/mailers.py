"""The connection the emailer sends through: the project's mailer, on every supported Django.

Django 6.1 configures mail as ``MAILERS`` (named mailers, ``"default"`` among them) and
deprecates ``get_connection`` and the ``EMAIL_*`` settings, which it refuses beside
``MAILERS``; Django 5.2 and 6.0 have only those, so one configuration. A task may name the
mailer it sends through (``SendEmailTask.mailer``); empty means the default. This module is
the one place that knows the difference: the model validates a name with ``name_error``, a
run opens ``connection(name)``, and neither asks which Django it runs on.
"""

from __future__ import annotations

from typing import Any

import django
from django.conf import settings
from django.utils.html import escape

#: The mailer an empty name means; also a name Django 6.1 gives its default mailer.
DEFAULT = "default"

#: Whether this Django has named mailers (``django.core.mail.mailers``, ``MAILERS``).
NAMED_MAILERS = django.VERSION >= (6, 1)


def configured() -> list[str] | None:
    """The names in the project's ``MAILERS``, or None where mail is configured with the
    ``EMAIL_*`` settings (Django before 6.1, or 6.1 without ``MAILERS``): one mailer."""
    if not NAMED_MAILERS or not hasattr(settings, "MAILERS"):
        return None
    return [str(name) for name in settings.MAILERS]


def name_error(name: str) -> str:
    """Why a task cannot send through the mailer ``name`` here, or "" when it can.

    Checked when a task is saved and again when it runs, since ``MAILERS`` may have changed
    in between; the words say what to do on this project's Django and configuration.
    """
    names = configured()
    if names is None:
        if name in ("", DEFAULT):
            return ""
        if not NAMED_MAILERS:
            return (
                f"{name!r}: choosing a mailer by name needs Django 6.1's MAILERS setting; on "
                f"Django {django.get_version()} mail goes out through the EMAIL_* settings, "
                f"one mailer, so leave this empty (or {DEFAULT!r})"
            )
        return (
            f"{name!r}: this project configures mail with the EMAIL_* settings, one mailer; "
            "define MAILERS to send through named mailers, or leave this empty"
        )
    if (name or DEFAULT) in names:
        return ""
    known = ", ".join(repr(n) for n in names) or "none"
    if not name:
        return (
            f"empty means the {DEFAULT!r} mailer, and MAILERS has no {DEFAULT!r} entry; "
            f"name one of the configured mailers: {known}"
        )
    return f"{name!r} is not a mailer in MAILERS; the configured mailers are: {known}"


def help_text() -> str:
    """What the admin says under the field (as HTML, which the admin does not escape): the
    names this project can choose from."""
    names = configured()
    if names is None:
        return "Mail goes out through the EMAIL_* settings (one mailer): leave this empty."
    return escape(f"A mailer from MAILERS ({', '.join(names) or 'none'}); empty means {DEFAULT}.")


def connection(name: str = "") -> Any:
    """A connection, not yet open, of the mailer ``name`` ("" for the default one).

    On Django 6.1 it is the ``MAILERS`` entry (``mailers[name]``; ``mailers.default`` also
    serves a 6.1 project still on the ``EMAIL_*`` settings); before 6.1, ``get_connection()``,
    which reads the ``EMAIL_*`` settings. ``name_error`` has said the name is usable.
    """
    if not NAMED_MAILERS:
        from django.core.mail import get_connection

        return get_connection(fail_silently=False)
    from django.core.mail import mailers  # type: ignore[attr-defined]

    return mailers.default if name in ("", DEFAULT) else mailers[name]
