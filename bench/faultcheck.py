"""The campaign's independent checker: the ledger against the bodies' own log.

Two histories are read, and neither is trusted to explain the other:

- the ledger (``scheduling_execution``, ``scheduling_attempt``, the Django tasks' runs, which
  are executions without a job), read after the run has drained;
- the bodies' log (``faultbodies``: one line per start, tick and end of every body, written by
  the body itself to files the engine never touches) and the producer's log of each enqueue it
  saw committed.

Anomalies, by kind:

``lost``          an occurrence or Django task not run to completion after the drain (a row
                  left pending/queued/running/retry/waiting, or failed), an interval job's
                  occurrence missing from the ledger where its policies promise every one
                  (catch_up under forbid, allow or buffer_all), an enqueue the producer saw
                  committed that the ledger lacks, or a run the ledger says completed whose
                  body never wrote its end
``doubled``       a run completed by two attempts, or whose body wrote its end twice
``overlap``       two bodies of one run active at once (each body's life is cut into the
                  stretches it was seen ticking, so a frozen body is not counted while frozen)
``job_overlap``   two bodies of one ``forbid`` job active at once
``early``         a body started before its occurrence's due time (the body host's clock
                  minus its injected skew)
``retries``       more failed attempts than the job's ``max_retries`` allows, or a
                  ``fail_first`` occurrence completed by the first try, which must fail

Counted apart, not an anomaly: a body that ran to its end twice because the first end was
never recorded (its worker was killed, or cut off from the database until the lease ran out,
after the body returned and before the completion was written). The lease promises never two
bodies at once, not never twice (docs/scheduling.md, *When the body is stopped*); the
checker still requires the two to be apart in time and the earlier attempt to be one the
ledger never saw complete. Nor is a run failed because its worker process died under it
``SCHEDULING_MAX_INTERRUPTIONS`` times (the guard against a body that kills its process; the
reaper counts a worker frozen or cut off past the lease as one that died): counted as given
up, and an anomaly (``retries``) only if it was given up after fewer deaths.

    python bench/faultcheck.py RUN_DIR   (the cluster's database must still be up)
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import psycopg

#: A body seen ticking at most this far apart is taken to have run in between (it ticks every
#: quarter second); a longer silence is a freeze (or a process the machine did not schedule),
#: in which the body did nothing.
GAP = 1.0
ROWS = """
SELECT e.id, e.job_id, e.status, extract(epoch FROM e.scheduled_for)::float8, e.task_id::text,
       e.last_error, j.max_retries, j.overlap, j.misfire, s.interval, j.name, j.kwargs
  FROM scheduling_execution e
  LEFT JOIN scheduling_job j ON j.id = e.job_id
  LEFT JOIN scheduling_schedule s ON s.id = j.schedule_id
