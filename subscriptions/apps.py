from django.apps import AppConfig


class SubscriptionsConfig(AppConfig):
    name = "subscriptions"
    verbose_name = "Subscriptions"

    def ready(self) -> None:
        from subscriptions import checks  # noqa: F401 (registers the deploy checks)
