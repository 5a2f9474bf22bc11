"""The 1-ms job body of the paced-producer benchmark (``bench/paced_queue.py``), shared by
Duecourse's Django task, the Celery floor task and procrastinate's job.

Why a file of start times: claim latency runs from the enqueue's commit to the body's start,
and the two ends are in different processes. The producer notes each job's commit time and
the body its start time, both from ``time.time()`` on one machine (one clock), each into its
own append-only file that the driver joins by the job's sequence number afterwards. Writing
a line costs the body a few microseconds and no database or broker work, the same for every
system, so it adds nothing that one system pays and another does not.
"""

from __future__ import annotations

import os
import time

#: Seconds each body takes after noting its start: the 1-ms job of the comparison.
WORK = 0.001

_fd: dict[int, int] = {}


def note_start(seq: int) -> None:
    """Append ``seq`` and the wall-clock time to ``BENCH_PACED_STARTS`` (one write, O_APPEND,
    so lines of the pool processes never interleave)."""
    now = time.time()
    pid = os.getpid()
    fd = _fd.get(pid)
    if fd is None:
        # Opened once per process (a forked pool process opens its own).
        fd = os.open(os.environ["BENCH_PACED_STARTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        _fd[pid] = fd
    os.write(fd, f"{seq} {now:.6f}\n".encode())


def run_sync(seq: int) -> None:
    """The body for a prefork worker: note the start, then 1 ms of work."""
    note_start(seq)
    time.sleep(WORK)
