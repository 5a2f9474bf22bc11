"""One-click unsubscribe (RFC 8058): the link in every message unsubscribes with one POST,
no login and no cookie; a GET (a link scanner, a preview) changes nothing."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client

from emailer.models import Participant
from emailer.sending import run_send_email_task
from emailer.tokens import make_token
from scheduling.api import RunContext
from tests.conftest import FIXED_NOW
from tests.emailer.conftest import address

pytestmark = [pytest.mark.django_db]


def test_the_link_in_a_sent_message_unsubscribes_with_one_post_and_no_cookie(
    smtp_settings: Any, make_project: Any, make_task: Any
) -> None:
    project = make_project(participants=3)
    task = make_task(project)
    run_send_email_task(
        task, RunContext(execution_id=1, job_id=None, scheduled_for=FIXED_NOW, attempt=1)
    )
    message = next(r for r in smtp_settings.recorder.received if r.recipient == address(1))
    link = str(message.message["List-Unsubscribe"]).strip().strip("<>")

    browserless = Client(enforce_csrf_checks=True)  # as a mailbox provider's server posts
    response = browserless.post(
        urlsplit(link).path,
        data="List-Unsubscribe=One-Click",
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 200
    assert not response.cookies
    assert Participant.objects.get(email=address(1)).unsubscribed_at is not None
    assert Participant.objects.get(email=address(0)).unsubscribed_at is None


def test_a_get_shows_a_confirmation_and_changes_nothing(
    client: Client, make_project: Any
) -> None:
    make_project(participants=1)
    person = Participant.objects.get()
    response = client.get(f"/emailer/unsubscribe/{make_token(person.pk)}/")
    assert response.status_code == 200 and b'method="post"' in response.content
    person.refresh_from_db()
    assert person.unsubscribed_at is None


def test_unsubscribing_twice_keeps_the_first_time(client: Client, make_project: Any) -> None:
    make_project(participants=1)
    person = Participant.objects.get()
    url = f"/emailer/unsubscribe/{make_token(person.pk)}/"
    client.post(url)
    first = Participant.objects.get().unsubscribed_at
    assert client.post(url).status_code == 200
    assert Participant.objects.get().unsubscribed_at == first


@pytest.mark.parametrize("token", ["1", "1:forged", f"{make_token(2)[:-1]}x"])
def test_a_forged_or_altered_token_is_refused(
    client: Client, make_project: Any, token: str
) -> None:
    make_project(participants=3)
    response = client.post(f"/emailer/unsubscribe/{token}/")
    assert response.status_code == 400
    assert not Participant.objects.filter(unsubscribed_at__isnull=False).exists()
