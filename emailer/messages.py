"""One participant's message: rendered parts plus the headers receiving systems rely on.

- ``Message-ID`` is derived from (task, occurrence, participant), so a message sent again after
  an uncertain crash carries the same id and a receiving system can recognise the resend.
- ``List-Unsubscribe`` with ``List-Unsubscribe-Post: List-Unsubscribe=One-Click`` (RFC 8058):
  mailbox providers show an unsubscribe button that POSTs to our link, no login needed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from django.core.mail import EmailMultiAlternatives

from emailer import conf
from emailer.rendering import CompiledTask
from emailer.tokens import unsubscribe_url


def message_id(*, task_id: int, occurrence: datetime, participant_id: int) -> str:
    stamp = occurrence.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    domain = urlsplit(conf.site_url()).hostname or "localhost"
    return f"<emailer.{task_id}.{stamp}.{participant_id}@{domain}>"


def build_message(
    *,
    compiled: CompiledTask,
    task_id: int,
    occurrence: datetime,
    from_email: str,
    project_name: str,
    participant: dict[str, Any],
    connection: Any,
) -> EmailMultiAlternatives:
    """The message for ``participant`` (a dict with id, email, name, status)."""
    link = unsubscribe_url(participant["id"])
    rendered = compiled.render(
        {
            "participant": participant,
            "project": {"name": project_name},
            "unsubscribe_url": link,
        }
    )
    message = EmailMultiAlternatives(
        subject=rendered.subject,
        body=rendered.body,
        from_email=from_email,
        to=[participant["email"]],
        connection=connection,
        headers={
            "Message-ID": message_id(
                task_id=task_id, occurrence=occurrence, participant_id=participant["id"]
            ),
            "List-Unsubscribe": f"<{link}>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        },
    )
    if rendered.html_body:
        message.attach_alternative(rendered.html_body, "text/html")
    return message
