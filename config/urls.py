"""URL routes: the Django admin is the product's web interface; mail links the emailer's."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("emailer/", include("emailer.urls")),
]
