"""Django settings for Duecourse.

Everything a deployment changes comes from the environment through the small typed readers in
``config.env``; the defaults give the embedded mode (SQLite and a file-system broker under
``var/``) so that a fresh checkout runs with no server at all.
"""

from __future__ import annotations

import os
from pathlib import Path

import django
from django.core.exceptions import ImproperlyConfigured

from config.env import (
    env_bool,
    env_float,
    env_int,
    env_str,
    parse_database_url,
    persistent_secret_key,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("DUECOURSE_VAR_DIR", str(BASE_DIR / "var")))
# The embedded default: no DATABASE_URL, so SQLite under var/ on this one host.
EMBEDDED = "DATABASE_URL" not in os.environ

# One key for every host of a deployment: unsubscribe links signed on a worker are checked on
# the web host. Only the embedded default, a single host by definition, may make its own.
SECRET_KEY = env_str("SECRET_KEY", "")
if not SECRET_KEY:
    if not EMBEDDED:
        raise ImproperlyConfigured(
            "SECRET_KEY: not set. Outside the embedded default (DATABASE_URL is set) every "
            "host must share one key; set SECRET_KEY in the environment of each process."
        )
    SECRET_KEY = persistent_secret_key(VAR_DIR / "secret_key")
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = [h for h in env_str("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in env_str("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

# --- HTTPS (production: HTTPS=true; `manage.py check --deploy` is then clean) ----------------
# Behind a TLS-terminating proxy, also set SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO (the
# header the proxy sets to "https"); set it only when the proxy strips that header from clients.
HTTPS = env_bool("HTTPS", False)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", HTTPS)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", HTTPS)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", HTTPS)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", HTTPS)
_proxy_header = env_str("SECURE_PROXY_SSL_HEADER", "")
if _proxy_header:
    SECURE_PROXY_SSL_HEADER = (_proxy_header, "https")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "scheduling",
    "emailer",
    "subscriptions",
    # The test gateway (subscriptions.testgateway): the demo's default SUBSCRIPTIONS_GATEWAY,
    # with its tables and admin pages. A production host leaves it out.
    "subscriptions.testgateway",
]

# Its tables hold the PeriodicTask rows that `manage.py import_beat` moves over: the
# `duecourse[beat]` extra, installed where django-celery-beat admits the project's Django.
try:
    import django_celery_beat  # noqa: F401
except ImportError:
    pass
else:
    INSTALLED_APPS.insert(INSTALLED_APPS.index("scheduling"), "django_celery_beat")

# Django's Tasks framework (built into Django 6; the django-tasks backport on 5.2) runs its
# @task functions on this project's Celery workers, with the ledger's history.
try:
    import django.tasks
except ImportError:
    try:
        import django_tasks  # noqa: F401
    except ImportError:
        pass
    else:
        INSTALLED_APPS.append("django_tasks")
TASKS = {
    "default": {
        "BACKEND": "scheduling.tasks_backend.DuecourseTaskBackend",
        "QUEUES": [q for q in env_str("TASKS_QUEUES", "default").split(",") if q],
    }
}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Serves the admin's styles from STATIC_ROOT without DEBUG (collected by `make run`).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

if django.VERSION >= (6, 0):
    # Django's own Content-Security-Policy middleware, with no project-wide policy
    # (SECURE_CSP): the apps' pages (admin, dashboard, /health/, /metrics) send theirs, with
    # the middleware's per-request nonce on the admin's tags (scheduling/pages/csp.py). Setting
    # SECURE_CSP would give every page the project's own policy instead.
    MIDDLEWARE.append("django.middleware.csp.ContentSecurityPolicyMiddleware")

