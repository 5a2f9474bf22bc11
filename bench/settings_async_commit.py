"""What-if settings: the project's settings, but PostgreSQL commits without waiting for disk.

With ``synchronous_commit = off`` a commit returns before its WAL is flushed, so a server
crash can forget the last fraction of a second of commits. For a worker's claim or end that
would mean a run done twice after a database crash, which is why the project never does it.
``worker_throughput.py --what-if settings_async_commit`` puts a number on how much of the
history side's cost is waiting for the disk and how much is the work itself.
"""

from config.settings import *  # noqa: F403
from config.settings import DATABASES

_options = DATABASES["default"].setdefault("OPTIONS", {})
_options["options"] = f"{_options.get('options', '')} -c synchronous_commit=off".strip()
