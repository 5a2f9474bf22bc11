from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        """Connect the Celery receivers and collect every app's ``scheduled`` declarations.

        A domain app declares its task tables in its own ``scheduled`` module (see
        docs/extending.md); importing them here makes the allowlist complete in every process,
        web, worker or scheduler, before a job is validated or run.
        """
        from scheduling import checks  # noqa: F401  (system checks register on import)
        from scheduling.ledger import engines  # noqa: F401  (each prepares its connections)
        from scheduling.worker import receivers  # noqa: F401  (receivers connect at ready)

        autodiscover_modules("scheduled")
