from typing import Any

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.utils.module_loading import autodiscover_modules

from scheduling import ledger
from scheduling.ledger import pgtimes


def _read_out_of_range_times(sender: Any, connection: Any, **_: Any) -> None:
    """A row holding ``infinity`` must not break every reader of its table (see pgtimes)."""
    if ledger.on_postgresql(connection):
        pgtimes.register(connection.connection)


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
        from scheduling.worker import receivers  # noqa: F401  (receivers connect at ready)

        autodiscover_modules("scheduled")
        connection_created.connect(
            _read_out_of_range_times, dispatch_uid="scheduling.ledger.pgtimes"
        )
