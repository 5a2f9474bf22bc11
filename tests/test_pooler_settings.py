"""Behind a connection pooler in transaction mode, one switch turns off what cannot survive it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from config.env import parse_database_url
from tests.conftest import ROOT

URL = "postgres://app@pooler:6432/duecourse"


def test_without_a_pooler_postgresql_keeps_its_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_TRANSACTION_POOLING", raising=False)
    config = parse_database_url(URL)
    assert config["DISABLE_SERVER_SIDE_CURSORS"] is False
    assert "prepare_threshold" not in config["OPTIONS"]  # type: ignore[operator]


def test_transaction_pooling_turns_off_cursors_and_prepared_statements(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_TRANSACTION_POOLING", "true")
    config = parse_database_url(URL)
    assert config["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert config["OPTIONS"] == {"prepare_threshold": None}


def test_transaction_pooling_also_turns_off_the_workers_prepared_statements() -> None:
    env = {**os.environ, "DATABASE_URL": URL, "DATABASE_TRANSACTION_POOLING": "1"}
    env.pop("SCHEDULING_PREPARE_STATEMENTS", None)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, json; django.setup(); from scheduling import conf;"
            " print(json.dumps(conf.get('PREPARE_STATEMENTS')))",
        ],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) is False
