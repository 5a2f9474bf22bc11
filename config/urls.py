"""URL routes: the Django admin is the product's web interface; probes and the links in mail
sit beside it."""

from django.contrib import admin
from django.urls import include, path
from django_celery_beat import models as beat

from scheduling import dashboard, health, metrics

# django-celery-beat is installed only so that `manage.py import_beat` can read its tables; its
# admin pages would offer a second, competing scheduler beside the jobs.
for _model in (
    beat.PeriodicTask,
    beat.IntervalSchedule,
    beat.CrontabSchedule,
    beat.SolarSchedule,
    beat.ClockedSchedule,
):
    if admin.site.is_registered(_model):
        admin.site.unregister(_model)

urlpatterns = [
    *dashboard.urls(),
    path("admin/", admin.site.urls),
    path("health/", health.health_view, name="health"),
    path("health/live/", health.live_view, name="health-live"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("emailer/", include("emailer.urls")),
]
