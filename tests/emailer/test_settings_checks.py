"""Every ``EMAILER_*`` setting is checked for type and range by ``manage.py check``.

A value out of range is an error naming the setting and the values it accepts, with one id per
setting, instead of passing the checks and answering a page with a 500 or failing a run later.
The install guide's settings table states each range, and reading a bad value at run time
fails with the same sentence.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from emailer import checks, conf
from tests.conftest import ROOT

BAD_VALUES: dict[str, list[Any]] = {
    "SITE_URL": ["not a url", "ftp://example.org", "https://", 8000, None, "https://x.org/?a=1"],
    "CHUNK_SIZE": [0, -5, 10_001, "50", 2.5, True, None],
    "PROGRESS_INTERVAL": [-1, 61, float("nan"), float("inf"), "2"],
    "BACKOFF_BASE": [0, -1, 3601, "1"],
    "BACKOFF_MAX": [0, 86_401, "60"],
    "TRIES": [0, 101, 3.0, "5"],
}


def setting_errors() -> list[Any]:
    return [m for m in checks.check_settings() if m.id.startswith("emailer.E")]


def test_the_defaults_pass() -> None:
    assert setting_errors() == []


@pytest.mark.parametrize(
    ("name", "value"), [(name, value) for name, values in BAD_VALUES.items() for value in values]
)
def test_a_value_of_the_wrong_type_or_out_of_range_is_an_error_naming_the_setting_and_range(
    settings: Any, name: str, value: Any
) -> None:
    setattr(settings, f"EMAILER_{name}", value)
    setting = conf.BY_NAME[name]
    (error,) = setting_errors()
    assert error.id == setting.check_id
    assert error.msg.startswith(f"EMAILER_{name} is {value!r}: it must be {setting.accepted()}")
    with pytest.raises(ImproperlyConfigured, match=f"EMAILER_{name} is"):
        conf.get(name)


@pytest.mark.parametrize("name", [s.name for s in conf.SETTINGS])
def test_each_setting_has_its_own_check_id(name: str) -> None:
    ids = [s.check_id for s in conf.SETTINGS]
    assert ids.count(conf.BY_NAME[name].check_id) == 1


def test_the_edges_of_each_range_pass(settings: Any) -> None:
    for setting in conf.SETTINGS:
        if setting.kind == "url":
            continue
        for value in (setting.low, setting.high):
            setattr(settings, setting.setting, int(value) if setting.kind == "int" else value)
    assert setting_errors() == []


def test_a_longest_delay_below_the_first_is_an_error(settings: Any) -> None:
    settings.EMAILER_BACKOFF_BASE = 10.0
    settings.EMAILER_BACKOFF_MAX = 5.0
    (error,) = setting_errors()
    assert error.id == "emailer.E014" and "EMAILER_BACKOFF_MAX is 5.0" in error.msg


def test_manage_py_check_fails_on_a_bad_setting(settings: Any) -> None:
    settings.EMAILER_CHUNK_SIZE = 0
    with pytest.raises(SystemCheckError, match=r"emailer\.E002.*EMAILER_CHUNK_SIZE is 0"):
        call_command("check")


def test_the_install_guide_states_each_settings_range() -> None:
    guide = (ROOT / "docs" / "install.md").read_text()
    for setting in conf.SETTINGS:
        row = re.search(rf"^\| `{setting.setting}` \|.*$", guide, re.M)
        assert row, setting.setting
        if setting.kind == "url":
            assert "an http or https address with a host name" in row.group(0)
        else:
            span = f"{conf._number(setting.low)} to {conf._number(setting.high)}"
            assert span in row.group(0), (setting.setting, span)
