"""Where Duecourse's claim latency and per-job CPU go, under the paced producer.

Runs Duecourse's cell of ``bench/paced_queue.py`` at one offered rate twice: once with py-spy
sampling the worker's processes on the CPU only, once with idle frames too (wall time: where
a job waits between its message and its body), and with every statement of the cell's
database logged with its server time (``log_min_duration_statement = 0``, set on this
benchmark's own database only, read back from the server's log). Prints the top functions by
own and by inclusive samples in the pool processes and the main process, and the statements
by total server time for the producer's and the worker's backends.

    python bench/paced_profile.py --rate 150 --seconds 20

Needs py-spy (in the ``bench`` extra) and permission to trace the worker (root, or
``kernel.yama.ptrace_scope`` 0), and read access to the PostgreSQL server's log
(``--pg-log``, Debian's default path).
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
from pathlib import Path
from typing import Any

os.environ.setdefault("BENCH_REDIS_DB", "9")

import common
import paced_cells

PY_SPY = str(Path(common.PYTHON).parent / "py-spy")
OUT = common.RESULTS / "paced" / "profile"


def short(frame: str) -> str:
    """``func (…/site-packages/celery/app/trace.py)`` as ``celery/app/trace.py:func``."""
    match = re.match(r"(.*) \((.*)\)$", frame)
    if not match:
        return frame
    func, path = match.groups()
    for marker in ("site-packages/", str(common.ROOT) + "/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{func}"


def read_stacks(path: Path, main_pid: int) -> dict[str, collections.Counter[tuple[str, ...]]]:
    """py-spy's raw output (one ``frame;frame;… count`` line per stack) by process role."""
    out: dict[str, collections.Counter[tuple[str, ...]]] = collections.defaultdict(
        collections.Counter
    )
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        # A pool process's stack starts with its parent's "process" frame, then its own.
        pid = main_pid
        while frames and frames[0].startswith("process "):
            pid = int(frames[0].split()[1].split(":")[0])
            frames = frames[1:]
        role = "main" if pid == main_pid else "pool"
        if frames and frames[0].startswith("thread "):
            frames = frames[1:]
        out[role][tuple(short(f) for f in frames)] += int(count)
    return out


#: Leaves where a thread waits (on PostgreSQL, its parent process, a lock, the broker) or
#: sleeps in the body: left out of the busy view, and each charged to the frame that waits.
WAITS = (
    "Connection.wait",
    "Connection._recv",
    "Condition.wait",
    "_epoll.poll",
    "_read_from_socket",
    "run_sync",
)
#: Frames worth naming when a wait is charged: the engine's, the benchmark's, Celery's tracer.
OWNERS = ("scheduling/", "paced_", "celery/app/trace")


def top(stacks: collections.Counter[tuple[str, ...]], n: int) -> list[str]:
    """Own samples, inclusive samples of the busy stacks (the frames under which most of the
    work happens, leaving out those every stack shares) and the waits by who waits."""
    total = sum(stacks.values()) or 1
    busy = {f: c for f, c in stacks.items() if f and not f[-1].endswith(WAITS)}
    busy_total = sum(busy.values()) or 1
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    waits: collections.Counter[str] = collections.Counter()
    for frames, count in stacks.items():
        if not frames:
            continue
        own[frames[-1]] += count
        if frames[-1].endswith(WAITS):
            owner = next((f for f in reversed(frames) if f.startswith(OWNERS)), frames[-1])
            waits[f"{frames[-1].rsplit(':', 1)[-1]} in {owner}"] += count
    for frames, count in busy.items():
        for frame in set(frames):
            inclusive[frame] += count
    shared = {f for f, c in inclusive.items() if c >= 0.98 * busy_total}
    lines = [f"  {total} samples, {busy_total} not waiting; own (of all):"]
    lines += [f"    {c / total:6.1%}  {f}" for f, c in own.most_common(n)]
    lines += ["  inclusive (of the samples not waiting):"]
    kept = [(f, c) for f, c in inclusive.most_common() if f not in shared][:n]
    lines += [f"    {c / busy_total:6.1%}  {f}" for f, c in kept]
    lines += ["  waits (of all), by the frame that waits:"]
    lines += [f"    {c / total:6.1%}  {w}" for w, c in waits.most_common(10)]
    return lines


_LOGGED = re.compile(r"\[(\d+)\] \S*@(\S+) LOG:  duration: ([\d.]+) ms  (\w+)(?: [^:]*)?: (.*)")


def normalize(sql: str) -> str:
    sql = re.sub(r"'(?:[^']|'')*'", "?", sql)
    sql = re.sub(r"\b\d+(\.\d+)?\b", "?", sql)
    return re.sub(r"\s+", " ", sql).strip()[:150]


