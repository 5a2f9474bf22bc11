from django.apps import AppConfig


class EmailerConfig(AppConfig):
    name = "emailer"
    verbose_name = "Emailer"

    def ready(self) -> None:
        from emailer import checks  # noqa: F401 (registers the deploy checks)
