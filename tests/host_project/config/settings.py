"""The host's settings: nothing of Duecourse's beyond INSTALLED_APPS, a database and Celery."""

import os
from pathlib import Path

import django

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "host-project-test-key"
DEBUG = False
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Django's Tasks framework: built into Django 6, the django-tasks backport's app on 5.2.
    *(["django_tasks"] if django.VERSION < (6,) else []),
    "hostproj.billing",
    "scheduling",
    *[app for app in os.environ.get("HOST_EXTRA_APPS", "").split(",") if app],
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "config.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["HOST_DB_NAME"],
        "USER": os.environ.get("HOST_DB_USER", "postgres"),
        "PASSWORD": os.environ.get("HOST_DB_PASSWORD", ""),
        "HOST": os.environ.get("HOST_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("HOST_DB_PORT", "5432"),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"

CELERY_BROKER_URL = os.environ["HOST_BROKER_URL"]
CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": os.environ["HOST_BROKER_PREFIX"]}
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]

TASKS = {
    "default": {
        "BACKEND": "scheduling.tasks_backend.DuecourseTaskBackend",
        "QUEUES": ["default", "reports"],
    }
}
