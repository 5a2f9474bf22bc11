"""No input to the admin answers with a server error: every list of the three apps survives
any filter value in its URL, and the forms and actions refuse nonsense beside its field.

A list's URL is typed by hand as often as it is clicked: a year of 99999, a month of ``abc``,
an id past what the column holds, a lookup that does not exist. Django answers a filter it
cannot build by redirecting to the unfiltered list with ``?e=1``; a value that fails only when
the query runs (a date part outside the calendar) is answered the same way
(``scheduling.pages.changelists.SafeListAdmin``, mixed into every model admin of the engine, the
emailer and subscriptions). The walker below asks every registered list of the three apps,
as a superuser, for every date and number field of its model with hostile values.
"""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.db import models
from django.test import Client
from django.utils import timezone

from scheduling.models import Execution, Job, Schedule
from tests.factories import create_job
from tests.scheduling.test_admin_jobs import form_data

pytestmark = pytest.mark.django_db

APPS = ("scheduling", "emailer", "subscriptions")
HUGE = "99999999999999999999"

#: Every list of the three apps, as ``app_label.model_name``.
LISTS = sorted(
    f"{model._meta.app_label}.{model._meta.model_name}"
    for model in admin.site._registry
    if model._meta.app_label in APPS
)

#: Values for a date part (``__year``, ``__month``, ``__day``); a list is the key repeated.
DATE_PART_VALUES: list[str | list[str]] = [
    "99999", "-1", "0", "abc", "1e9", "", HUGE, ["2020", "99999"],
]  # fmt: skip
#: Lookups of a date or date-time field besides its parts, with what each is given.
DATE_LOOKUPS: dict[str, list[str | list[str]]] = {
    "__gte": ["abc", "99999-01-01", ""],
    "__lt": ["0000-00-00"],
    "__in": ["abc,2020-01-01", ""],
    "__isnull": ["maybe"],
    "__nope": ["1"],
}
#: Lookups of a number, a foreign key or a primary key, with what each is given.
NUMBER_LOOKUPS: dict[str, list[str | list[str]]] = {
    "": ["abc", "-1", "1e9", "", HUGE, ["1", "abc"], "\x00"],
    "__gte": [HUGE, "abc"],
    "__in": ["1,abc", f"{HUGE},1", ""],
    "__isnull": ["maybe"],
    "__nope": ["1"],
}
#: Whatever a list's URL may carry besides its fields' filters.
PAGE_QUERIES: list[dict[str, str]] = [
    {"nofield": "1"},
    {"q": "\x00"},
    {"p": HUGE},
    {"p": "-1"},
    {"o": "abc"},
    {"o": "99"},
    {"all": "", "e": "1"},
]

NUMBERS = (models.IntegerField, models.FloatField, models.DecimalField, models.AutoField)


def hostile_queries(model_admin: admin.ModelAdmin[Any]) -> list[dict[str, Any]]:
    """One query string per hostile value, for every date and number field of the model."""
    queries: list[dict[str, Any]] = [dict(query) for query in PAGE_QUERIES]
    for field in model_admin.model._meta.get_fields():
        if not getattr(field, "concrete", False):
            continue
        if isinstance(field, models.DateField):  # DateTimeField is one
            for part in ("__year", "__month", "__day"):
                queries += [{f"{field.name}{part}": value} for value in DATE_PART_VALUES]
            lookups = DATE_LOOKUPS
        elif isinstance(field, (*NUMBERS, models.ForeignKey)):
            lookups = NUMBER_LOOKUPS
        else:
            continue
        for lookup, values in lookups.items():
            queries += [{f"{field.name}{lookup}": value} for value in values]
    hierarchy = model_admin.date_hierarchy
    if hierarchy:  # the calendar's last year, month and day: the next one is past 9999
        queries += [
            {f"{hierarchy}__year": "9999"},
            {f"{hierarchy}__year": "9999", f"{hierarchy}__month": "12"},
            {f"{hierarchy}__year": "9999", f"{hierarchy}__month": "12", f"{hierarchy}__day": "31"},
            {f"{hierarchy}__year": "2030", f"{hierarchy}__month": "2", f"{hierarchy}__day": "31"},
        ]
    return queries


@pytest.fixture
def superuser_client(admin_user: Any) -> Client:
    """A superuser whose requests come back as responses, a server error as a 500."""
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    return client


@pytest.fixture
def demo_rows(settings: Any) -> None:
    """Rows in every app's tables (the engine's demo jobs, the emailer's mailing,
    subscriptions' customers), so the lists that answer render rows too."""
    settings.SCHEDULING_DEMO = True
    call_command("loaddemo", stdout=StringIO())


@pytest.mark.parametrize("listed", LISTS)
def test_every_list_answers_any_filter_value_without_a_server_error(
    superuser_client: Client, demo_rows: None, listed: str
) -> None:
    model_admin = next(
        found
        for model, found in admin.site._registry.items()
        if f"{model._meta.app_label}.{model._meta.model_name}" == listed
    )
    url = f"/admin/{listed.replace('.', '/')}/"
    assert superuser_client.get(url).status_code == 200
    failed = []
    for query in hostile_queries(model_admin):
        response = superuser_client.get(url, query)
        if response.status_code not in (200, 302):
            failed.append((query, response.status_code))
    assert failed == []