def statements(log: Path, offset: int, db: str, roles: dict[int, str]) -> list[str]:
    """Server time by statement and by side, from the log lines written since ``offset``."""
    totals: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0, 0.0])
    entries: list[list[str]] = []
    with open(log, errors="replace") as handle:
        handle.seek(offset)
        for line in handle:
            # A statement of several lines goes on in lines that start with a tab.
            if line.startswith("\t") and entries:
                entries[-1].append(line)
            else:
                entries.append([line])
    for entry in entries:
        m = _LOGGED.search(entry[0])
        if not m or m.group(2) != db:
            continue
        pid, _, ms, phase, sql = m.groups()
        text = normalize(" ".join([sql, *entry[1:]]))
        key = (roles.get(int(pid), "other"), f"{phase}: {text}")
        totals[key][0] += 1
        totals[key][1] += float(ms)
    rows = sorted(totals.items(), key=lambda kv: -kv[1][1])
    return [
        f"  {role:8} {int(n):7d} x {ms / max(n, 1):7.3f} ms = {ms:9.1f} ms  {sql}"
        for (role, sql), (n, ms) in rows[:25]
    ]


def profile_cell(args: Any, *, idle: bool) -> list[str]:
    kind = "wall" if idle else "cpu"
    OUT.mkdir(parents=True, exist_ok=True)
    raw = OUT / f"worker-{kind}.txt"
    log = Path(args.pg_log)
    marks: dict[str, Any] = {}

    def hook(pids: dict[str, int]) -> Any:
        marks["worker"] = pids["worker"]
        marks["offset"] = log.stat().st_size
        with paced_cells.connect(paced_cells.DUE_DB) as conn:
            marks["roles"] = {
                int(pid): app.removeprefix("qb_")
                for pid, app in conn.execute(
                    "SELECT pid, application_name FROM pg_stat_activity"
                    " WHERE datname = current_database()"
                ).fetchall()
            }
        argv = [PY_SPY, "record", "--pid", str(pids["worker"]), "--subprocesses", "--nolineno"]
        argv += ["--format", "raw", "--rate", "100", "--nonblocking", "-o", str(raw)]
        argv += ["--duration", str(int(args.seconds))] + (["--idle"] if idle else [])
        spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def ending() -> None:
            marks["end"] = log.stat().st_size
            spy.wait(timeout=args.seconds + 30)

        return ending

    opts = {
        "tick": 0.01, "batch_max": 500, "bulk": True, "drain": 10.0, "keep_files": False,
        "tag": f"profile-{kind}", "window_hook": hook,
    }  # fmt: skip
    cell = paced_cells.run_cell("duecourse", args.rate, args.seconds, opts)
    lines = [
        f"== {kind}: Duecourse at {args.rate}/s, {args.seconds:.0f} s:"
        f" p50 {cell['p50']:.1f} ms, p99 {cell['p99']:.1f} ms,"
        f" worker CPU {cell['cpu']['worker']:.1f} s,"
        f" its PostgreSQL {cell['cpu']['pg_worker']:.1f} s"
        f" for {cell.get('completed_in_window', 0)} jobs"
    ]
    stacks = read_stacks(raw, marks["worker"])
    for role in ("pool", "main"):
        lines += [f"-- {role} process(es)", *top(stacks[role], args.top)]
    if not idle:
        lines += ["-- statements by server time (log_min_duration_statement = 0)"]
        lines += statements(log, marks["offset"], paced_cells.DUE_DB, marks["roles"])
    return lines


def main() -> None:
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=150)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--pg-log", default="/var/log/postgresql/postgresql-15-main.log")
    parser.add_argument("--from-raw", help="only read a saved py-spy raw file again")
    args = parser.parse_args()
    if args.quick:
        args.rate, args.seconds = 100, 4.0
    if args.from_raw:
        raw = Path(args.from_raw)
        first = raw.read_text().split(";", 1)[0]  # the worker's main process, outermost
        stacks = read_stacks(raw, int(first.split()[1].split(":")[0]))
        for role in ("pool", "main"):
            print("\n".join([f"-- {role} process(es)", *top(stacks[role], args.top)]))
        return
    paced_cells.create_databases()
    try:
        with paced_cells.connect(paced_cells.DUE_DB) as conn:
            conn.execute(
                f'ALTER DATABASE "{paced_cells.DUE_DB}" SET log_min_duration_statement = 0'
            )
        report = [*profile_cell(args, idle=False), "", *profile_cell(args, idle=True)]
    finally:
        if not args.keep:
            paced_cells.drop_databases()
        common.redis_cleanup()
    text = "\n".join(report)
    (OUT / "report.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
