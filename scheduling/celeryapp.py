"""The host project's Celery app, found the way ``shared_task`` finds it.

Duecourse is a plugin: it never imports a module of the project that installed it. A Django +
Celery project creates its app in its own package (``config/celery_app.py``, ``proj/celery.py``)
and imports it when Django starts, which makes it Celery's current app; a worker or beat started
with ``celery -A …`` sets it too. Every part of the engine that publishes, inspects a broker or
looks tasks up asks here, at the moment it needs the app, never at import time.
"""

from __future__ import annotations

import sys

from celery import Celery
from celery import current_app as _current_app


def celery_app() -> Celery:
    """Celery's current app: the host project's, once its Celery module has been imported."""
    app: Celery = _current_app._get_current_object()
    return app


def is_fallback(app: Celery) -> bool:
    """True when no project app was ever created and Celery made up its bare default one.

    Celery's fallback app is created with no fix-ups (not even Django's) under the main name
    ``default``; a project's app always carries the Django fix-up.
    """
    return app.main == "default" and not app.fixups


def app_path() -> str:
    """The ``-A`` argument that names the current app: ``module:attribute``.

    For starting a worker beside the current process (``manage.py runstack``): the module that
    holds the app object is found among those already imported, so the host need not say it.
    """
    app = celery_app()
    for name, module in list(sys.modules.items()):
        if module is None or name.startswith(("celery", "kombu", "scheduling")):
            continue
        for attribute in ("app", "celery_app", "celery"):
            if getattr(module, attribute, None) is app:
                return f"{name}:{attribute}"
    raise LookupError(
        "cannot tell which module holds the project's Celery app; set SCHEDULING_CELERY_APP "
        "to its -A argument (for example config.celery_app)"
    )
