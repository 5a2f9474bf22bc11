"""Typed readers for environment variables.

Each reader fails loudly, naming the variable, when a value is malformed: a typo in a
deployment's environment must stop the process at start, not change behaviour silently.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}: expected one of 1/0/true/false/yes/no, got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: expected an integer, got {raw!r}") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: expected a number, got {raw!r}") from None


def persistent_secret_key(path: Path) -> str:
    """Return the key stored at ``path``, creating it once.

    The embedded mode needs a stable secret (sessions survive restarts) without a constant in
    the code, so the first start writes a random one that only this checkout knows.
    """
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key)
    return key


def parse_database_url(url: str) -> dict[str, object]:
    """Turn ``postgres://user:pass@host:port/name``, ``mysql://user:pass@host:port/name``
    (``mariadb://`` alike) or ``sqlite:///path`` into a DATABASES entry."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    options = dict(parse_qsl(parts.query))
    if scheme == "sqlite":
        path = unquote(parts.path)
        if parts.netloc == "" and path.startswith("//"):
            path = path[1:]
        name = path if path not in ("", "/", "/:memory:") else ":memory:"
        if name != ":memory:":
            Path(name).parent.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name,
            # Writers take the lock when the transaction starts, so a claim never has to be
            # upgraded from a read lock (SQLite's equivalent of SELECT ... FOR UPDATE).
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20, **options},
        }
    if scheme in ("postgres", "postgresql", "pgsql"):
        name = unquote(parts.path.lstrip("/"))
        if not name:
            raise ImproperlyConfigured(f"DATABASE_URL: no database name in {url!r}")
        # Behind a pooler in transaction mode (PgBouncer, RDS Proxy, Supavisor) a session
        # lasts one transaction: no server-side cursors and no prepared statements.
        pooled = env_bool("DATABASE_TRANSACTION_POOLING", False)
        if pooled:
            options = {"prepare_threshold": None, **options}
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "DISABLE_SERVER_SIDE_CURSORS": pooled,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            # Workers and schedulers keep their connection (a reconnect per task would cost
            # more than the task). One that raised an error is tested and replaced by
            # close_old_connections() before the next task or tick; a health check before
            # every use would add a round trip per task.
            "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 600),
            "OPTIONS": options,
        }
    if scheme in ("mysql", "mariadb"):
        return _mysql_database(url, parts, options)
    raise ImproperlyConfigured(
        f"DATABASE_URL: unsupported scheme {scheme!r} (use postgres://, mysql:// or sqlite:///)"
    )


#: What the ledger needs of every MySQL/MariaDB session: strict mode, so a value too long or
#: out of range is refused rather than cut short; UTC, so the database's own clock (which
#: stamps heartbeats and claims) reads in the zone Django stores DATETIME columns in.
MYSQL_SESSION = "SET sql_mode = 'STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION', time_zone = '+00:00'"


def _mysql_database(url: str, parts: Any, options: dict[str, str]) -> dict[str, object]:
    """A DATABASES entry for Django's MySQL backend (mysqlclient), MariaDB 10.6+ or MySQL 8.0+.

    utf8mb4 (every name and argument round-trips), READ COMMITTED (Django's default there,
    named so that a server set to REPEATABLE READ does not change the claims' behaviour), and
    the session of ``MYSQL_SESSION``. A query string's options are passed on to the driver.
    """
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ImproperlyConfigured(f"DATABASE_URL: no database name in {url!r}")
    driver: dict[str, object] = {
        "charset": "utf8mb4",
        "isolation_level": "read committed",
        "init_command": MYSQL_SESSION,
        **options,
    }
    return {
        "ENGINE": "django.db.backends.mysql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 600),
        "OPTIONS": driver,
        "TEST": {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_bin"},
    }
