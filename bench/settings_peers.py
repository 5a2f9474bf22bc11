"""Django settings for the peer benchmarks: the project's settings plus django-celery-beat.

The peers must run against the same Django, Celery and PostgreSQL as Duecourse, but
django-celery-beat is not one of the project's apps, so its tables live only in a benchmark
database (``bench_dcb``) that is created from these settings and dropped afterwards.
"""

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_celery_beat"]

# django-celery-beat stores aware datetimes and compares them with Celery's clock in UTC.
DJANGO_CELERY_BEAT_TZ_AWARE = True
