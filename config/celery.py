"""The Celery app, so that ``celery -A config worker`` and ``celery -A config beat`` work."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("duecourse")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
