"""The procrastinate side of the worker benchmark: one no-op job on the same PostgreSQL.

procrastinate keeps its queue and its history in PostgreSQL alone (``procrastinate_jobs``,
with an event row per change of status); its worker takes a job with one ``SKIP LOCKED``
statement and finishes it with another. ``python -m procrastinate --app procapp.app worker``
(with ``bench/`` on PYTHONPATH) runs ``bench_noop``, which returns at once like the Celery
sides' tasks. The database comes from ``BENCH_PROCRASTINATE_DSN``, set by the benchmark.
"""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

app = App(connector=PsycopgConnector(conninfo=os.environ.get("BENCH_PROCRASTINATE_DSN", "")))


@app.task(name="bench_noop")
def bench_noop() -> str:
    """Return at once, as ``bench.bare_noop`` does."""
    return "ok"