ROOT_URLCONF = "config.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # Project-wide overrides of the admin's templates (its index links the dashboard).
        "DIRS": [BASE_DIR / "config" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

if django.VERSION >= (6, 0):  # the nonce, for {% csp_nonce_attr %} in the admin's templates
    TEMPLATES[0]["OPTIONS"]["context_processors"].append("django.template.context_processors.csp")

WSGI_APPLICATION = "config.wsgi.application"

DATABASES = {
    "default": parse_database_url(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'duecourse.sqlite3'}")
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
if DATABASES["default"]["ENGINE"].endswith("mysql"):
    # MySQL and MariaDB have no partial indexes: Django makes each index whole (the condition
    # dropped), which serves the same queries at the cost of a larger index, and leaves out
    # each partial unique constraint, which the subscriptions app's migration 0009 makes as a
    # unique index over a generated column instead (docs/install.md).
    SILENCED_SYSTEM_CHECKS = ["models.W036", "models.W037"]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
# Storage is always UTC; TIME_ZONE only changes how the admin displays times.
USE_TZ = True
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# WhiteNoise serves the admin's styles without DEBUG. Files found in the apps are served too,
# so `make run` needs no collectstatic; production runs collectstatic and may turn this off.
WHITENOISE_USE_FINDERS = env_bool("WHITENOISE_USE_FINDERS", True)

# --- Mail -----------------------------------------------------------------------------------
# EMAIL_HOST selects SMTP; without it mail is written to files under var/mail (one file per
# connection, so one per emailer run), so the embedded default needs no mail server.
_mail_host = env_str("EMAIL_HOST", "")
_mail_backend = env_str("EMAIL_BACKEND", "") or (
    "django.core.mail.backends.smtp.EmailBackend"
    if _mail_host
    else "django.core.mail.backends.filebased.EmailBackend"
)
_mail_file_path = str(VAR_DIR / "mail")
_mail_port = env_int("EMAIL_PORT", 25)
_mail_user = env_str("EMAIL_HOST_USER", "")
_mail_password = env_str("EMAIL_HOST_PASSWORD", "")
_mail_tls = env_bool("EMAIL_USE_TLS", False)
_mail_ssl = env_bool("EMAIL_USE_SSL", False)
# Django's default is no timeout at all: one stuck server would hang a run until its hard limit.
_mail_timeout = env_float("EMAIL_TIMEOUT", 30.0)
if django.VERSION >= (6, 1):
    # Django 6.1 configures mail as MAILERS and deprecates the EMAIL_* settings.
    MAILERS = {
        "default": {
            "BACKEND": _mail_backend,
            "OPTIONS": (
                {"file_path": _mail_file_path}
                if _mail_backend.endswith(".filebased.EmailBackend")
                else {
                    "host": _mail_host or "localhost",
                    "port": _mail_port,
                    "username": _mail_user,
                    "password": _mail_password,
                    "use_tls": _mail_tls,
                    "use_ssl": _mail_ssl,
                    "timeout": _mail_timeout,
                }
                if _mail_backend.endswith(".smtp.EmailBackend")
                else {}
            ),
        }
    }
else:
    EMAIL_BACKEND = _mail_backend
    EMAIL_FILE_PATH = _mail_file_path
    EMAIL_HOST = _mail_host or "localhost"
    EMAIL_PORT = _mail_port
    EMAIL_HOST_USER = _mail_user
    EMAIL_HOST_PASSWORD = _mail_password
    EMAIL_USE_TLS = _mail_tls
    EMAIL_USE_SSL = _mail_ssl
    EMAIL_TIMEOUT = _mail_timeout
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "duecourse@localhost")
# The public address of this site, for links in mail (unsubscribe); https in production.
EMAILER_SITE_URL = env_str("EMAILER_SITE_URL", "") or env_str("SITE_URL", "http://localhost:8000")
# The emailer's run: participants claimed and recorded per chunk (also the most that a crash
# can leave uncertain), how often live counts are written, and "try later" (4xx) handling.
EMAILER_CHUNK_SIZE = env_int("EMAILER_CHUNK_SIZE", 50)
EMAILER_PROGRESS_INTERVAL = env_float("EMAILER_PROGRESS_INTERVAL", 2.0)
EMAILER_BACKOFF_BASE = env_float("EMAILER_BACKOFF_BASE", 1.0)
EMAILER_BACKOFF_MAX = env_float("EMAILER_BACKOFF_MAX", 60.0)
EMAILER_TRIES = env_int("EMAILER_TRIES", 5)

# --- Celery ---------------------------------------------------------------------------------
# Broker: Redis or RabbitMQ in production; kombu's file-system transport needs no server.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
_broker_dir = VAR_DIR / "broker"
if CELERY_BROKER_URL.startswith("filesystem://"):
    for _folder in (_broker_dir, VAR_DIR / "broker-control"):
        _folder.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "control_folder": str(VAR_DIR / "broker-control"),
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # Longer than any task may run (timeouts are validated against it), so Redis never
        # redelivers a message whose task is still running; the database claim absorbs any
        # duplicate that still arrives.
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600),
        # kombu 5.7: scan for messages of dead workers every interval * throttle seconds.
        "unacked_restore_interval": env_float("CELERY_UNACKED_RESTORE_INTERVAL", 10.0),
        "unacked_restore_throttle": 1,
        "socket_timeout": 10,
        "socket_connect_timeout": 5,
    }
    _prefix = env_str("CELERY_REDIS_KEY_PREFIX", "")
    if _prefix:
        CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = _prefix
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", "") or None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
# At-least-once delivery; the database claim turns it into at-most-one run per occurrence.
CELERY_TASK_ACKS_LATE = True
# A killed pool child acks its message and reports WorkerLostError; the execution is retried
# from its row. Requeueing instead would race the row's own retry and could loop forever.
CELERY_TASK_REJECT_ON_WORKER_LOST = False
CELERY_WORKER_PREFETCH_MULTIPLIER = env_int("CELERY_WORKER_PREFETCH_MULTIPLIER", 1)
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_PUBLISH_RETRY = False
# Celery closes Django's connection around every task unless told to reuse it; reconnecting
# to PostgreSQL per task would cost more than the task. Broken connections are still replaced.
CELERY_DB_REUSE_MAX = env_int("CELERY_DB_REUSE_MAX", 1000)
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_MAX_LOOP_INTERVAL = env_float("SCHEDULING_MAX_SLEEP", 1.0)

