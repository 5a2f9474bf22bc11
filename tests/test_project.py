"""The project itself: checks pass, migrations match the models, settings fail loudly."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from config import env
from tests.conftest import ROOT


def test_system_checks_pass() -> None:
    out = StringIO()
    call_command("check", stdout=out)
    assert "no issues" in out.getvalue()


@pytest.mark.django_db
def test_migrations_match_the_models() -> None:
    call_command("makemigrations", "--check", "--dry-run", stdout=StringIO())


@pytest.mark.parametrize(
    ("url", "engine", "name"),
    [
        ("postgres://u:p@db.example:5433/ledger", "django.db.backends.postgresql", "ledger"),
        ("sqlite:////tmp/x/ledger.sqlite3", "django.db.backends.sqlite3", "/tmp/x/ledger.sqlite3"),
    ],
)
def test_database_url_is_parsed(url: str, engine: str, name: str) -> None:
    parsed = env.parse_database_url(url)
    assert parsed["ENGINE"] == engine
    assert parsed["NAME"] == name


def test_unsupported_database_url_names_the_variable() -> None:
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        env.parse_database_url("oracle://root@localhost/x")


@pytest.mark.parametrize("scheme", ["mysql", "mariadb"])
def test_a_mysql_url_is_django_s_mysql_backend_with_what_the_ledger_needs(scheme: str) -> None:
    url = f"{scheme}://app:s%40cret@db.example:3307/ledger?ssl_mode=REQUIRED"
    found = env.parse_database_url(url)
    assert found["ENGINE"] == "django.db.backends.mysql"
    assert (found["NAME"], found["USER"], found["PASSWORD"]) == ("ledger", "app", "s@cret")
    assert (found["HOST"], found["PORT"]) == ("db.example", "3307")
    options = found["OPTIONS"]
    assert isinstance(options, dict)
    assert options["charset"] == "utf8mb4" and options["isolation_level"] == "read committed"
    assert "STRICT_TRANS_TABLES" in options["init_command"]
    assert "time_zone = '+00:00'" in options["init_command"]
    assert options["ssl_mode"] == "REQUIRED"
    with pytest.raises(ImproperlyConfigured, match="no database name"):
        env.parse_database_url(f"{scheme}://app@db.example/")


@pytest.mark.parametrize(("name", "value"), [("DEBUG", "maybe"), ("EMAIL_PORT", "twenty-five")])
def test_malformed_environment_stops_the_process_naming_the_variable(name: str, value: str) -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**os.environ, name: value},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert name in result.stderr


def test_secret_key_is_generated_once_and_kept(tmp_path: os.PathLike[str]) -> None:
    path = tmp_path / "secret_key"  # type: ignore[operator]
    first = env.persistent_secret_key(path)
    assert len(first) > 40
    assert env.persistent_secret_key(path) == first
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_every_setting_is_in_the_install_guides_table() -> None:
    from emailer import conf as emailer_conf
    from scheduling import conf as scheduling_conf

    guide = (ROOT / "docs" / "install.md").read_text()
    names = [f"SCHEDULING_{name}" for name in scheduling_conf.KNOBS]
    names += [f"EMAILER_{name}" for name in emailer_conf.DEFAULTS]
    names += [
        "SUBSCRIPTIONS_MAX_RETRIES",
        "SUBSCRIPTIONS_RETRY_DELAY",
        "SUBSCRIPTIONS_TIMEOUT",
        "SUBSCRIPTIONS_BATCH_SIZE",
        "SUBSCRIPTIONS_GATEWAY",
    ]
    missing = [name for name in names if f"| `{name}` |" not in guide]
    assert missing == []


def test_the_install_guide_states_the_range_of_every_engine_setting() -> None:
    """The settings table's "accepts" column says what ``scheduling.E008`` holds the value to."""
    from scheduling import conf as scheduling_conf

    guide = (ROOT / "docs" / "install.md").read_text()
    rows = {
        line.split("|")[1].strip(" `"): [cell.strip() for cell in line.split("|")[2:4]]
        for line in guide.splitlines()
        if line.startswith("| `SCHEDULING_")
    }
    stated = {name: rows.get(f"SCHEDULING_{name}", ["", ""])[1] for name in scheduling_conf.KNOBS}
    assert stated == {name: knob.range_text() for name, knob in scheduling_conf.KNOBS.items()}


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _without_ours(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DJANGO_SETTINGS_MODULE")}
    return {**env, **extra}


def test_a_missing_secret_key_stops_a_process_outside_the_embedded_default() -> None:
    result = _manage(
        "check", env=_without_ours(DATABASE_URL="postgres://postgres@127.0.0.1:5432/x")
    )
    assert result.returncode != 0
    assert "SECRET_KEY: not set" in result.stderr
    assert "Traceback" not in result.stderr.splitlines()[-1]


PRODUCTION = {
    # A database of its own: the checks that read the ledger find it empty (or absent).
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/duecourse_deploy_check",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
    "SECRET_KEY": "a-production-key-" + "x7Qz9" * 10,
    "ALLOWED_HOSTS": "duecourse.example.org",
    "CSRF_TRUSTED_ORIGINS": "https://duecourse.example.org",
    "HTTPS": "true",
    "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO",
    "SITE_URL": "https://duecourse.example.org",
    "EMAIL_HOST": "smtp.example.org",
    # The project's payment gateway (imported when a renewal first charges).
    "SUBSCRIPTIONS_GATEWAY": "tests.card_gateway.CardGateway",
}


def test_check_deploy_is_clean_with_the_documented_production_environment() -> None:
    result = _manage(
        "check", "--deploy", "--fail-level", "WARNING", env=_without_ours(**PRODUCTION)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_names_the_test_gateway_and_a_local_site_url() -> None:
    env = _without_ours(**PRODUCTION)
    for name in ("SITE_URL", "SUBSCRIPTIONS_GATEWAY"):
        env.pop(name)
    result = _manage("check", "--deploy", env=env)
    assert "emailer.W001" in result.stdout + result.stderr
    assert "subscriptions.W001" in result.stdout + result.stderr


def test_check_deploy_names_what_is_missing_without_https() -> None:
    env = _without_ours(**{**PRODUCTION, "HTTPS": "false"})
    result = _manage("check", "--deploy", env=env)
    assert "security.W004" in result.stdout + result.stderr  # no HSTS
    assert "security.W008" in result.stdout + result.stderr  # no SSL redirect
