"""Who a call through the API is, for the audit trail: code, a person, a command line or an
admin page (``scheduling.stages.audit.Actor``), by the rule the engine's own doors use.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from scheduling.models import ChangeSource
from scheduling.stages import audit as _audit


def api_actor(by: Any) -> _audit.Actor:
    """Who a call of this API is, for the audit trail: the user or name it gives (source
    ``api``), a command line's identity as it is, or code (``system``)."""
    return _audit.Actor.given(by, source=ChangeSource.API)


def command_line_actor(by: str | None = None) -> _audit.Actor:
    """Who a management command acts as, to pass as ``by``: the operating-system account of
    the process (its real uid, never ``LOGNAME`` or ``USER``), and with ``by`` (the value of
    ``add_by_option``'s ``--by``, an active user) that user first: ``alice (os: root)``;
    source ``command``."""
    return _audit.Actor.command_line(by)


def admin_actor(request: HttpRequest) -> _audit.Actor:
    """Who an admin page acts as, to pass as ``by``: the signed-in user, source ``admin``,
    the rule the engine's own admin records its changes by."""
    return _audit.Actor.user(request.user, source=ChangeSource.ADMIN)
