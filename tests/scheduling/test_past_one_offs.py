"""A one-off at an instant already past is refused, at every door, unless it is meant.

It would otherwise run at once with a lag of years (a typo in the year, a copied example).
The rule lives in ``validation.past_run_at_error``; the command line, the admin and the API
each end the refusal with their own way to run a job now. An instant within
``SCHEDULING_MISFIRE_GRACE`` of now counts as now, and a row saved earlier stays editable.
"""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from scheduling import api
from scheduling.commandline.options import PAST_AT_HINT
from scheduling.models import Job, JobStatus, Schedule
from scheduling.rules.validation import PAST_RUN_AT_ADMIN_HINT
from tests.scheduling.test_admin_jobs import JOBS, form_data, form_of

pytestmark = pytest.mark.django_db

NOOP = "scheduling.diagnostics.noop"
PAST = "2020-01-01T09:00:00+00:00"


@pytest.fixture(autouse=True)
def default_knobs(settings: Any) -> None:
    for name in [n for n in dir(django_settings) if n.startswith("SCHEDULING")]:
        delattr(settings, name)


def jobs(*argv: str) -> str:
    out = StringIO()
    call_command("jobs", *argv, stdout=out, stderr=StringIO())
    return out.getvalue()


def refused(*argv: str) -> str:
    before = (Job.objects.count(), Schedule.objects.count())
    with pytest.raises(CommandError) as caught:
        jobs(*argv)
    assert (Job.objects.count(), Schedule.objects.count()) == before, "nothing is saved"
    return str(caught.value)


def test_jobs_add_refuses_an_at_in_the_past_with_the_hint(admin_user: Any) -> None:
    message = refused("add", "late", "--task", NOOP, "--at", "2020-01-01T09:00Z")
    assert message == f"run_at (--at): {PAST} has already passed; {PAST_AT_HINT}"
    assert "--at must be in the future; run it now with `manage.py jobs run NAME`" in message


def test_jobs_add_allow_past_saves_a_one_off_that_runs_at_once(admin_user: Any) -> None:
    jobs("add", "late", "--task", NOOP, "--at", "2020-01-01T09:00Z", "--allow-past")
    job = Job.objects.get(name="late")
    assert job.status == JobStatus.ACTIVE and job.next_due_at.isoformat() == PAST


def test_an_at_a_few_seconds_ago_counts_as_now(admin_user: Any) -> None:
    """A slow typist's "now": within SCHEDULING_MISFIRE_GRACE (60 s) it is on time."""
    typed = (timezone.now() - timedelta(seconds=20)).isoformat()
    jobs("add", "now-ish", "--task", NOOP, "--at", typed)
    too_late = (timezone.now() - timedelta(seconds=90)).isoformat()
    assert "has already passed" in refused("add", "late", "--task", NOOP, "--at", too_late)


def test_a_one_off_saved_earlier_stays_editable_after_its_instant_passed(
    admin_user: Any, admin_client: Client
) -> None:
    jobs("add", "late", "--task", NOOP, "--at", "2020-01-01T09:00Z", "--allow-past")
    jobs("edit", "late", "--note", "still fine")  # the instant is unchanged
    assert Job.objects.get(name="late").note == "still fine"
    # Changed to another instant already past: the rule holds, --allow-past lifts it.
    message = refused("edit", "late", "--at", "2021-01-01T09:00Z")
    assert "run_at (--at): 2021-01-01T09:00:00+00:00 has already passed; --at must be" in message
    jobs("edit", "late", "--at", "2021-01-01T09:00Z", "--allow-past")
    job = Job.objects.select_related("schedule").get(name="late")
    assert job.schedule.run_at.isoformat() == "2021-01-01T09:00:00+00:00"

    # The admin's change form, posting the stored instant back, saves another change.
    data = form_data(
        owner=admin_user.pk,
        name="late",
        note="from the admin",
        interval="",
        run_at_0="2021-01-01",
        run_at_1="09:00:00",
    )
    response = admin_client.post(f"{JOBS}{job.pk}/change/", data)
    assert response.status_code == 302, form_of(response).errors
    assert Job.objects.get(pk=job.pk).note == "from the admin"


def test_the_admin_refuses_a_past_once_at_beside_the_field(
    admin_client: Client, admin_user: Any
) -> None:
    data = form_data(owner=admin_user.pk, interval="", run_at_0="2020-01-01", run_at_1="09:00:00")
    response = admin_client.post(f"{JOBS}add/", data)
    assert response.status_code == 200
    [error] = form_of(response).errors["run_at"]
    assert error == f"{PAST} has already passed; {PAST_RUN_AT_ADMIN_HINT}"
    assert "“Run now”" in error
    assert not Job.objects.exists()


def test_the_api_refuses_a_past_once_unless_allow_past() -> None:
    with pytest.raises(ValidationError) as caught:
        api.schedule_task(NOOP, timing=api.Once(timezone.now() - timedelta(days=3)))
    [message] = caught.value.message_dict["run_at"]
    assert "has already passed" in message and "allow_past=True" in message

    info = api.schedule_task(
        NOOP, timing=api.Once(timezone.now() - timedelta(days=3), allow_past=True)
    )
    assert info.next_due_at is not None
