"""``manage.py subscriptions``' changes to engine jobs are on their audit trail as
``manage.py jobs``' are: by the process's operating-system account (its real uid, not
``LOGNAME``), and by the Django user ``--by`` names; a name that is no active user is refused
in one line, and nothing is saved."""

from __future__ import annotations

import os
import pwd
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from scheduling.models import Job, JobChange
from subscriptions.models import Subscription

pytestmark = pytest.mark.django_db

ADD = ("subscriptions", "add", "--customer", "alice", "--item", "COFFEE", "--quantity", "2")
VALID = ("--price", "9.90", "--every", "P1M", "--start", "2030-01-31T09:00:00Z")


def call(*argv: str) -> str:
    out = StringIO()
    call_command(*argv, stdout=out, stderr=StringIO())
    return out.getvalue()


def account() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def made_by() -> list[tuple[str, str]]:
    return list(
        JobChange.objects.filter(action="created").order_by("id").values_list("who", "source")
    )


def test_add_records_the_engine_job_it_makes_by_the_operator(
    django_user_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOGNAME", "mallory")
    django_user_model.objects.create_user("carol")
    call(*ADD, *VALID, "--by", "carol")
    assert Job.objects.count() == 1  # the first renewal's due batch
    assert made_by() == [(f"carol (os: {account()})", "command")]


def test_add_without_by_records_the_account_alone(settings: Any) -> None:
    settings.SUBSCRIPTIONS_BATCH_SIZE = 1  # a block of its own: a batch, and a job, of its own
    call(*ADD, *VALID)
    assert made_by() == [(account(), "command")]


@pytest.mark.parametrize("action", ["add", "cancel"])
def test_by_no_active_user_is_refused_in_one_line(django_user_model: Any, action: str) -> None:
    call(*ADD, *VALID)
    subscription = Subscription.objects.get()
    django_user_model.objects.create_user("gone", is_active=False)
    argv = (*ADD, *VALID) if action == "add" else ("subscriptions", "cancel", str(subscription.pk))
    before = (Subscription.objects.count(), Job.objects.count(), JobChange.objects.count())
    with pytest.raises(CommandError) as caught:
        call(*argv, "--by", "gone")
    assert str(caught.value) == "--by: no active user named 'gone'"
    assert (Subscription.objects.count(), Job.objects.count(), JobChange.objects.count()) == before
    subscription.refresh_from_db()
    assert subscription.status == "active"
