"""The procrastinate side of the paced-producer benchmark (``bench/paced_queue.py``).

The same 1-ms body as the Celery sides, as a coroutine: procrastinate's worker runs its
``concurrency`` jobs as tasks of one event loop, so an awaited sleep is its natural form of
1 ms of waiting (a blocking sleep would hold every other job of the process). The database
comes from ``BENCH_PROCRASTINATE_DSN``; ``python -m procrastinate --app paced_procapp.app
worker`` (with ``bench/`` on PYTHONPATH) runs it.
"""

from __future__ import annotations

import asyncio
import os

from paced_body import WORK, note_start
from procrastinate import App, PsycopgConnector

QUEUE = os.environ.get("BENCH_PACED_QUEUE", "paced")

app = App(connector=PsycopgConnector(conninfo=os.environ.get("BENCH_PROCRASTINATE_DSN", "")))


@app.task(name="paced_body", queue=QUEUE)
async def paced_body(seq: int) -> None:
    """Note the start, then 1 ms of awaited work."""
    note_start(seq)
    await asyncio.sleep(WORK)
