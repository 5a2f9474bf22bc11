"""This repository's own URL routes: the Django admin, the engine's pages (dashboard, health
probe, metrics) and the emailer's unsubscribe link, mounted the way a host project mounts them."""

from django.apps import apps
from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

# django-celery-beat is installed (where it is) only so that `manage.py import_beat` can read
# its tables; its admin pages would offer a second, competing scheduler beside the jobs.
if apps.is_installed("django_celery_beat"):
    for _model in apps.get_app_config("django_celery_beat").get_models():
        if admin.site.is_registered(_model):
            admin.site.unregister(_model)

urlpatterns = [
    # The dashboard's address in earlier releases of this project.
    path("admin/dashboard/", RedirectView.as_view(pattern_name="scheduling:dashboard")),
    path("admin/", admin.site.urls),
    path("", include("scheduling.urls")),
    path("emailer/", include("emailer.urls")),
]
