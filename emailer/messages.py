"""One participant's message: rendered parts plus the headers receiving systems rely on.

- ``Message-ID`` is derived from (task, occurrence, participant), so a message sent again after
  an uncertain crash carries the same id and a receiving system can recognise the resend.
- ``List-Unsubscribe`` with ``List-Unsubscribe-Post: List-Unsubscribe=One-Click`` (RFC 8058):
  mailbox providers show an unsubscribe button that POSTs to our link, no login needed. The
  link must reach them as it is: Django 6 builds messages with Python's modern email API,
  which folds a header longer than 78 characters and, having no space to fold at, encodes the
  link as RFC 2047 words that providers do not read as an unsubscribe address.
  ``ListMessage`` lets the header's line run as long as it needs (RFC 5322 allows 998).
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


#: RFC 5322's limit on a line, folding aside.
LINE_LIMIT = 998


class ListMessage(EmailMultiAlternatives):
    """A message whose ``List-Unsubscribe`` header goes out unfolded; see the module docstring.

    Django 5.2 builds the message with the legacy API (``message()`` takes no policy, and the
    link goes out as it is); Django 6 passes the sending backend's policy, which is widened
    here just enough for the header's line.
    """

    def message(self, **kwargs: Any) -> Any:
        policy = kwargs.get("policy")
        if policy is not None:
            link = str(self.extra_headers.get("List-Unsubscribe", ""))
            needed = min(len("List-Unsubscribe: ") + len(link) + 2, LINE_LIMIT)
            if needed > (policy.max_line_length or LINE_LIMIT):
                kwargs["policy"] = policy.clone(max_line_length=needed)
        return super().message(**kwargs)


def build_message(
    *,
    compiled: CompiledTask,
    task_id: int,
    occurrence: datetime,
    from_email: str,
    project_name: str,
    participant: dict[str, Any],
) -> ListMessage:
    """The message for ``participant`` (a dict with id, email, name, status)."""
    link = unsubscribe_url(participant["id"])
    rendered = compiled.render(
        {
            "participant": participant,
            "project": {"name": project_name},
            "unsubscribe_url": link,
        }
    )
    message = ListMessage(
        subject=rendered.subject,
        body=rendered.body,
        from_email=from_email,
        to=[participant["email"]],
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
