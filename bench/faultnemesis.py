"""The nemesis: every few seconds a fault drawn at random, each healed after a drawn while.

Kinds (``KINDS``): a worker SIGKILLed whole and restarted, one of its pool processes
SIGKILLed (the worker replaces it), a worker frozen (SIGSTOP, then SIGCONT after up to twice
the lease), a scheduler SIGKILLed and restarted, a worker host cut off from the database or
from the broker, the broker restarted (Redis without persistence: its queues are lost), the
database restarted (fast shutdown), the database failed over to its synchronous standby (the
primary SIGKILLed, the standby promoted, the database's address moved to it, and a new
standby made at the fault's end), a worker SIGKILLed and started again under libfaketime with
its clock a few seconds off (and again with the true clock at the fault's end), and the
database made slow (every chunk on its link held for tens to hundreds of milliseconds).

A target (a worker host, a scheduler host, the database, the broker) carries at most one
fault at a time; faults on different targets overlap freely. Every fault is written at its
start and at its end, as one JSON line each, to ``faults.jsonl`` and printed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultcluster import LEASE, Cluster, Processes
from faultnet import SCHEDULERS, WORKERS

KINDS = (
    "worker_kill",
    "pool_kill",
    "worker_pause",
    "scheduler_kill",
    "partition_db",
    "partition_broker",
    "broker_restart",
    "db_restart",
    "db_failover",
    "clock_skew",
    "slow_db",
)


@dataclass
class Fault:
    id: int
    kind: str
    target: str
    start: float
    planned: float
    end: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    heal: Callable[[], None] | None = None

    def record(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "target": self.target,
            "start": round(self.start, 3),
            "end": None if self.end is None else round(self.end, 3),
            **self.detail,
        }


class Nemesis:
    def __init__(
        self, cluster: Cluster, kinds: list[str], seed: int, log: Path, every: tuple[float, float]
    ) -> None:
        self.cluster = cluster
        self.kinds = kinds
        self.rng = random.Random(seed)
        self.log = log
        self.every = every
        self.active: dict[str, Fault] = {}
        self.done: list[Fault] = []
        self.next_at = time.time() + self.rng.uniform(*every)
        self.count = 0

    # --- bookkeeping --------------------------------------------------------------------------

    def _write(self, event: str, fault: Fault) -> None:
        line = {"event": event, **fault.record()}
        with self.log.open("a") as out:
            out.write(json.dumps(line) + "\n")
        stamp = time.strftime("%H:%M:%S", time.gmtime(time.time()))
        extra = " ".join(f"{k}={v}" for k, v in fault.detail.items())
        print(f"{stamp} fault {fault.id} {event:5} {fault.kind} {fault.target} {extra}", flush=True)

    def _targets(self, kind: str) -> list[str]:
        if kind in ("scheduler_kill",):
            pool = list(SCHEDULERS)
        elif kind in ("broker_restart",):
            pool = ["mq"]
        elif kind in ("db_restart", "db_failover", "slow_db"):
            pool = ["db"]
        else:
            pool = list(WORKERS)
        return [target for target in pool if target not in self.active]

    # --- the loop ----------------------------------------------------------------------------

    def step(self) -> None:
        """Heal what is due, then start a fault if one is due; call often."""
        now = time.time()
        for target, fault in list(self.active.items()):
            if fault.planned <= now:
                self._heal(target, fault)
        if now >= self.next_at:
            self.next_at = now + self.rng.uniform(*self.every)
            kind = self.rng.choice(self.kinds)
            targets = self._targets(kind)
            if targets:
                self._inject(kind, self.rng.choice(targets))

    def stop(self) -> None:
        """Heal every fault still active."""
        for target, fault in list(self.active.items()):
            self._heal(target, fault)

    def _heal(self, target: str, fault: Fault) -> None:
        if fault.heal is not None:
            fault.heal()
        fault.end = time.time()
        del self.active[target]
        self.done.append(fault)
        self._write("end", fault)

    def _inject(self, kind: str, target: str) -> None:
        self.count += 1
        lasting = getattr(self, f"_{kind}")(target)
        heal, seconds, detail = lasting
        start = time.time()
        fault = Fault(self.count, kind, target, start, start + seconds, detail=detail, heal=heal)
        self.active[target] = fault
        self._write("start", fault)

    # --- the faults: each does its harm and returns (heal, seconds, detail) ----------------

    def _worker_kill(self, host: str) -> tuple[Callable[[], None], float, dict[str, Any]]:
        c = self.cluster
        c.kill_worker(host)
        return (lambda: c.start_worker(host)), self.rng.uniform(0.5, 3), {}

    def _pool_kill(self, host: str) -> tuple[Callable[[], None], float, dict[str, Any]]:
        pids = self.cluster.pool_children(host)
        if pids:
            pid = self.rng.choice(pids)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pid = 0
        else:
            pid = 0
        return (lambda: None), 0.0, {"pid": pid}

    def _worker_pause(self, host: str) -> tuple[Callable[[], None], float, dict[str, Any]]:
        child = self.cluster.workers[host]
        Processes.signal(child, signal.SIGSTOP)
        seconds = self.rng.uniform(1, 2.5 * LEASE)
        return (lambda: Processes.signal(child, signal.SIGCONT)), seconds, {}

    def _scheduler_kill(self, host: str) -> tuple[Callable[[], None], float, dict[str, Any]]:
        c = self.cluster
        c.kill_scheduler(host)
        return (lambda: c.start_scheduler(host)), self.rng.uniform(0.5, 3), {}

    def _partition_db(self, host: str) -> tuple[Callable[[], None], float, dict[str, Any]]:
        net = self.cluster.net
        net.cut(host, "db")
        return (lambda: net.uncut(host, "db")), self.rng.uniform(2, 2.5 * LEASE), {}

    def _partition_broker(self, host: str) -> tuple[Callable[[], None], float, dict[str, Any]]:
        net = self.cluster.net
        net.cut(host, "mq")
        return (lambda: net.uncut(host, "mq")), self.rng.uniform(2, 2.5 * LEASE), {}

    def _broker_restart(self, _: str) -> tuple[Callable[[], None], float, dict[str, Any]]:
        c = self.cluster
        c.kill_redis()
        return c.start_redis, self.rng.uniform(0.5, 6), {}

    def _db_restart(self, _: str) -> tuple[Callable[[], None], float, dict[str, Any]]:
        c = self.cluster
        c.stop_postgres()
        return c.start_postgres, self.rng.uniform(0.5, 6), {}

    def _db_failover(self, _: str) -> tuple[Callable[[], None], float, dict[str, Any]]:
        """The primary SIGKILLed and its synchronous standby promoted; a new standby is made
        from the new primary at the fault's end (until then it runs alone)."""
        c = self.cluster
        c.failover()
        return c.start_standby, self.rng.uniform(1, 5), {"primary": c.port}

    def _clock_skew(self, host: str) -> tuple[Callable[[], None], float, dict[str, Any]]:
        """The worker is SIGKILLed and started again under libfaketime, its clock ``skew``
        seconds off; at the fault's end, the same again with the true clock. (A warm
        shutdown would hold the nemesis for as long as the longest body.)"""
        c = self.cluster
        skew = round(self.rng.choice((-1, 1)) * self.rng.uniform(1, 5), 1)
        c.kill_worker(host)
        c.start_worker(host, skew)

        def heal() -> None:
            c.kill_worker(host)
            c.start_worker(host, 0.0)

        return heal, self.rng.uniform(15, 40), {"skew": skew}

    def _slow_db(self, _: str) -> tuple[Callable[[], None], float, dict[str, Any]]:
        c = self.cluster
        delay = int(self.rng.uniform(50, 400))
        c.slow_database(delay)
        return c.fast_database, self.rng.uniform(3, 15), {"delay_ms": delay}
