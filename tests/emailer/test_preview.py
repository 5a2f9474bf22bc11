"""The HTML preview is a document of its own that shows no remote content.

The task's page frames it (``<iframe sandbox>``, no referrer); its response carries a policy of
its own (no fetch but inline styles and ``data:`` images, no script, framed only by the admin)
whatever the project's policy says, and it is shown only to who may see the task, rendered for
the sample participant to who may not see the project's people. The browser test
(``test_admin_browser.py``) proves that a remote image in a body is not fetched.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from emailer.models import SendEmailTask

pytestmark = [pytest.mark.django_db]

HTML = '<p>Hi {{ participant.name }}</p><img src="https://tracker.example/open.gif">'


def preview_url(task: Any) -> str:
    return reverse("admin:emailer_sendemailtask_preview", args=[task.pk])


def test_the_preview_has_a_policy_of_its_own_that_fetches_nothing_remote(
    admin_client: Client, make_project: Any, make_task: Any
) -> None:
    task = make_task(make_project(participants=1), html_body=HTML)
    response = admin_client.get(preview_url(task))
    assert response.status_code == 200
    assert response["Content-Type"] == "text/html; charset=utf-8"
    assert response.content.decode().startswith("<p>Hi Person 0</p>")
    policy = dict(
        part.strip().split(" ", 1) if " " in part.strip() else (part.strip(), "")
        for part in response["Content-Security-Policy"].split(";")
    )
    assert policy == {
        "default-src": "'none'",
        "style-src": "'unsafe-inline'",
        "img-src": "data:",
        "font-src": "data:",
        "base-uri": "'none'",
        "form-action": "'none'",
        "frame-ancestors": "'self'",
        "sandbox": "",
    }
    assert response["X-Frame-Options"] == "SAMEORIGIN"
    assert response["Referrer-Policy"] == "no-referrer"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "no-store" in response["Cache-Control"]


def test_a_projects_own_policy_neither_replaces_nor_loosens_the_previews(
    admin_client: Client, make_project: Any, make_task: Any, settings: Any
) -> None:
    """Django 6's CSP middleware leaves a header a view set alone; on Django 5.2 there is none."""
    csp = pytest.importorskip("django.utils.csp", reason="Django 6's own CSP")
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE,
        "django.middleware.csp.ContentSecurityPolicyMiddleware",
    ]
    settings.SECURE_CSP = {"default-src": [csp.CSP.SELF], "img-src": ["*"]}
    task = make_task(make_project(participants=1), html_body=HTML)
    assert admin_client.get(preview_url(task))["Content-Security-Policy"].startswith(
        "default-src 'none';"
    )
    page = admin_client.get(reverse("admin:emailer_sendemailtask_change", args=[task.pk]))
    assert page["Content-Security-Policy"] == "default-src 'self'; img-src *"


def test_the_preview_is_shown_only_to_who_may_see_the_task(
    django_user_model: Any, make_project: Any, make_task: Any
) -> None:
    task = make_task(make_project(participants=1), html_body=HTML)
    outsider = django_user_model.objects.create_user("out", password="pw", is_staff=True)
    viewer = django_user_model.objects.create_user("vic", password="pw", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename="view_sendemailtask"))
    as_outsider, as_viewer, anonymous = Client(), Client(), Client()
    as_outsider.force_login(outsider)
    as_viewer.force_login(viewer)

    assert as_outsider.get(preview_url(task)).status_code == 403
    assert anonymous.get(preview_url(task)).status_code == 302  # to the login page
    shown = as_viewer.get(preview_url(task)).content.decode()
    assert shown.startswith("<p>Hi Ada Lovelace</p>"), "the sample, not the project's people"


def test_a_task_without_an_html_part_or_that_is_not_one_has_no_preview(
    admin_client: Client, make_project: Any, make_task: Any
) -> None:
    task = make_task(make_project())
    assert admin_client.get(preview_url(task)).status_code == 404
    for bad in ("abc", "999999999999999999999"):
        url = reverse("admin:emailer_sendemailtask_preview", args=[bad])
        assert admin_client.get(url).status_code == 404


def test_a_preview_that_cannot_be_rendered_says_why_in_text(
    admin_client: Client, make_project: Any, make_task: Any
) -> None:
    task = make_task(make_project(), html_body=HTML)
    SendEmailTask.objects.filter(pk=task.pk).update(html_body="{% load static %}")
    response = admin_client.get(preview_url(task))
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content.decode().startswith(
        "html_body: template error: line 1: the tag {% load %} is not available"
    )
    assert response["Content-Security-Policy"].startswith("default-src 'none';")


def test_every_emailer_and_subscriptions_admin_page_carries_a_policy(admin_client: Any) -> None:
    """The apps' admin pages do not go out without a Content-Security-Policy."""
    from django.contrib import admin

    for model in admin.site._registry:
        if model._meta.app_label not in ("emailer", "subscriptions"):
            continue
        url = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert response.headers.get("Content-Security-Policy"), url
