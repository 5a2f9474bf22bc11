"""Settings for threadmill's side of the Django Tasks benchmark: the project's settings with
threadmill's only backend, ``RedisTaskBackend`` (its queue, running set and results live in
Redis, not in the database), run by ``manage.py threadmill worker``.

threadmill names its Redis keys ``threadmill:{<alias>}:...`` after the TASKS alias, so the
benchmark runs it on an alias of its own, ``duecourse_bench_<run id>`` (``BENCH_TM_ALIAS``), in
the benchmark's Redis database: two runs never share keys and cleanup can delete exactly this
run's. ``default`` is the same backend under the stock name, which Django's ``@task`` needs to
declare the tasks; nothing is ever enqueued on it.

Package defaults (lease_ttl 1 h, result_ttl 1 day, broker_interval 1 s, batch_size 100).
``BENCH_TM_LEASE_TTL`` is set by the crash scenario only: 20 s, "comfortably above" the 3 s
task as threadmill's README asks and the same bound the scenario gives Celery's visibility
timeout, so the lease of a dead worker's task expires within the scenario's 60 s.
"""

import datetime
import os

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "threadmill"]
_OPTIONS: dict[str, datetime.timedelta] = {}
if os.environ.get("BENCH_TM_LEASE_TTL"):
    _OPTIONS["lease_ttl"] = datetime.timedelta(seconds=float(os.environ["BENCH_TM_LEASE_TTL"]))
_BACKEND = {
    "BACKEND": "threadmill.backends.redis.RedisTaskBackend",
    "REDIS_URL": os.environ.get("BENCH_TM_REDIS_URL", "redis://127.0.0.1:6379/6"),
    "QUEUES": ["default", os.environ.get("BENCH_DJ_QUEUE", "bench")],
    "OPTIONS": _OPTIONS,
}
TASKS = {
    "default": _BACKEND,
    os.environ.get("BENCH_TM_ALIAS", "duecourse_bench"): _BACKEND,
}
