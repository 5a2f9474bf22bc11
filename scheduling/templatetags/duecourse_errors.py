"""Errors in templates as ``scheduling.messages.errors.headline`` reads them, for the engine's
pages and any app's: ``{% load duecourse_errors %}``.

- ``{{ execution.last_error|headline:80 }}``: "ConnectionRefusedError: [Errno 111] Connection
  refused", the exception's type and message on one line, cut at a word to 80 characters,
  never a ``File "..."`` line of its traceback (the execution's page shows the whole error).
"""

from __future__ import annotations

from django import template

from scheduling.messages import errors

register = template.Library()


@register.filter
def headline(error: str | None, limit: int | None = None) -> str:
    """``{{ e.last_error|headline:50 }}``: the error's type and message, cut to ``limit``."""
    return errors.headline(error, limit=limit)
