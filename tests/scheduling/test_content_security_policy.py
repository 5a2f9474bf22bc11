"""Every page of the engine sends a Content-Security-Policy, and never replaces the host's.

The engine's admin pages, its dashboard, ``/health/`` and ``/metrics`` carry the apps' policy
(``scheduling.pages.csp``) wherever the host sends none: through Django 6's CSP middleware when the
host runs it (with its per-request nonce), or set by the view itself when it does not (Django
5.2, or a host without the middleware). A host policy (``SECURE_CSP``), a header a view set
itself and ``SCHEDULING_CSP = False`` all win. The pages hold no inline style or script, so
the admin works under the policy; the browser tests (``*_browser.py``) watch its console.
"""

from __future__ import annotations

from typing import Any

import django
import pytest
from django.test import Client
from django.utils import timezone

from scheduling.models import Job
from scheduling.pages import csp
from scheduling.stages import controls
from tests.factories import create_job

pytestmark = pytest.mark.django_db

NOOP = "scheduling.diagnostics.noop"
CSP = "Content-Security-Policy"
MIDDLEWARE = "django.middleware.csp.ContentSecurityPolicyMiddleware"
needs_django_6 = pytest.mark.skipif(django.VERSION < (6, 0), reason="Django 6's CSP middleware")


@pytest.fixture
def job(admin_user: Any) -> Job:
    job = create_job(owner=admin_user, name="nightly", task=NOOP, every="PT1H",
                          now=timezone.now())  # fmt: skip
    controls.run_job_now(job=job, now=timezone.now())
    return job


def engine_pages(job: Job) -> list[str]:
    execution = job.executions.get()
    base = "/admin/scheduling"
    return [
        f"{base}/job/",
        f"{base}/job/add/",
        f"{base}/job/{job.pk}/change/",
        f"{base}/job/{job.pk}/delete/",
        f"{base}/job/{job.pk}/history/",
        f"{base}/execution/",
        f"{base}/execution/{execution.pk}/change/",
        f"{base}/schedule/",
        f"{base}/schedule/add/",
        f"{base}/schedule/{job.schedule_id}/change/",
        "/dashboard/",
    ]


@pytest.fixture
def without_csp_middleware(settings: Any) -> None:
    """A host that does not run Django's CSP middleware (and Django 5.2, which has none)."""
    settings.MIDDLEWARE = [name for name in settings.MIDDLEWARE if name != MIDDLEWARE]


def directives(header: str) -> dict[str, list[str]]:
    found = {}
    for part in header.split(";"):
        name, *values = part.split()
        found[name] = values
    return found


@needs_django_6
def test_each_engine_page_sends_the_policy_through_djangos_middleware_with_its_nonce(
    admin_client: Client, job: Job
) -> None:
    for url in engine_pages(job):
        response = admin_client.get(url)
        assert response.status_code == 200, url
        policy = directives(response[CSP])
        assert policy["default-src"] == ["'self'"] and policy["object-src"] == ["'none'"], url
        assert policy["frame-ancestors"] == ["'self'"] and policy["base-uri"] == ["'none'"], url
        nonces = [v for v in policy["script-src"] if v.startswith("'nonce-")]
        # The middleware names a nonce once a template asked for it: Django 6.1's admin
        # templates do, 6.0's do not (the pages need none: they hold no inline script).
        if django.VERSION >= (6, 1):
            assert nonces, url
        for nonce in nonces:
            # The page's own tags carry the same nonce (Django's templates and csp context).
            assert f'nonce="{nonce[7:-1]}"' in response.content.decode(), url


def test_without_the_middleware_the_view_sets_the_policy_itself(
    admin_client: Client, job: Job, without_csp_middleware: None
) -> None:
    for url in engine_pages(job):
        response = admin_client.get(url)
        assert response[CSP] == csp.render(csp.PAGE_POLICY), url
        assert "nonce" not in response[CSP]


@pytest.mark.parametrize("url", ["/health/", "/health/live/", "/metrics"])
@pytest.mark.parametrize("middleware", [True, False])
def test_health_and_metrics_may_load_run_and_be_framed_by_nothing(
    client: Client, settings: Any, url: str, middleware: bool
) -> None:
    if not middleware:
        settings.MIDDLEWARE = [name for name in settings.MIDDLEWARE if name != MIDDLEWARE]
    elif django.VERSION < (6, 0):
        pytest.skip("Django 6's CSP middleware")
    policy = directives(client.get(url)[CSP])
    assert policy == {
        "default-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'none'"],
        "frame-ancestors": ["'none'"],
    }


def test_the_engines_pages_hold_no_inline_style_or_script(admin_client: Client, job: Job) -> None:
    """The policy allows no inline style or script; the pages need none."""
    Job.objects.filter(pk=job.pk).update(status="paused", pause_reason="maintenance")
    for url in engine_pages(job):
        page = admin_client.get(url).content.decode()
        assert 'style="' not in page and "<style>" not in page, url
        assert "<script>" not in page and "onclick=" not in page, url


@needs_django_6
def test_a_host_policy_governs_the_engines_pages_too(
    admin_client: Client, job: Job, settings: Any
) -> None:
    settings.SECURE_CSP = {"default-src": ["'self'"], "img-src": ["'self'", "https:"]}
    for url in (*engine_pages(job), "/health/"):
        assert admin_client.get(url)[CSP] == "default-src 'self'; img-src 'self' https:", url


def test_a_header_set_before_is_kept(rf: Any, without_csp_middleware: None) -> None:
    from django.http import HttpResponse

    def view(request: Any) -> HttpResponse:
        response = HttpResponse("preview")
        response[CSP] = "default-src 'none'; img-src data:"
        return response

    response = csp.with_csp(view)(rf.get("/"))
    assert response[CSP] == "default-src 'none'; img-src data:"


def test_the_engine_sends_none_when_told_to_leave_it_to_the_host(
    admin_client: Client, job: Job, settings: Any, without_csp_middleware: None
) -> None:
    settings.SCHEDULING_CSP = False
    for url in (*engine_pages(job), "/health/", "/metrics"):
        assert CSP not in admin_client.get(url), url


def test_static_files_on_another_site_are_allowed_where_files_load(
    admin_client: Client, job: Job, settings: Any, without_csp_middleware: None
) -> None:
    settings.STATIC_URL = "https://cdn.example.org/static/"
    policy = directives(admin_client.get("/admin/scheduling/job/")[CSP])
    for directive in ("script-src", "style-src", "img-src", "font-src"):
        assert "https://cdn.example.org" in policy[directive], directive
    assert policy["default-src"] == ["'self'"]


def test_the_admin_sites_own_pages_are_left_to_the_host(
    admin_client: Client, client: Client, without_csp_middleware: None
) -> None:
    assert CSP not in admin_client.get("/admin/")
    assert CSP not in client.get("/admin/login/")
