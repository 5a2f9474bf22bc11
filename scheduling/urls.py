"""The engine's pages outside the admin, for a host to mount where it likes.

``path("ops/", include("scheduling.urls"))`` serves the dashboard (staff only, behind the
admin's login) at ``ops/dashboard/``, the health probe at ``ops/health/`` (liveness alone at
``ops/health/live/``) and Prometheus metrics at ``ops/metrics``. The admin pages themselves
come with ``admin.site.urls`` as usual. Names are in the ``scheduling`` namespace
(``scheduling:dashboard``, ``scheduling:health``, ``scheduling:health-live``,
``scheduling:metrics``). Each sends the apps' Content-Security-Policy where the host sends
none (``scheduling.pages.csp``).
"""

from django.urls import path

from scheduling.pages.csp import DATA_POLICY, with_csp
from scheduling.web import dashboard, health, metrics

app_name = "scheduling"

urlpatterns = [
    path("dashboard/", dashboard.staff_dashboard_view(), name="dashboard"),
    # JSON and text: a policy that lets them load, run and frame nothing (scheduling.pages.csp).
    path("health/", with_csp(health.health_view, policy=DATA_POLICY), name="health"),
    path("health/live/", with_csp(health.live_view, policy=DATA_POLICY), name="health-live"),
    path("metrics", with_csp(metrics.metrics_view, policy=DATA_POLICY), name="metrics"),
]
