"""What-if settings: the project's settings with server-side binding (prepared statements).

Django's psycopg 3 backend binds parameters on the client by default, so PostgreSQL parses and
plans every statement every time; the worker's start and completion are multi-CTE statements
that run once per task. With ``server_side_binding`` psycopg sends parameters separately and
prepares a statement after it has run a few times (``prepare_threshold``), so the plan is
reused. ``--what-if settings_prepared`` measures what that is worth.
"""

from config.settings import *  # noqa: F403
from config.settings import DATABASES

DATABASES["default"].setdefault("OPTIONS", {})
DATABASES["default"]["OPTIONS"]["server_side_binding"] = True
