from django.apps import apps
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ops/", include("scheduling.urls")),
]
if apps.is_installed("emailer"):  # as docs/install.md says: the one-click unsubscribe
    urlpatterns.append(path("emailer/", include("emailer.urls")))
