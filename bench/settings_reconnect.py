"""What-if settings: the project's settings, but reconnecting to PostgreSQL all the time.

Django's default ``CONN_MAX_AGE = 0`` makes ``close_old_connections`` (called at every scheduler
tick and before every task) drop the connection, and Celery's Django fix-up closes a worker's
connections around every task unless ``CELERY_DB_REUSE_MAX`` is set. The project keeps its
connections instead; ``--what-if settings_reconnect`` (tick_cost.py, worker_throughput.py)
shows what that choice is worth on the machine at hand.
"""

from config.settings import *  # noqa: F403
from config.settings import DATABASES

DATABASES["default"]["CONN_MAX_AGE"] = 0
CELERY_DB_REUSE_MAX = None
