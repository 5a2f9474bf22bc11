"""The engine's pages outside the admin, for a host to mount where it likes.

``path("ops/", include("scheduling.urls"))`` serves the dashboard (staff only, behind the
admin's login) at ``ops/dashboard/``, the health probe at ``ops/health/`` (liveness alone at
``ops/health/live/``) and Prometheus metrics at ``ops/metrics``. The admin pages themselves
come with ``admin.site.urls`` as usual. Names are in the ``scheduling`` namespace
(``scheduling:dashboard``, ``scheduling:health``, ``scheduling:health-live``,
``scheduling:metrics``).
"""

from django.urls import path

from scheduling import dashboard, health, metrics

app_name = "scheduling"

urlpatterns = [
    path("dashboard/", dashboard.staff_dashboard_view(), name="dashboard"),
    path("health/", health.health_view, name="health"),
    path("health/live/", health.live_view, name="health-live"),
    path("metrics", metrics.metrics_view, name="metrics"),
]
