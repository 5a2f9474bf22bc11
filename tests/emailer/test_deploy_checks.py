"""The emailer's checks: ``manage.py check --deploy`` warns when unsubscribe links would be
built on a local or plain-http address (the default), and ``check`` when they cannot be built
at all (the emailer's URLs are not included)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import run_checks

from emailer import checks


@pytest.mark.parametrize(
    "url",
    ["http://localhost:8000", "https://localhost", "http://mail.example.com", "https://127.0.0.1/"],
)
def test_a_local_or_plain_http_site_url_is_warned(settings: Any, url: str) -> None:
    settings.EMAILER_SITE_URL = url
    messages = checks.check_site_url()
    assert [m.id for m in messages] == ["emailer.W001"] and url.rstrip("/") in messages[0].msg


def test_a_public_https_site_url_passes(settings: Any) -> None:
    settings.EMAILER_SITE_URL = "https://news.example.com/"
    assert checks.check_site_url() == []


def test_the_warning_is_a_deploy_check_only(settings: Any) -> None:
    settings.EMAILER_SITE_URL = "http://localhost:8000"
    assert "emailer.W001" not in {m.id for m in run_checks()}
    assert "emailer.W001" in {m.id for m in run_checks(include_deployment_checks=True)}


def test_a_urlconf_without_the_emailers_urls_is_warned(settings: Any) -> None:
    assert checks.check_urls_included() == []
    settings.ROOT_URLCONF = "tests.emailer.urls_without_emailer"
    messages = checks.check_urls_included()
    assert [m.id for m in messages] == ["emailer.W002"] and "emailer.urls" in (
        messages[0].hint or ""
    )


def test_a_project_without_a_urlconf_is_left_to_djangos_own_checks(settings: Any) -> None:
    del settings.ROOT_URLCONF
    assert checks.check_urls_included() == []
