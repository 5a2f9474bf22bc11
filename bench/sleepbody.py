"""The crash scenario's task body, shared by its Django task and its Celery task: note the
start and the end in the file ``BENCH_BODY_LOG`` names, so a run cut short shows as a start
alone."""

from __future__ import annotations

import os
import time


def sleep_noting(seconds: float) -> str:
    with open(os.environ["BENCH_BODY_LOG"], "a") as handle:
        handle.write("start\n")
    time.sleep(seconds)
    with open(os.environ["BENCH_BODY_LOG"], "a") as handle:
        handle.write("end\n")
    return "slept"
