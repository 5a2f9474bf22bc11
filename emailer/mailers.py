"""The connection the emailer sends through: the project's default mailer.

Django 6.1 configures mail as ``MAILERS`` and deprecates ``get_connection`` and the
``EMAIL_*`` settings; earlier versions have only those. The emailer asks for the default
mailer the way the running Django wants to be asked, so a project on either gets no
deprecation warning from us and sends through what it configured.
"""

from __future__ import annotations

from typing import Any


def default_mailer() -> Any:
    """An open-able connection of the project's default mailer (``MAILERS["default"]``)."""
    try:
        from django.core.mail import mailers  # type: ignore[attr-defined]
    except ImportError:  # Django before 6.1
        from django.core.mail import get_connection

        return get_connection(fail_silently=False)
    return mailers.default
