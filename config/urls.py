"""URL routes: the Django admin is the product's web interface; probes sit beside it."""

from django.contrib import admin
from django.urls import path

from scheduling import dashboard, health, metrics

urlpatterns = [
    *dashboard.urls(),
    path("admin/", admin.site.urls),
    path("health/", health.health_view, name="health"),
    path("metrics", metrics.metrics_view, name="metrics"),
]
