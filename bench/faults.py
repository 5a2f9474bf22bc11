"""A randomized fault campaign against a whole Duecourse cluster, with an independent checker.

Builds the hosts (``faultnet``), starts the cluster (``faultcluster``: its own PostgreSQL and
Redis, three schedulers, three workers, a producer of Django tasks), makes the jobs
(``faultload``), lets the nemesis (``faultnemesis``) inject a fault every few seconds for
``--minutes``, backfills a job every ``--backfill-every`` seconds, then stops the faults and
the producer, drains, and hands both histories to the checker (``faultcheck``). Everything it
made (processes, namespaces, the run directory) is removed at the end unless ``--keep``.

    sudo .venv/bin/python bench/faults.py --seed 1 --minutes 2
    sudo .venv/bin/python bench/faults.py --seed 7 --minutes 20 --faults worker_pause,db_restart

Exit status 0 when no anomaly of any kind was found, 1 otherwise, 2 when it cannot run here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from faultcheck import check
from faultcluster import Cluster, skew_unavailable, wait_for
from faultload import job_specs
from faultnemesis import KINDS, Nemesis
from faultnet import SCHEDULERS, WORKERS, Network, unavailable

OPEN = "('pending', 'queued', 'running', 'retry', 'waiting')"


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=2.0, help="how long faults go on")
    parser.add_argument("--faults", default=",".join(KINDS), help="comma list of fault kinds")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rate", type=float, default=2.0, help="Django tasks enqueued per s")
    parser.add_argument("--every", default="3,8", help="seconds between faults: low,high")
    parser.add_argument("--backfill-every", type=float, default=120.0)
    parser.add_argument("--drain", type=float, default=300.0, help="most seconds to drain")
    parser.add_argument("--out", type=Path, help="write the summary (JSON) here too")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    args = parser.parse_args(argv)
    kinds = [kind for kind in args.faults.split(",") if kind]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"--faults: unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    args.kinds = kinds
    low, high = (float(part) for part in args.every.split(","))
    args.every_range = (low, high)
    return args


class Campaign:
    def __init__(self, args: argparse.Namespace, net: Network, root: Path) -> None:
        self.args = args
        self.net = net
        self.root = root
        self.cluster = Cluster(net, root)
        self.cluster.replicated = "db_failover" in args.kinds
        self.specs = job_specs(args.seed, args.jobs)
        self.rng = random.Random(args.seed * 7919)
        self.backfilled: list[dict[str, Any]] = []
        self.exits: list[dict[str, Any]] = []
        self.started = 0.0
        self.backfilling: tuple[str, float, subprocess.Popen[str]] | None = None

    def say(self, text: str) -> None:
        print(f"{time.strftime('%H:%M:%S', time.gmtime())} {text}", flush=True)

    def start(self) -> None:
        specs_file = self.root / "specs.json"
        specs_file.write_text(json.dumps(self.specs))
        self.say(f"starting the cluster in {self.root} ({len(self.specs)} jobs)")
        self.cluster.start(specs_file)
        self.started = time.time()
        self.cluster.start_producer(self.args.rate, self.args.seed)
        self.say("cluster up; faults begin")

    def backfill(self) -> None:
        """Start a backfill of a job not yet backfilled: ten of its periods before the run
        began (``jobs backfill``, in a process of its own; ``backfill_done`` collects it)."""
        done = {entry["job"] for entry in self.backfilled if entry["ok"]}
        candidates = [s for s in self.specs if "every" in s and s["name"] not in done]
        if not candidates or self.backfilling is not None:
            return
        spec = self.rng.choice(candidates)
        until = self.started - 1
        since = until - 10 * spec["period"]
        child = self.cluster.launch_manage(
            "jobs", "backfill", spec["name"], "--from", _iso(since), "--to", _iso(until),
            "--owner", "faults", "--json",
        )  # fmt: skip
        self.backfilling = (spec["name"], time.time(), child)

    def backfill_done(self) -> None:
        if self.backfilling is None or self.backfilling[2].poll() is None:
            return
        name, at, child = self.backfilling
        self.backfilling = None
        out, err = child.communicate()
        entry: dict[str, Any] = {"job": name, "at": round(at, 3), "ok": not child.returncode}
        if child.returncode:
            entry["error"] = (err or out).strip().splitlines()[-1:]
        else:
            with contextlib.suppress(ValueError):
                entry["made"] = json.loads(out).get("made")
        self.backfilled.append(entry)
        self.say(f"backfill {entry}")

    def watch(self, nemesis: Nemesis) -> None:
        """A worker or scheduler that exited with no fault on it is noted and started again,
        as a supervisor would."""
        c = self.cluster
        for host in WORKERS:
            if host not in nemesis.active and c.workers[host].poll() is not None:
                self.exits.append({"host": host, "at": time.time(), "code": c.workers[host].poll()})
                self.say(f"worker {host} exited on its own ({c.workers[host].poll()}); restarting")
                c.start_worker(host)
        for host in SCHEDULERS:
            if host not in nemesis.active and c.schedulers[host].poll() is not None:
                code = c.schedulers[host].poll()
                self.exits.append({"host": host, "at": time.time(), "code": code})
                self.say(f"scheduler {host} exited on its own ({code}); restarting")
                c.start_scheduler(host)

    def faults(self) -> float:
        nemesis = Nemesis(
            self.cluster, self.args.kinds, self.args.seed, self.root / "faults.jsonl",
            self.args.every_range,
        )  # fmt: skip
        end = time.time() + self.args.minutes * 60
        next_backfill = time.time() + min(30.0, self.args.backfill_every)
        try:
            while time.time() < end:
                nemesis.step()
                if time.time() >= next_backfill:
                    next_backfill = time.time() + self.args.backfill_every
                    self.backfill()
                self.backfill_done()
                self.watch(nemesis)
                time.sleep(0.1)
        finally:
            nemesis.stop()
        stopped = time.time()
        self.say(f"faults stopped ({nemesis.count} injected); draining")
        self.cluster.stop_producer()
        return stopped

    def drain(self, stopped: float) -> float:
        """Wait until every occurrence due before the faults stopped is claimed (no active
        job still due then: one running its missed occurrences one at a time may be behind)
        and every run due before then has settled, or the deadline."""
        query = (
            "SELECT (SELECT count(*) FROM scheduling_execution"
            f" WHERE status IN {OPEN} AND scheduled_for <= to_timestamp(%s))"
            " + (SELECT count(*) FROM scheduling_job"
            " WHERE status = 'active' AND next_due_at <= to_timestamp(%s))"
        )
        began = time.time()

        def settled() -> bool:
            try:
                return self.cluster.query(query, stopped, stopped)[0][0] == 0
            except Exception:
                return False

        try:
            wait_for(settled, timeout=self.args.drain, message="the runs due before the stop")
        except TimeoutError:
            self.say(f"not drained after {self.args.drain:.0f}s")
        # The schedulers stop first (nothing new is claimed), then the workers.
        for host in SCHEDULERS:
            self.cluster.processes.kill(self.cluster.schedulers[host])
        for host in WORKERS:
            self.cluster.processes.kill(self.cluster.workers[host])
        return time.time() - began


def main(argv: list[str]) -> int:
    args = parse(argv)
    reason = unavailable()
    if not reason and "clock_skew" in args.kinds:
        reason = skew_unavailable()
    if reason:
        print(f"cannot run the fault campaign here: {reason}", file=sys.stderr)
        return 2
    net = Network()
    root = Path(tempfile.mkdtemp(prefix="duecourse-faults-"))
    campaign = Campaign(args, net, root)
    try:
        net.build()
        campaign.start()
        stopped = campaign.faults()
        drained = campaign.drain(stopped)
        meta = {
            "seed": args.seed, "minutes": args.minutes, "kinds": args.kinds,
            "started": campaign.started, "stopped": stopped, "drain_seconds": round(drained, 1),
            "jobs": len(campaign.specs), "rate": args.rate,
        }  # fmt: skip
        (root / "run.json").write_text(json.dumps(meta))
        summary, explained = check(root, str(root), campaign.cluster.port, "duecourse", stopped)
        summary.update(run=meta, backfills=campaign.backfilled, exits=campaign.exits)
        print(json.dumps(summary, indent=2))
        if explained:
            print(explained)
        if args.out:
            args.out.write_text(json.dumps(summary, indent=2) + "\n")
        return 1 if any(summary["anomalies"].values()) else 0
    finally:
        campaign.cluster.stop()
        net.destroy()
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
