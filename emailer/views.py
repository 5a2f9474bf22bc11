"""The one-click unsubscribe endpoint (RFC 8058): one POST, no login, no cookie.

A mailbox provider's unsubscribe button POSTs ``List-Unsubscribe=One-Click`` to the link in
the ``List-Unsubscribe`` header; a person who follows the link in a browser gets a page with
one button that does the same POST. A GET changes nothing, because link scanners and
previews fetch every URL in a message.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.utils import timezone
from django.utils.html import escape
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from emailer.models import Participant
from emailer.services import unsubscribe_participant
from emailer.tokens import read_token

_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Unsubscribe</title></head>
<body><main style="font-family:sans-serif;max-width:32em;margin:3em auto">{}</main></body></html>"""


@csrf_exempt
@require_http_methods(["GET", "POST"])
def unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    participant_id = read_token(token)
    participant = (
        Participant.objects.select_related("project").filter(pk=participant_id).first()
        if participant_id is not None
        else None
    )
    if participant is None:
        return HttpResponseBadRequest(
            _PAGE.format("<p>This unsubscribe link is not valid.</p>"), content_type="text/html"
        )
    address = escape(participant.email)
    project = escape(participant.project.name)
    if request.method == "POST":
        unsubscribe_participant(participant=participant, now=timezone.now())
        return HttpResponse(
            _PAGE.format(f"<p>{address} will receive no more mail from {project}.</p>")
        )
    return HttpResponse(
        _PAGE.format(
            f"<p>Stop mail from {project} to {address}?</p>"
            '<form method="post"><input type="hidden" name="List-Unsubscribe" '
            'value="One-Click"><button type="submit">Unsubscribe</button></form>'
        )
    )
