from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "hostproj.billing"
    label = "billing"
