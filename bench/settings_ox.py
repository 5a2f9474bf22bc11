"""Settings for django-ox's side of the Django Tasks benchmark: the project's settings with
django-ox's backend (its own ``django_ox_oxtask`` table, run by its own ``ox_worker``).

Package defaults throughout (MAX_ATTEMPTS 3, LOCK_TIMEOUT 300 s, so a lease renewal every
100 s), as its README's configuration section ships them. ``BENCH_OX_LOCK_TIMEOUT`` is set by
the crash scenario only: 15 s, the value django-ox's own published kill test uses, so a dead
worker's task is reclaimed within the scenario's 60 s instead of after five minutes. The
project's ``CONN_MAX_AGE`` of 600 s is what django-ox's worker asks for (it warns at start-up
when every task would open a new connection).
"""

import os

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_ox"]
_OPTIONS: dict[str, float] = {}
if os.environ.get("BENCH_OX_LOCK_TIMEOUT"):
    _OPTIONS["LOCK_TIMEOUT"] = float(os.environ["BENCH_OX_LOCK_TIMEOUT"])
TASKS = {
    "default": {
        "BACKEND": "django_ox.backend.OxBackend",
        "QUEUES": ["default", os.environ.get("BENCH_DJ_QUEUE", "bench")],
        "OPTIONS": _OPTIONS,
    }
}
