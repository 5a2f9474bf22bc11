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
        env.parse_database_url("mysql://root@localhost/x")


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
