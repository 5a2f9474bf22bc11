"""Typed readers for environment variables.

Each reader fails loudly, naming the variable, when a value is malformed: a typo in a
deployment's environment must stop the process at start, not change behaviour silently.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
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
    """Turn ``postgres://user:pass@host:port/name`` or ``sqlite:///path`` into a DATABASES entry."""
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
    raise ImproperlyConfigured(
        f"DATABASE_URL: unsupported scheme {scheme!r} (use postgres:// or sqlite:///)"
    )
