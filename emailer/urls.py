"""The emailer's public URL: the one-click unsubscribe link found in every message."""

from django.urls import path

from emailer import views

app_name = "emailer"

urlpatterns = [
    path("unsubscribe/<str:token>/", views.unsubscribe, name="unsubscribe"),
]
