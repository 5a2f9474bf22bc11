"""Fixtures for the emailer: a real SMTP server on loopback, projects, participants and tasks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from emailer.models import Participant, Project, SendEmailTask
from tests.conftest import free_port, send_mail_through
from tests.emailer.smtp import SMTPServer


@pytest.fixture
def smtp() -> Iterator[SMTPServer]:
    server = SMTPServer(free_port()).start()
    yield server
    server.stop()


@pytest.fixture
def smtp_settings(settings: Any, smtp: SMTPServer) -> SMTPServer:
    """Send through Django's SMTP backend to the loopback server, in small chunks."""
    send_mail_through(settings, "smtp", host="127.0.0.1", port=smtp.port, timeout=5)
    settings.EMAILER_CHUNK_SIZE = 10
    settings.EMAILER_BACKOFF_BASE = 0.01
    settings.EMAILER_BACKOFF_MAX = 0.05
    settings.EMAILER_SITE_URL = "https://mail.example.org"
    return smtp


def address(i: int) -> str:
    return f"p{i:05d}@example.com"


@pytest.fixture
def make_project() -> Callable[..., Project]:
    def make(
        name: str = "survey", *, participants: int = 0, state: str = "active", **_: Any
    ) -> Project:
        project = Project.objects.create(name=name, state=state)
        Participant.objects.bulk_create(
            Participant(project=project, email=address(i), name=f"Person {i}")
            for i in range(participants)
        )
        return project

    return make


@pytest.fixture
def make_task() -> Callable[..., SendEmailTask]:
    def make(project: Project, name: str = "invite", **overrides: Any) -> SendEmailTask:
        values: dict[str, Any] = {
            "subject": "Your survey, {{ participant.name }}",
            "body": "Hello {{ participant.name }},\nplease answer.\nStop: {{ unsubscribe_url }}",
            "from_email": "survey@example.org",
        }
        values.update(overrides)
        task = SendEmailTask(project=project, name=name, **values)
        task.full_clean()
        task.save()
        return task

    return make