# --- Duecourse ------------------------------------------------------------------------------
# The engine's knobs are settings named SCHEDULING_<NAME>, read lazily through scheduling.conf
# where every default is documented; this project takes each from the environment variable of
# the same name.
# The demo (manage.py loaddemo, runstack's generated login) only ever touches the embedded
# default's own database, never one that DATABASE_URL names.
SCHEDULING_DEMO = EMBEDDED
for _name, _value in os.environ.items():
    if _name.startswith("SCHEDULING_") and _name != "SCHEDULING_LOG_LEVEL":
        globals()[_name] = _value

if DATABASES["default"].get("DISABLE_SERVER_SIDE_CURSORS"):
    # DATABASE_TRANSACTION_POOLING: the workers' prepared statements would not survive either.
    globals().setdefault("SCHEDULING_PREPARE_STATEMENTS", False)

# --- Subscriptions --------------------------------------------------------------------------
# Read lazily through subscriptions.conf, where the per-action forms are documented.
SUBSCRIPTIONS_MAX_RETRIES = env_str("SUBSCRIPTIONS_MAX_RETRIES", "3")
SUBSCRIPTIONS_RETRY_DELAY = env_str("SUBSCRIPTIONS_RETRY_DELAY", "600")
SUBSCRIPTIONS_TIMEOUT = env_int("SUBSCRIPTIONS_TIMEOUT", 120)
SUBSCRIPTIONS_BATCH_SIZE = env_int("SUBSCRIPTIONS_BATCH_SIZE", 200)
SUBSCRIPTIONS_GATEWAY = env_str(
    "SUBSCRIPTIONS_GATEWAY", "subscriptions.testgateway.gateway.TestGateway"
)
# Test-only: a renewal stops after this step and waits to be killed (crash tests).

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "scheduling": {
            "handlers": ["console"],
            "level": env_str("SCHEDULING_LOG_LEVEL", "INFO"),
            "propagate": False,
        },
        "emailer": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "subscriptions": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
