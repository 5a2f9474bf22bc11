"""The project's settings plus the test-only task-table app (``tests.tasktable_app``)."""

import os

from django.conf.global_settings import PASSWORD_HASHERS as DEFAULT_HASHERS

# The suite runs on a DATABASE_URL, where the project requires a shared key; the worker and
# scheduler processes it starts inherit this one. (Without DATABASE_URL, the embedded default
# makes its own, as tests/test_embedded.py checks.)
if "DATABASE_URL" in os.environ:
    os.environ.setdefault("SECRET_KEY", "tests-only-" + "k" * 50)

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.tasktable_app"]

# Passwords the suite sets are hashed with a cheap hasher: the default one spends about 0.3 s of
# CPU per hash by design, and the admin tests log in hundreds of users; what they test is who
# may do what, not the hash. The default hashers stay behind it, so a password that a process
# hashed with the project's own settings (the demo's login) still checks.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher", *DEFAULT_HASHERS]

# Each run of the suite makes its test databases under a name of its own (pytest-xdist adds
# each process's suffix to it), so two runs on one machine, by two people or beside a CI run,
# never drop each other's database. A run drops its own at the end.
_default = DATABASES["default"]  # noqa: F405
if _default["ENGINE"].endswith("postgresql"):
    _run = os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getpid()))
    # PostgreSQL keeps 63 bytes of a name, and pytest-xdist adds "_gwN": the run's id is kept
    # whole, the database's own name shortened.
    _name = f"test_{_default['NAME']}"[: 63 - len(_run) - 6]
    _default["TEST"] = {**_default.get("TEST", {}), "NAME": f"{_name}_{_run}"}
elif _default["ENGINE"].endswith("mysql"):
    # MySQL keeps 64 characters of a name. The run's database starts with the configured name
    # (not "test_"), so an account granted rights on that name's prefix alone can make it.
    _run = os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getpid()))[:12]
    _name = f"{_default['NAME']}"[: 64 - len(_run) - 11]
    _default["TEST"] = {**_default.get("TEST", {}), "NAME": f"{_name}_test_{_run}"}