@pytest.mark.parametrize(
    "query",
    [
        "job/?next_due_at__year=99999",
        "execution/?finished_at__year=99999",
        "schedule/?starts_at__year=99999",
    ],
)
def test_a_year_outside_the_calendar_is_answered_as_a_bad_filter(
    superuser_client: Client, query: str
) -> None:
    """As Django answers a filter it cannot build: the unfiltered list, flagged ``e=1``."""
    response = superuser_client.get(f"/admin/scheduling/{query}")
    assert response.status_code == 302
    assert response["Location"].endswith("?e=1")


def test_a_staff_users_list_survives_a_bad_filter_and_still_shows_only_their_rows(
    django_user_model: Any, admin_user: Any
) -> None:
    """The answer inside a transaction (a savepoint) leaves the request's later queries
    working, and owner scoping applies to the list it redirects to."""
    alice = django_user_model.objects.create_user("alice", password="pw", is_staff=True)
    alice.user_permissions.set(Permission.objects.filter(content_type__app_label="scheduling"))
    now = timezone.now()
    create_job(owner=alice, name="hers", task="scheduling.diagnostics.noop", every="PT1H", now=now)
    create_job(owner=admin_user, name="not-hers", task="scheduling.diagnostics.noop",
               every="PT1H", now=now)  # fmt: skip
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    refused = client.get("/admin/scheduling/job/", {"created_at__year": "99999"})
    assert refused.status_code == 302
    shown = client.get(refused["Location"])
    assert shown.status_code == 200
    assert [job.name for job in shown.context["cl"].result_list] == ["hers"]


# --- the forms: each refusal beside the field it is about ---------------------------------------


def form_errors(client: Client, url: str, data: dict[str, Any]) -> dict[str, list[str]]:
    """Post ``data``; the page comes back (200, nothing saved) with the errors by field."""
    response = client.post(url, data)
    assert response.status_code == 200, response.status_code
    return {
        field: list(found) for field, found in response.context["adminform"].form.errors.items()
    }


def test_an_interval_in_a_zone_other_than_utc_is_refused_beside_the_zone(
    superuser_client: Client,
) -> None:
    """As ``jobs add --every PT1H --tz Europe/Berlin`` is: an interval counts elapsed time,
    so a zone would be silently meaningless (``schedules.zone_error``)."""
    errors = form_errors(
        superuser_client,
        "/admin/scheduling/job/add/",
        form_data(interval="PT1H", timezone="Europe/Berlin"),
    )
    assert list(errors) == ["timezone"]
    assert (
        "'Europe/Berlin' applies to a cron expression or a calendar only" in errors["timezone"][0]
    )
    assert not Job.objects.exists()


def test_the_schedules_page_refuses_an_interval_in_a_zone_other_than_utc(
    superuser_client: Client, admin_user: Any
) -> None:
    errors = form_errors(
        superuser_client,
        "/admin/scheduling/schedule/add/",
        {"owner": admin_user.pk, "name": "", "interval": "PT1H", "cron": "", "rrule": "",
         "timezone": "Europe/Berlin", "run_at_0": "", "run_at_1": "", "starts_at_0": "",
         "starts_at_1": "", "ends_at_0": "", "ends_at_1": ""},
    )  # fmt: skip
    assert list(errors) == ["timezone"]
    assert "applies to a cron expression or a calendar only" in errors["timezone"][0]
    assert not Schedule.objects.exists()


def test_a_name_too_long_is_refused_as_too_long_with_the_limit(superuser_client: Client) -> None:
    errors = form_errors(superuser_client, "/admin/scheduling/job/add/", form_data(name="n" * 300))
    assert errors == {"name": ["Ensure this value has at most 200 characters (it has 300)."]}


@pytest.mark.parametrize("name", ["", "   "])
def test_an_empty_name_is_refused_as_empty(superuser_client: Client, name: str) -> None:
    errors = form_errors(superuser_client, "/admin/scheduling/job/add/", form_data(name=name))
    assert list(errors) == ["name"]
    assert len(errors["name"]) == 1


# --- actions: the Backfill… action refuses a range the calendar cannot walk ----------------------


@pytest.mark.parametrize("step", ["preview", "apply"])
def test_the_backfill_action_refuses_a_start_before_the_epoch_beside_from(
    superuser_client: Client, admin_user: Any, step: str
) -> None:
    """``0001-01-01T00:00Z`` was an ``OverflowError`` in the walk, answered 500."""
    job = create_job(owner=admin_user, name="nightly", task="scheduling.diagnostics.noop",
                     every="PT1H", now=timezone.now())  # fmt: skip
    end = (timezone.now() - timedelta(days=1)).isoformat()
    response = superuser_client.post(
        "/admin/scheduling/job/",
        {"action": "backfill_jobs", "_selected_action": [job.pk], step: step,
         "start": "0001-01-01T00:00Z", "end": end},
    )  # fmt: skip
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert list(errors) == ["start"]
    assert "a backfill reaches back to the Unix epoch at the earliest" in errors["start"][0]
    assert not Execution.objects.exists()
