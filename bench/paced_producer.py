"""The paced producer of ``bench/paced_queue.py``: one process, the same loop for every system.

Every ``tick`` seconds it takes the jobs the offered rate has made due since the start
(``rate * elapsed - enqueued``, at most ``batch_max`` at once) and enqueues them as one batch:

- **duecourse**: ``paced_body.enqueue(seq)`` for each, inside one ``transaction.atomic()``
  (the backend writes a ledger row per job and publishes them once the block commits);
- **duecourse_bulk**: one ``scheduling.api.enqueue_many(paced_body, calls)`` for the batch
  in the same block (one multi-row INSERT, the messages published together on commit);
- **procrastinate**: one ``batch_defer`` (a multi-row INSERT) when ``bulk`` is on, else one
  ``defer`` per job, each its own transaction;
- **floor**: one ``apply_async`` per job of the plain Celery task (no database at all).

A producer that cannot keep up carries its debt to the next tick (the enqueue rate it reaches
is then the measurement). Each job's commit time (``time.time()``, taken by the first
``on_commit`` callback for Duecourse, after the statement returns for procrastinate, after the
publish for the floor) goes to the ``commits`` file, joined later with the body's start times.
Before the clock, ``warmup`` jobs (negative sequence numbers) must be seen started, so the
window holds no worker start-up. The driver reads ``WINDOW start`` and ``WINDOW end`` lines on
stdout to take its CPU and row-count snapshots at the same moments.

    python bench/paced_producer.py '{"system": "duecourse", "rate": 100, "seconds": 20, ...}'
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Batch = Callable[[list[int]], list[tuple[int, float]]]


def duecourse_batch(queue: str, *, bulk: bool) -> Batch:
    """Enqueue through Django's Tasks framework on Duecourse's backend, one block per tick:
    ``enqueue()`` per job, or one ``scheduling.api.enqueue_many`` for the batch."""
    import django

    django.setup()
    from django.db import transaction
    from paced_tasks import paced_body

    from scheduling.api import enqueue_many

    task = paced_body.using(queue_name=queue)

    def enqueue(seqs: list[int]) -> list[tuple[int, float]]:
        committed: list[float] = []
        with transaction.atomic():
            # Registered first, so it runs first once the block commits: the commit's time.
            transaction.on_commit(lambda: committed.append(time.time()))
            if bulk:
                enqueue_many(task, [((seq,), {}) for seq in seqs])
            else:
                for seq in seqs:
                    task.enqueue(seq)
        return [(seq, committed[0]) for seq in seqs]

    return enqueue


def procrastinate_batch(bulk: bool) -> Batch:
    """Defer on procrastinate: one ``batch_defer`` per tick, or a ``defer`` per job."""
    import paced_procapp

    paced_procapp.app.open()
    body = paced_procapp.paced_body

    def enqueue(seqs: list[int]) -> list[tuple[int, float]]:
        if bulk:
            body.batch_defer(*({"seq": seq} for seq in seqs))
            now = time.time()
            return [(seq, now) for seq in seqs]
        out = []
        for seq in seqs:
            body.defer(seq=seq)
            out.append((seq, time.time()))
        return out

    return enqueue


def floor_batch(queue: str) -> Batch:
    """Publish the plain Celery task, one message per job, no database."""
    import django

    django.setup()
    from paced_tasks import floor_body

    def enqueue(seqs: list[int]) -> list[tuple[int, float]]:
        out = []
        for seq in seqs:
            floor_body.apply_async(args=[seq], queue=queue)
            out.append((seq, time.time()))
        return out

    return enqueue


def started_seqs(path: Path) -> set[int]:
    """Sequence numbers the bodies have noted as started so far."""
    if not path.exists():
        return set()
    return {int(line.split()[0]) for line in path.read_text().splitlines() if line.strip()}


def warm_up(enqueue: Batch, count: int, starts: Path, timeout: float) -> float:
    """Enqueue ``count`` warm-up jobs and wait until every one has started (polling)."""
    began = time.monotonic()
    wanted = set(range(-count, 0))
    enqueue(sorted(wanted))
    deadline = began + timeout
    while not wanted <= started_seqs(starts):
        if time.monotonic() > deadline:
            raise SystemExit(f"warm-up jobs not started within {timeout:.0f} s")
        time.sleep(0.05)
    return time.monotonic() - began


def paced(enqueue: Batch, p: dict[str, Any]) -> dict[str, Any]:
    """The window: ``rate`` jobs a second for ``seconds``, a batch every ``tick``."""
    rate, seconds, tick, batch_max = p["rate"], p["seconds"], p["tick"], p["batch_max"]
    records: list[tuple[int, float]] = []
    seq = 0
    batches = 0
    print(f"WINDOW start {time.time():.6f}", flush=True)
    started = time.monotonic()
    next_tick = started
    while True:
        now = time.monotonic()
        elapsed = now - started
        if elapsed >= seconds:
            break
        due = int(rate * elapsed) - seq
        if due > 0:
            seqs = list(range(seq, seq + min(due, batch_max)))
            records += enqueue(seqs)
            seq += len(seqs)
            batches += 1
        next_tick += tick
        pause = next_tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        else:
            next_tick = time.monotonic()  # behind: no sleep, and no burst of ticks to catch up
    window = time.monotonic() - started
    print(f"WINDOW end {time.time():.6f}", flush=True)
    with open(p["commits"], "w") as handle:
        handle.writelines(f"{s} {t:.6f}\n" for s, t in records)
    return {"enqueued": seq, "batches": batches, "window": window, "rate": seq / window}


def main() -> None:
    p = json.loads(sys.argv[1])
    system = p["system"]
    if system in ("duecourse", "duecourse_bulk"):
        enqueue = duecourse_batch(p["queue"], bulk=system == "duecourse_bulk")
    elif system == "procrastinate":
        enqueue = procrastinate_batch(p["bulk"])
    else:
        enqueue = floor_batch(p["queue"])
    warm = warm_up(enqueue, p["warmup"], Path(os.environ["BENCH_PACED_STARTS"]), p["ready"])
    result = paced(enqueue, p)
    # Duecourse's outbox thread publishes after the commit; let it finish before exiting.
    print("RESULT " + json.dumps({**result, "warmup_seconds": warm}), flush=True)


if __name__ == "__main__":
    main()