"""
#: A run whose worker process died under it (or went silent past the lease: the reaper
#: cannot tell a frozen or cut-off process from a dead one) this many times fails, by policy
#: (``SCHEDULING_MAX_INTERRUPTIONS``, left at its default for the campaign).
MAX_INTERRUPTIONS = 3
GIVEN_UP = "the worker process died under it"
DIED = ("abandoned",)
ANOMALY_KINDS = ("lost", "doubled", "overlap", "job_overlap", "early", "retries")
OPEN = ("pending", "queued", "running", "retry", "waiting")


class Row(NamedTuple):
    """One execution as the checker reads it (the job's columns None for a Django task)."""

    id: int
    job_id: int | None
    status: str
    due: float
    task_id: str
    error: str
    max_retries: int
    overlap: str | None
    misfire: str | None
    interval: str | None
    name: str | None
    kwargs: dict[str, Any] | None

    @property
    def run(self) -> str:
        return f"x{self.id}" if self.job_id is not None else f"d{self.task_id}"


@dataclass
class Body:
    run: str
    attempt: int
    host: str
    points: list[float] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None
    failed: bool = False

    def stretches(self) -> list[tuple[float, float]]:
        out: list[tuple[float, float]] = []
        for point in sorted(self.points):
            if out and point - out[-1][1] <= GAP:
                out[-1] = (out[-1][0], point)
            else:
                out.append((point, point))
        return out


def read_bodies(folder: Path) -> dict[tuple[str, int, str], Body]:
    bodies: dict[tuple[str, int, str], Body] = {}
    for file in folder.iterdir():
        for line in file.read_text().splitlines():
            parts = line.split()
            if len(parts) != 6:
                continue
            kind, run, attempt, host, wall, skew = parts
            at = float(wall) - float(skew)
            key = (run, int(attempt), host)
            body = bodies.setdefault(key, Body(run, int(attempt), host))
            body.points.append(at)
            if kind == "S":
                body.started = at if body.started is None else min(body.started, at)
            elif kind == "E":
                body.ended = at if body.ended is None else min(body.ended, at)
            elif kind == "F":
                body.failed = True
    return bodies


def _ends(folder: Path) -> Counter[str]:
    counted: Counter[str] = Counter()
    for file in folder.iterdir():
        for line in file.read_text().splitlines():
            if line.startswith("E "):
                counted[line.split()[1]] += 1
    return counted


def _seen(body: Body) -> str:
    """A body as the report shows it: attempt@host, first and last line, whether it ended."""
    last = max(body.points) if body.points else 0.0
    state = "ended" if body.ended is not None else ("failed" if body.failed else "no end")
    return f"{body.attempt}@{body.host} {body.started or 0:.3f}..{last:.3f} {state}"


def overlap_at(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float | None:
    for (a0, a1), (b0, b1) in itertools.product(a, b):
        if a0 <= b1 and b0 <= a1:
            return max(a0, b0)
    return None


class Checker:
    def __init__(self, root: Path, conn: psycopg.Connection[Any], cutoff: float) -> None:
        self.root = root
        #: When the faults and the producer stopped: a run due later is the in-flight tail.
        self.cutoff = cutoff
        self.conn = conn
        self.anomalies: dict[str, list[dict[str, Any]]] = {kind: [] for kind in ANOMALY_KINDS}
        #: Runs whose body ended twice because the first end was never recorded: documented.
        self.given_up: list[dict[str, Any]] = []
        self.reruns: list[dict[str, Any]] = []
        self.faults = self._faults()
        self.meta = json.loads((root / "run.json").read_text())

    def _faults(self) -> list[dict[str, Any]]:
        ends: dict[int, dict[str, Any]] = {}
        path = self.root / "faults.jsonl"
        if path.exists():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                ends[record["id"]] = record  # the end line replaces the start line
        return sorted(ends.values(), key=lambda f: f["start"])

    def flag(self, kind: str, at: float | None, **what: Any) -> None:
        self.anomalies[kind].append({"at": at, **what})

    def q(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, params).fetchall()

    def run(self) -> dict[str, Any]:
        bodies = read_bodies(self.root / "bodies")
        ends = _ends(self.root / "bodies")
        by_run: dict[str, list[Body]] = defaultdict(list)
        for body in bodies.values():
            by_run[body.run].append(body)
        executions = [Row(*row) for row in self.q(ROWS)]
        self.attempts: dict[int, Counter[str]] = defaultdict(Counter)
        self.numbered: dict[int, dict[int, str]] = defaultdict(dict)
        for execution_id, number, outcome in self.q(
            "SELECT execution_id, number, outcome FROM scheduling_attempt"
        ):
            self.attempts[execution_id][outcome] += 1
            self.numbered[execution_id][number] = outcome
        produced = self._produced()
        forbid_bodies: dict[int, list[tuple[str, Body]]] = defaultdict(list)
        statuses: Counter[str] = Counter()
        for row in executions:
            kind = "scheduled" if row.job_id is not None else "django_task"
            statuses[f"{kind} {row.status}"] += 1
            runs = sorted(by_run.get(row.run, []), key=lambda b: b.started or 0)
            self._execution(row, runs, ends[row.run])
            if row.overlap == "forbid":
                forbid_bodies[row.job_id].extend((row.run, body) for body in runs)
        self._grids(executions)
        self._job_overlaps(forbid_bodies)
        seen_tasks = {row.task_id for row in executions if row.job_id is None}
        for task_id in sorted(set(produced) - seen_tasks):
            self.flag("lost", produced[task_id], why="enqueue committed, no run in the ledger",
                      run=f"d{task_id}")  # fmt: skip
        return self.report(statuses, produced, bodies)

    def _execution(self, row: Row, runs: list[Body], ends: int) -> None:
        """Every check of one execution against its bodies."""
        where = {"run": row.run, "job": row.name, "status": row.status, "due": row.due}
        outcomes = self.attempts.get(row.id, Counter())
        gave_up = row.status == "failed" and row.error.startswith(GIVEN_UP)
        if gave_up:
            died = sum(outcomes[outcome] for outcome in DIED)
            self.given_up.append({"run": row.run, "job": row.name, "died": died})
            if died < MAX_INTERRUPTIONS:
                why = f"given up after {died} deaths, fewer than {MAX_INTERRUPTIONS}"
                self.flag("retries", row.due, why=why, **where)
        elif (row.status in OPEN or row.status == "failed") and row.due <= self.cutoff:
            self.flag("lost", row.due, why=f"left {row.status}", error=row.error[:160],
                      ledger=self._attempts_of(row.id), bodies=[_seen(b) for b in runs],
                      **where)  # fmt: skip
        if row.status == "completed":
            if outcomes["completed"] != 1:
                kind = "doubled" if outcomes["completed"] > 1 else "lost"
                self.flag(kind, row.due, why=f"{outcomes['completed']} completed attempts",
                          **where)  # fmt: skip
            if ends == 0:
                self.flag("lost", row.due, why="completed in the ledger, no body ended", **where)
        if ends > 1:
            self._twice(runs, self.numbered[row.id], ends, row.due, where)
        for a, b in itertools.combinations(runs, 2):
            met = overlap_at(a.stretches(), b.stretches())
            if met is not None:
                pair = [f"{a.attempt}@{a.host}", f"{b.attempt}@{b.host}"]
                self.flag("overlap", met, bodies=pair, **where)
        if row.job_id is None:
            return
        for body in runs:
            if body.started is not None and body.started < row.due - 0.01:
                early = round(row.due - body.started, 3)
                self.flag("early", body.started, by=early, host=body.host, **where)
        if outcomes["failed"] > row.max_retries:
            why = f"{outcomes['failed']} failed attempts, max_retries {row.max_retries}"
            self.flag("retries", row.due, why=why, **where)
        if (row.kwargs or {}).get("fail_first") and self.numbered[row.id].get(1) == "completed":
            self.flag("retries", row.due, why="completed by the try that must fail", **where)

    def _attempts_of(self, execution_id: int) -> list[str]:
        """An execution's heartbeat and attempts, for the report of an anomaly."""
        rows = self.q(
            "SELECT 'beat ' || coalesce(e.last_heartbeat_at::text, '-') || ' worker '"
            " || e.worker FROM scheduling_execution e WHERE e.id = %s"
            " UNION ALL SELECT a.number || ' ' || a.worker || ' pid ' || coalesce(a.pid, 0)"
            " || ' ' || a.started_at || ' .. ' || coalesce(a.finished_at::text, '-') || ' '"
            " || a.outcome FROM scheduling_attempt a WHERE a.execution_id = %s",
            execution_id,
            execution_id,
        )
        return [row[0] for row in rows]

    def _twice(self, runs: list[Body], outcomes: dict[int, str], ends: int, due: float,
               where: dict[str, Any]) -> None:  # fmt: skip
        """A body that ended twice: documented when every end but the last is an attempt the
        ledger never saw complete (its worker died, was fenced or lost the database before
        the completion was written, and the lease ran out): the run is given to another
        worker, never while the first body lives ("never two bodies at once, not never
        twice", docs/scheduling.md). Anything else is a doubled run."""
        ended = [body for body in runs if body.ended is not None]
        ended.sort(key=lambda body: body.ended or 0)
        earlier = [outcomes.get(body.attempt, "none") for body in ended[:-1]]
        unrecorded = ("abandoned", "fenced", "interrupted")
        if len(ended) == ends and all(outcome in unrecorded for outcome in earlier):
            self.reruns.append({"at": due, "earlier": earlier, **where})
        else:
            self.flag("doubled", due, why=f"the body ended {ends} times", earlier=earlier,
                      **where)  # fmt: skip

    def _produced(self) -> dict[str, float]:
        path = self.root / "produced.log"
        out: dict[str, float] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                if line.startswith("Q "):
                    _, task_id, at = line.split()[:3]
                    out[task_id] = float(at)
        return out

    def _grids(self, executions: list[Row]) -> None:
        """Every occurrence of a catch_up interval job under forbid/allow/buffer_all, from its
        first to its last in the ledger, has its execution."""
        grids: dict[str, list[float]] = defaultdict(list)
        every: dict[str, float] = {}
        for row in executions:
            if row.job_id is None or not row.interval or row.misfire != "catch_up":
                continue
            if row.overlap not in ("forbid", "allow", "buffer_all"):
                continue
            grids[row.name].append(row.due)
            every[row.name] = _seconds(row.interval)
        for name, dues in grids.items():
            dues.sort()
            for a, b in itertools.pairwise(dues):
                inside = self.meta["started"] <= a and b <= self.cutoff
                if abs((b - a) - every[name]) > 0.01 and inside:
                    missing = round((b - a) / every[name]) - 1
                    why = f"{missing} occurrences missing after this one"
                    self.flag("lost", a, why=why, job=name, gap=round(b - a, 3))

    def _job_overlaps(self, forbid_bodies: dict[int, list[tuple[str, Body]]]) -> None:
        for job_id, bodies in forbid_bodies.items():
            bodies.sort(key=lambda rb: rb[1].started or 0)
            for (ra, a), (rb, b) in itertools.combinations(bodies, 2):
                if ra == rb:
                    continue
                met = overlap_at(a.stretches(), b.stretches())
                if met is not None:
                    pair = [f"{ra}/{a.attempt}@{a.host}", f"{rb}/{b.attempt}@{b.host}"]
                    self.flag("job_overlap", met, job_id=job_id, bodies=pair)

    def recoveries(self, bodies: dict[tuple[str, int, str], Body]) -> dict[str, list[float]]:
        """Per fault kind, seconds from each fault's end to the next body end on the affected
        host (anywhere, for a fault of a shared server or a scheduler)."""
        ends_by_host: dict[str, list[float]] = defaultdict(list)
        every_end: list[float] = []
        for body in bodies.values():
            if body.ended is not None:
                ends_by_host[body.host].append(body.ended)
                every_end.append(body.ended)
        for values in ends_by_host.values():
            values.sort()
        every_end.sort()
        out: dict[str, list[float]] = defaultdict(list)
        for fault in self.faults:
            if fault.get("end") is None:
                continue
            pool = ends_by_host.get(fault["target"], every_end)
            later = [t for t in pool if t >= fault["end"]]
            if later:
                out[fault["kind"]].append(later[0] - fault["end"])
        return out

    def report(
        self,
        statuses: Counter[str],
        produced: dict[str, float],
        bodies: dict[tuple[str, int, str], Body],
    ) -> dict[str, Any]:
        outcomes: Counter[str] = Counter()
        for counted in self.attempts.values():
            outcomes.update(counted)
        recoveries = {
            kind: {
                "count": len(values),
                "median": round(statistics.median(values), 2),
                "worst": round(max(values), 2),
            }
            for kind, values in self.recoveries(bodies).items()
        }
        return {
            "faults": dict(Counter(f["kind"] for f in self.faults)),
            "executions": dict(statuses),
            "attempts": dict(outcomes),
            "enqueued": len(produced),
            "enqueue_refused": self._refused(),
            "bodies": len(bodies),
            "anomalies": {kind: len(found) for kind, found in self.anomalies.items()},
            "reruns_after_an_unrecorded_end": len(self.reruns),
            "given_up_after_max_interruptions": len(self.given_up),
            "rerun_causes": dict(Counter("/".join(r["earlier"]) for r in self.reruns)),
            "recovery_seconds": recoveries,
        }

    def _refused(self) -> int:
        path = self.root / "produced.log"
        if not path.exists():
            return 0
        return sum(1 for line in path.read_text().splitlines() if line.startswith("X "))

    def timeline(self, at: float | None, margin: float = 20.0) -> list[str]:
        if at is None:
            return []
        lines = []
        for fault in self.faults:
            end = fault.get("end") or fault["start"]
            if fault["start"] - margin <= at <= end + margin:
                lines.append(
                    f"    fault {fault['id']} {fault['kind']} {fault['target']}"
                    f" {fault['start'] - at:+.1f}s .. {end - at:+.1f}s"
                )
        return lines

    def explain(self, limit: int = 10) -> str:
        out = []
        for kind, found in self.anomalies.items():
            for anomaly in found[:limit]:
                out.append(f"{kind}: {json.dumps(anomaly, default=str)}")
                out.extend(self.timeline(anomaly.get("at")))
            if len(found) > limit:
                out.append(f"{kind}: ... {len(found) - limit} more")
        return "\n".join(out)


def _seconds(interval: str) -> float:
    """``PT5S`` and the like (the campaign's intervals are whole seconds)."""
    text = interval.removeprefix("PT")
    total = 0.0
    number = ""
    for char in text:
        if char.isdigit() or char == ".":
            number += char
        else:
            total += float(number) * {"H": 3600, "M": 60, "S": 1}[char]
            number = ""
    return total


def check(
    root: Path, socket_dir: str, port: int, database: str, cutoff: float
) -> tuple[dict[str, Any], str]:
    with psycopg.connect(host=socket_dir, port=port, user="postgres", dbname=database,
                         autocommit=True) as conn:  # fmt: skip
        checker = Checker(root, conn, cutoff)
        summary = checker.run()
        return summary, checker.explain()


if __name__ == "__main__":
    run_dir = Path(sys.argv[1])
    stopped = json.loads((run_dir / "run.json").read_text())["stopped"]
    summary, explained = check(run_dir, str(run_dir), 5433, "duecourse", stopped)
    print(json.dumps(summary, indent=2))
    print(explained)
