"""What ``bench/paced_queue.py`` reads off one cell: CPU by process, latency and depth from the
two time files, and the tables' bytes and dead rows.

Why its own module: the cell's driver only starts and stops processes; every number it reports
comes from here, read the same way for every system, so a difference between two rows is the
systems' and not the reading's.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common

_TICK = os.sysconf("SC_CLK_TCK")
#: application_name of the driver's own connections: never counted as a side's CPU.
DRIVER_APP = "qb_driver"
#: application_name (PGAPPNAME) of each side's connections, to split PostgreSQL's CPU.
PG_KINDS = {"qb_producer": "pg_producer", "qb_worker": "pg_worker"}
CPU_KINDS = ["producer", "worker", "pg_producer", "pg_worker", "pg_other", "broker"]


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` from ``/proc/<pid>/stat``; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    import psutil

    try:
        root = psutil.Process(pid)
        return [pid, *(child.pid for child in root.children(recursive=True))]
    except psutil.Error:
        return []


def redis_pids() -> list[int]:
    """The Redis server's processes (shared with whoever else uses it)."""
    import psutil

    return [
        p.pid for p in psutil.process_iter(["name"]) if (p.info["name"] or "").startswith("redis")
    ]


def machine_jiffies() -> tuple[int, int]:
    """Total and idle jiffies of every CPU since boot (``/proc/stat``)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]


class CpuMeter:
    """CPU seconds by kind of process over a window, sampled every half second.

    Sampled, not only read at both ends, because a process can end inside the window (a
    Celery pool process's database connection is closed and made again every
    ``CELERY_DB_REUSE_MAX`` tasks, each a new PostgreSQL backend): a process counts from its
    value at the window's start (or from zero if it began later) to the last value seen.
    """

    def __init__(self, roots: dict[str, int], pg_backends: Callable[[], dict[int, str]]) -> None:
        self.roots = roots
        self.pg_backends = pg_backends
        self.first: dict[int, tuple[str, float]] = {}
        self.last: dict[int, float] = {}
        self.machine: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.seconds = 0.0

    def _pids(self) -> dict[int, str]:
        pids: dict[int, str] = {}
        for kind, root in self.roots.items():
            pids.update({pid: kind for pid in tree(root)})
        for pid, app in self.pg_backends().items():
            pids[pid] = PG_KINDS.get(app, "pg_other")
        pids.update({pid: "broker" for pid in redis_pids()})
        return pids

    def sample(self, *, opening: bool = False) -> None:
        for pid, kind in self._pids().items():
            value = cpu_seconds(pid)
            if value is None:
                continue
            if pid not in self.first:
                self.first[pid] = (kind, value if opening else 0.0)
            self.last[pid] = value

    def start(self) -> None:
        self._began = time.monotonic()
        self.machine.append(machine_jiffies())
        self.sample(opening=True)

        def loop() -> None:
            while not self._stop.wait(0.5):
                with contextlib.suppress(Exception):
                    self.sample()

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        self.machine.append(machine_jiffies())
        self.seconds = time.monotonic() - self._began

    def by_kind(self) -> dict[str, float]:
        """CPU seconds of each kind over the window."""
        out = dict.fromkeys(CPU_KINDS, 0.0)
        for pid, (kind, first) in self.first.items():
            out[kind] += max(0.0, self.last.get(pid, first) - first)
        return out

    def machine_busy(self) -> float | None:
        """The machine's busy share over the window (every user's work, not only ours)."""
        if len(self.machine) != 2:
            return None
        (t0, i0), (t1, i1) = self.machine
        return 1 - (i1 - i0) / max(1, t1 - t0)


# --- the two time files ----------------------------------------------------------------------


def read_times(path: Path) -> dict[int, float]:
    """``seq time`` lines as a dict (the first time of a sequence number wins)."""
    out: dict[int, float] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            out.setdefault(int(parts[0]), float(parts[1]))
    return out


def duplicate_starts(path: Path) -> int:
    """Bodies that ran more than once (a sequence number noted twice)."""
    if not path.exists():
        return 0
    seqs = [line.split()[0] for line in path.read_text().splitlines() if line.strip()]
    return len(seqs) - len(set(seqs))


def latency_and_depth(
    commits: dict[int, float], starts: dict[int, float], window: tuple[float, float]
) -> dict[str, Any]:
    """Claim latency (commit → body start) and the queue's depth over the window.

    Depth at a moment is the jobs committed by then less the jobs started by then, so the
    depth comes from the same two files as the latency and costs the systems no query.
    """
    w0, w1 = window
    latencies = [
        (starts[seq] - t) * 1000 for seq, t in commits.items() if seq >= 0 and seq in starts
    ]
    events = sorted(
        [(t, 1) for seq, t in commits.items() if seq >= 0]
        + [(starts[seq], -1) for seq in commits if seq >= 0 and seq in starts]
    )
    depth = peak = 0
    end_depth = 0
    for t, step in events:
        depth += step
        if t <= w1:
            end_depth = depth
            if t >= w0:
                peak = max(peak, depth)
    started_in_window = sum(1 for seq, t in starts.items() if seq >= 0 and w0 <= t <= w1)
    return {
        "committed": sum(1 for seq in commits if seq >= 0),
        "started": len(latencies),
        "started_in_window": started_in_window,
        "p50": common.pct(latencies, 50),
        "p95": common.pct(latencies, 95),
        "p99": common.pct(latencies, 99),
        "max": max(latencies) if latencies else float("nan"),
        "depth_max": peak,
        "depth_end": end_depth,
    }


# --- the tables ------------------------------------------------------------------------------

#: Each system's run tables (every leaf partition counts) and the one the hot path updates.
TABLES = {
    "duecourse": (["scheduling_execution", "scheduling_attempt"], "scheduling_execution"),
    "procrastinate": (["procrastinate_jobs", "procrastinate_events"], "procrastinate_jobs"),
}
TABLES["duecourse_bulk"] = TABLES["duecourse"]
FINISHED_SQL = {
    "duecourse": "SELECT count(*) FILTER (WHERE status = 'completed'), count(*)"
    " FROM scheduling_execution",
    "procrastinate": "SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*)"
    " FROM procrastinate_jobs",
}
FINISHED_SQL["duecourse_bulk"] = FINISHED_SQL["duecourse"]


def finished(conn: Any, system: str) -> tuple[int, int]:
    """Runs finished and runs in the table."""
    done, total = conn.execute(FINISHED_SQL[system]).fetchone()
    return int(done), int(total)


def _leaves(table: str) -> str:
    """SQL for the tables that hold ``table``'s rows: its partitions, or itself if it has none
    (``pg_partition_tree`` gives no row for a plain table)."""
    return (
        f"SELECT relid FROM pg_partition_tree('{table}') WHERE isleaf"
        f" UNION ALL SELECT '{table}'::regclass"
        f" WHERE NOT EXISTS (SELECT FROM pg_partition_tree('{table}'))"
    )


def table_facts(conn: Any, system: str) -> dict[str, Any]:
    """Bytes of the run tables (heap alone, and with indexes and TOAST) and the hot table's
    dead and live rows (``pg_stat_user_tables``; read after every backend of the side has
    ended, which flushes its counters)."""
    tables, hot = TABLES[system]
    leaves = " UNION ALL ".join(_leaves(name) for name in tables)
    heap, total = conn.execute(
        f"SELECT coalesce(sum(pg_relation_size(relid)), 0),"
        f" coalesce(sum(pg_total_relation_size(relid)), 0) FROM ({leaves}) AS leaves"
    ).fetchone()
    hot_bytes = conn.execute(
        f"SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM ({_leaves(hot)}) AS t"
    ).fetchone()[0]
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT s.relname, s.n_live_tup, s.n_dead_tup FROM pg_stat_user_tables s"
        f" JOIN ({_leaves(hot)}) AS t ON t.relid = s.relid"
        " ORDER BY s.n_live_tup + s.n_dead_tup DESC LIMIT 1"
    ).fetchone()
    done, rows = finished(conn, system)
    return {
        "heap_bytes": int(heap),
        "total_bytes": int(total),
        "hot_bytes": int(hot_bytes),
        "hot_table": row[0] if row else None,
        "live": int(row[1]) if row else 0,
        "dead": int(row[2]) if row else 0,
        "finished": done,
        "rows": rows,
    }
