"""The emailer's part of ``manage.py loaddemo``: a small project whose mail you can open.

Without ``EMAIL_HOST`` the mail goes to files under ``var/mail/`` (one file per run); the
task sends three messages a minute, so the first two runs mail everyone and the runs after
that are recorded as skipped, nobody being left ("emailer history" shows both).
"""

from __future__ import annotations

from datetime import datetime

from emailer import services
from emailer.models import Participant, Project, ProjectState, SendEmailTask
from scheduling.api import Every

DEMO_PROJECT = "demo-survey"
DEMO_TASK = "demo-invitation"
DEMO_PEOPLE = [
    ("ada@example.com", "Ada Lovelace", "invited"),
    ("alan@example.com", "Alan Turing", "invited"),
    ("grace@example.com", "Grace Hopper", "invited"),
    ("edsger@example.com", "Edsger Dijkstra", "started"),
    ("barbara@example.com", "Barbara Liskov", "invited"),
    ("donald@example.com", "Donald Knuth", "completed"),
]


def load_demo(*, now: datetime) -> list[str]:
    """Create the demo project, its participants and a scheduled task, if not there yet."""
    if Project.objects.filter(name=DEMO_PROJECT).exists():
        return []
    project = services.add_project(name=DEMO_PROJECT, state=ProjectState.ACTIVE)
    Participant.objects.bulk_create(
        Participant(project=project, email=email, name=name, status=status)
        for email, name, status in DEMO_PEOPLE
    )
    task: SendEmailTask = services.add_task(
        project=project,
        name=DEMO_TASK,
        from_email="survey@example.org",
        subject="{{ participant.name }}, five minutes for {{ project.name }}?",
        body=(
            "Hello {{ participant.name }},\n\n"
            "we would value your answers to a short survey.\n\n"
            "Not interested? Unsubscribe: {{ unsubscribe_url }}\n"
        ),
        html_body=(
            "<p>Hello {{ participant.name }},</p>"
            "<p>we would value your answers to a short survey.</p>"
            '<p><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>'
        ),
        statuses=["invited", "started"],
        batch_size=3,
    )
    job = services.schedule_task(
        task=task, timing=Every("PT1M"), expires=600, name=DEMO_TASK, now=now
    )
    return [f"{DEMO_PROJECT} (emailer project)", job.name]
