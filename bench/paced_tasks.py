"""The tasks the paced-producer benchmark runs on Celery workers (``bench/paced_queue.py``).

``paced_body`` is a Django task on Duecourse's backend (``settings_paced``): each enqueue is a
ledger row published on commit, each run is claimed, heartbeated and recorded by the worker.
``floor_body`` is the same body as a plain ``acks_late`` Celery task with no ledger at all:
what the Celery worker itself costs, under Duecourse's rows.
"""

from __future__ import annotations

from celery import shared_task
from paced_body import run_sync

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

FLOOR_TASK = "bench.paced_floor"


@task
def paced_body(seq: int) -> None:
    """Note the start, work 1 ms; the result (None) is kept in the ledger."""
    run_sync(seq)


@shared_task(name=FLOOR_TASK, acks_late=True)
def floor_body(seq: int) -> None:
    """The same body with nothing recorded: Celery's own cost per job."""
    run_sync(seq)
