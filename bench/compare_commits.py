"""Compare two commits on the same benchmarks in one run: BEFORE (a git commit) against AFTER.

Why a script of its own: a claim like "this change costs nothing" needs both versions measured
on the same machine at the same time, since on a shared machine the numbers of a run made
an hour earlier say more about the other work on the machine than about the code. So both
versions run here, round after round, alternating which goes first, and the report gives
the best and median of each side and counts a difference as real only when it is larger than
the spread between rounds.

- BEFORE is checked out as a git worktree in ``var/bench/before-tree`` (made once, reused
  while it is at the right commit). It runs on this checkout's virtualenv with its own tree
  first on ``PYTHONPATH`` and as the working directory; before measuring, each side checks
  that ``scheduling``, ``config`` and ``common`` import from its own tree.
- AFTER is this checkout.
- Each side runs its own version of each benchmark script, Duecourse alone (no
  django-celery-beat, RedBeat or RabbitMQ), at moderate sizes:

  - ``tick``: ``tick_cost.py --sizes N --peers ours`` (idle tick at 1,000,000 jobs);
  - ``flood``: ``dispatch_rate.py --jobs N --runs fast --no-rabbit --no-worker`` (flood from
    one process; its raw PostgreSQL, send_task and LPUSH limits run too, the same code on both
    sides, and serve as a control for the machine's noise);
  - ``lag``: ``lag.py --peers ours`` with a shorter duration;
  - ``worker``: ``worker_throughput.py --repeat 1 --no-floor`` (history against bare);
  - ``calls``: ``profile_tick.py`` idle, flood and worker: Python function calls per tick,
    occurrence and task, which the machine's load hardly moves;
  - ``subscriptions`` (only when named in ``--only``; commits from before the subscriptions
    app lack the script): ``subscriptions_renewal.py --repeat 1 --sides renewal`` (N
    subscriptions renewing at one moment, one worker).

- Every run has its own ``BENCH_RUN_ID`` (``cmp<pid><side initial>``), so the two sides'
  databases (``bench_tick_cmp123b`` against ``bench_tick_cmp123a``) and Redis keys never
  meet, and its own ``BENCH_RESULTS_DIR`` (``var/bench/compare/<side>/round<k>``), where the
  script saves its JSON as usual. This script reads those files back, prints the table and
  writes it as the section "Before and after the engine restructure" of docs/benchmarks.md
  (replacing that section, leaving the others), or with ``BENCH_RESULTS_DIR`` set, to
  ``benchmarks-compare.md`` there.

``--tick-load once`` loads the 1,000,000 jobs once per side instead of once per run: each
round then runs that side's own ``tick_cost.py`` child on the loaded table and puts the due
batch back afterwards with that side's own ``_undo_batch`` (what ``tick_cost.py`` does
between its what-if variants). ``--only M --add`` measures M and adds it to the saved
comparison (same BEFORE commit and rounds, no code changed outside bench/ and docs/).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

AFTER_ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SECTION = "Before and after the engine restructure"
MEASUREMENTS = ["tick", "flood", "lag", "worker", "calls"]
#: Measurements run only when ``--only`` names them.
OPTIONAL = ["subscriptions"]
SIDES = ["before", "after"]
# A change of the medians smaller than this (in %) is not called a change, even when the
# rounds agree closely (peak RSS, say, moves by a fraction of a megabyte between versions).
MATERIAL = 3.0


# --- the trees ------------------------------------------------------------------------------


def git(*args: str, cwd: Path = AFTER_ROOT) -> str:
    """A git command's output, stripped; a failure stops the comparison."""
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def before_tree(commit: str, path: Path) -> Path:
    """A worktree of ``commit`` at ``path``: made if missing, moved there if elsewhere."""
    sha = git("rev-parse", "--verify", f"{commit}^{{commit}}")
    if (path / ".git").exists():
        if git("rev-parse", "HEAD", cwd=path) != sha:
            git("checkout", "--quiet", "--detach", sha, cwd=path)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    git("worktree", "prune")
    git("worktree", "add", "--detach", str(path), sha)
    return path


def side_env(tree: Path, run_id: str, results: Path, redis_db: str) -> dict[str, str]:
    """Environment for one side's script: its tree first on the path, its own ids and results."""
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_RESULTS_DIR", "BENCH_RUN_ID")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(tree), str(tree / "bench")]),
        BENCH_RUN_ID=run_id,
        BENCH_RESULTS_DIR=str(results),
        BENCH_REDIS_DB=redis_db,
        PYTHONUNBUFFERED="1",
    )
    return env


# After django.setup(), every loaded module of the project (and the bench helpers) must come
# from the side's own tree, not from the editable install of this checkout.
IMPORT_CHECK = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django, common
django.setup()
import scheduling.models, config.celery
mine = ("common", "config", "scheduling", "emailer", "subscriptions")
print(json.dumps({name: getattr(module, "__file__", None) or "" for name, module in
                  sorted(sys.modules.items()) if name.split(".")[0] in mine}))
"""


def check_imports(tree: Path, env: dict[str, str]) -> dict[str, str]:
    """Fail unless the project's packages and the bench helpers import from ``tree``."""
    out = subprocess.run(
        [PYTHON, "-c", IMPORT_CHECK], cwd=tree, env=env, check=True, capture_output=True, text=True
    ).stdout
    files = json.loads(out.strip().splitlines()[-1])
    wrong = {m: f for m, f in files.items() if f and not Path(f).resolve().is_relative_to(tree)}
    if not files.get("scheduling.models"):
        raise SystemExit(f"the import check in {tree} did not load scheduling.models")
    if wrong:
        raise SystemExit(f"imports resolve outside {tree}: {wrong}")
    return files


# --- running one measurement on one side ----------------------------------------------------


def script_argv(measurement: str, sizes: argparse.Namespace) -> tuple[str, list[str]]:
    """The script and its arguments for one measurement, the same for both sides."""
    if measurement == "tick":
        return "tick_cost", ["--sizes", str(sizes.tick_jobs), "--peers", "ours"]
    if measurement == "flood":
        return "dispatch_rate", [
            "--jobs",
            str(sizes.flood_jobs),
            "--runs",
            "fast",
            "--no-rabbit",
            "--no-worker",
        ]
    if measurement == "lag":
        return "lag", [
            "--peers",
            "ours",
            "--rate",
            str(sizes.lag_rate),
            "--duration",
            str(sizes.lag_duration),
        ]
    if measurement == "worker":
        return "worker_throughput", [
            "--tasks",
            str(sizes.worker_tasks),
            "--repeat",
            "1",
            "--no-floor",
        ]
    if measurement == "subscriptions":
        return "subscriptions_renewal", [
            "--subscriptions",
            str(sizes.subscriptions),
            "--repeat",
            "1",
            "--sides",
            "renewal",
            "--no-doc",
        ]
    raise ValueError(measurement)


def run_script(
    tree: Path, env: dict[str, str], script: str, argv: list[str], log: Path, timeout: float
) -> tuple[bool, float]:
    """Run one side's own version of a benchmark script; its output goes to ``log``."""
    started = time.monotonic()
    with log.open("w") as handle:
        handle.write(f"$ {script}.py {' '.join(argv)}  (cwd {tree})\n")
        handle.flush()
        proc = subprocess.Popen(
            [PYTHON, str(tree / "bench" / f"{script}.py"), *argv],
            cwd=tree,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop(proc)
            code = -1
            handle.write(f"\nstopped: over {timeout:.0f} s\n")
    return code == 0, time.monotonic() - started


def stop(proc: subprocess.Popen[Any]) -> None:
    """Stop a script we started and its children; it cleans up its databases on SIGTERM."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


# --- work counted rather than timed ---------------------------------------------------------

PROFILE_IDLE_JOBS, PROFILE_IDLE_TICKS = 100_000, 300


def run_calls(
    tree: Path, env: dict[str, str], out_dir: Path, log: Path, sizes: argparse.Namespace
) -> bool:
    """The side's ``profile_tick.py`` on an idle tick, a flood and a worker; count the calls.

    Python function calls per tick, occurrence or task barely depend on how busy the machine
    is, so they show a change in the work done where the timings of a shared machine cannot.
    """
    import re

    runs = {
        "idle": ["idle", "--jobs", str(PROFILE_IDLE_JOBS), "--ticks", str(PROFILE_IDLE_TICKS)],
        "flood": ["flood", "--jobs", str(sizes.flood_jobs)],
        "worker": ["worker", "--jobs", str(sizes.worker_tasks)],
    }
    units = {"idle": PROFILE_IDLE_TICKS, "flood": sizes.flood_jobs, "worker": sizes.worker_tasks}
    found: dict[str, Any] = {}
    all_ok = True
    for name, argv in runs.items():
        part = log.with_name(f"{log.stem}-{name}.log")
        ok, _ = run_script(tree, env, "profile_tick", argv, part, 600.0)
        text = part.read_text()
        calls = re.search(r"(\d+) function calls", text)
        per = re.search(r"ms wall, ([\d.]+) ms CPU", text)
        done = re.search(r"executions: .*'completed': (\d+)", text)
        if not ok or calls is None or (name == "worker" and not done):
            all_ok = False
            continue
        if name == "worker" and int(done.group(1)) != units[name]:
            all_ok = False  # a worker that failed its tasks did less work: not comparable
            continue
        found[name] = {
            "calls_per_unit": int(calls.group(1)) / units[name],
            "cpu_ms_per_unit": float(per.group(1)) if per else None,
        }
    (out_dir / "profile_tick.json").write_text(json.dumps(found, indent=2))
    return all_ok


# --- the tick measurement with one load per side --------------------------------------------

# Runs inside a side's tree (cwd and PYTHONPATH), so ``common`` and ``tick_cost`` are that
# side's own. argv: action, jobs, keep-database flag.
TICK_ONCE = """
import json, sys, common, tick_cost
action, n = sys.argv[1], int(sys.argv[2])
db = common.db_name("tick")
if action == "load":
    common.create_db(db)
    with common.pg_connect(db) as conn:
        load_s = common.load_jobs(conn, n, due_sql="now() + interval '1 day' + g * interval '1 ms'")
    print("LOADED " + json.dumps({"load_s": load_s}))
elif action == "round":
    load_s = float(sys.argv[3])
    with common.pg_connect(db) as conn:
        tick_cost._undo_batch(conn)
    common.redis_cleanup()
    result = common.run_child(
        common.child_argv("tick_cost.py", "ours", {"idle_ticks": 30, "budget": 240.0}),
        common.child_env(db), timeout=540.0, label=f"ours-{n}")
    common.redis_cleanup()
    row = tick_cost._row(n, load_s, result)
    row["loaded_once"] = True
    common.save_result("tick_cost", {"sizes": [n], "rows": {"ours": [row]},
                                     "due_fraction": 1 / tick_cost.EVERY, "labels": {}})
    sys.exit(0 if result.ok else 1)
elif action == "drop":
    common.redis_cleanup()
    common.drop_db(db)
"""


def tick_once(
    tree: Path, env: dict[str, str], action: str, n: int, log: Path, extra: list[str] = ()
) -> tuple[bool, str]:
    """One step of the load-once tick measurement, run in the side's own tree."""
    started = time.monotonic()
    proc = subprocess.run(
        [PYTHON, "-c", TICK_ONCE, action, str(n), *extra],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    with log.open("a") as handle:
        handle.write(f"$ tick {action} {n} ({time.monotonic() - started:.0f} s)\n")
        handle.write(proc.stdout + proc.stderr)
    return proc.returncode == 0, proc.stdout


# --- reading the results --------------------------------------------------------------------

# metric: (label, the script whose result file holds it, extractor, higher is better)
Metric = tuple[str, str, Callable[[dict[str, Any]], float | None], bool]


def _tick(key: str, sub: str | None = None) -> Callable[[dict[str, Any]], float | None]:
    def get(data: dict[str, Any]) -> float | None:
        row = data["rows"]["ours"][0]
        if "error" in row:
            return None
        value = row.get(key)
        return value.get(sub) if sub and isinstance(value, dict) else value

    return get


def _flood(data: dict[str, Any]) -> float | None:
    run = next((r for r in data["runs"] if "rate" in r), None)
    return run["rate"] if run else None


def _raw(key: str) -> Callable[[dict[str, Any]], float | None]:
    def get(data: dict[str, Any]) -> float | None:
        return data["raw"].get(key, {}).get("rate")

    return get


def _lag(key: str) -> Callable[[dict[str, Any]], float | None]:
    def get(data: dict[str, Any]) -> float | None:
        row = data["rows"].get("ours", {})
        if "error" in row:
            return None
        if key in row.get("lag", {}):
            return row["lag"][key] * 1000  # in ms: the differences are tens of ms
        return row.get(key)

    return get


def _worker(side: str) -> Callable[[dict[str, Any]], float | None]:
    def get(data: dict[str, Any]) -> float | None:
        if side == "ratio":
            return data.get("ratio")
        ok = [r for r in data.get(side, []) if "rate" in r]
        if side == "history":
            ok = [r for r in ok if r.get("completed") == r["count"]]
        return ok[0]["rate"] if ok else None

    return get


TICK, FLOOD, WORKER = "tick_cost", "dispatch_rate", "worker_throughput"
METRICS: list[Metric] = [
    ("idle tick at {tick} jobs, median (ms)", TICK, _tick("idle", "median_ms"), False),
    ("idle tick at {tick} jobs, CPU (ms)", TICK, _tick("idle", "cpu_median_ms"), False),
    ("idle tick before the batch, median (ms)", TICK, _tick("idle_before", "median_ms"), False),
    ("1 % due batch at {tick} jobs (tasks/s)", TICK, _tick("rate"), True),
    ("scheduler peak RSS at {tick} jobs (MB)", TICK, _tick("peak_rss_mb"), False),
    ("flood from one process, {flood} jobs (occurrences/s)", FLOOD, _flood, True),
    ("control: raw PostgreSQL claim (rows/s)", FLOOD, _raw("pg_claim"), True),
    ("control: raw Celery send_task (messages/s)", FLOOD, _raw("send_task"), True),
    ("lag p50 at {lag} (ms)", "lag", _lag("p50"), False),
    ("lag p99 at {lag} (ms)", "lag", _lag("p99"), False),
    ("scheduler CPU share during the lag run", "lag", _lag("cpu_share"), False),
    ("worker with history, {worker} tasks (tasks/s)", WORKER, _worker("history"), True),
    ("bare worker, same run (tasks/s)", WORKER, _worker("bare"), True),
    ("history / bare", WORKER, _worker("ratio"), True),
]


def _renewals(data: dict[str, Any]) -> float | None:
    ok = [r for r in data["rounds"].get("renewal", []) if r.get("exactly_once")]
    return ok[0]["rate"] if ok else None


METRICS.append(
    (
        "subscription renewals, {subs} at once (child orders/s)",
        "subscriptions_renewal",
        _renewals,
        True,
    )
)


def _calls(name: str, key: str) -> Callable[[dict[str, Any]], float | None]:
    def get(data: dict[str, Any]) -> float | None:
        return data.get(name, {}).get(key)

    return get


CALLS, PER, CPU = "profile_tick", "calls_per_unit", "cpu_ms_per_unit"
METRICS += [
    ("idle tick: Python function calls", CALLS, _calls("idle", PER), False),
    ("idle tick: CPU under cProfile (ms)", CALLS, _calls("idle", CPU), False),
    ("flood: Python calls per occurrence, main thread", CALLS, _calls("flood", PER), False),
    ("flood: CPU per occurrence under cProfile (ms)", CALLS, _calls("flood", CPU), False),
    ("worker (solo pool): Python function calls per task", CALLS, _calls("worker", PER), False),
]


def collect(results: Path, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Every metric's values per side, one per round that produced it."""
    values: dict[str, dict[str, list[float]]] = {}
    for label, name, get, _ in METRICS:
        values[label] = {}
        for side in SIDES:
            found = []
            for k in range(1, rounds + 1):
                path = results / side / f"round{k}" / f"{name}.json"
                if not path.exists():
                    continue
                try:
                    value = get(json.loads(path.read_text()))
                except (KeyError, IndexError, TypeError):
                    value = None
                if value is not None and value == value:
                    found.append(float(value))
            values[label][side] = found
    return values


def verdict(before: list[float], after: list[float], higher: bool) -> tuple[float | None, str]:
    """Change of the medians in %, and whether it is larger than the spread between rounds."""
    if not before or not after:
        return None, "missing"
    b, a = statistics.median(before), statistics.median(after)
    change = (a - b) / b * 100 if b else None
    spread = max(max(before) - min(before), max(after) - min(after))
    worse = a < b if higher else a > b
    if len(before) < 2 or len(after) < 2:
        return change, "one round: no spread to judge by"
    if abs(a - b) <= spread:
        return change, "within noise"
    if change is not None and abs(change) < MATERIAL:
        return change, f"same (under {MATERIAL:g} %)"
    return change, "worse beyond noise" if worse else "better beyond noise"


def table(values: dict[str, dict[str, list[float]]], labels: dict[str, str]) -> list[list[Any]]:
    """One row per metric: best and median of each side, change of the medians, verdict."""
    rows: list[list[Any]] = []
    for label, _, _, higher in METRICS:
        before, after = values[label]["before"], values[label]["after"]
        if not before and not after:
            continue
        pick = max if higher else min
        change, word = verdict(before, after, higher)
        rows.append(
            [
                label.format(**labels),
                "higher" if higher else "lower",
                pick(before) if before else None,
                statistics.median(before) if before else None,
                pick(after) if after else None,
                statistics.median(after) if after else None,
                None if change is None else f"{change:+.1f} %",
                _spread(before, after),
                word,
                f"{len(before)}/{len(after)}",
            ]
        )
    return rows


def _spread(before: list[float], after: list[float]) -> float | None:
    """The larger of the two sides' ranges (max - min over rounds), the yardstick for noise."""
    ranges = [max(v) - min(v) for v in (before, after) if len(v) > 1]
    return max(ranges) if ranges else None


HEADERS = [
    "metric",
    "better",
    "before best",
    "before median",
    "after best",
    "after median",
    "change (medians)",
    "spread",
    "verdict",
    "rounds",
]


# --- the docs section -----------------------------------------------------------------------


def replace_section(text: str, title: str, body: str) -> str:
    """``text`` with the ``## title`` section replaced by ``body`` (appended if absent)."""
    lines = text.rstrip("\n").split("\n")
    heading = f"## {title}"
    new = body.rstrip("\n").split("\n")
    if heading in lines:
        start = lines.index(heading)
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        tail = lines[end:]
        lines = lines[:start] + new + ([""] if tail else []) + tail
    else:
        lines = [*lines, "", *new]
    return "\n".join(lines) + "\n"


def section_of(text: str, title: str) -> str | None:
    """The ``## title`` section of ``text`` (heading to the next ``## ``), or None."""
    lines = text.split("\n")
    heading = f"## {title}"
    if heading not in lines:
        return None
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join(lines[start:end]).rstrip("\n") + "\n"


def section(summary: dict[str, Any], rows: list[list[Any]], markdown_table: str) -> str:
    """The docs section: what was compared, how, on what machine, the table, and its reading."""
    s = summary
    load = ", ".join(f"{x:.2f}" for x in s["load_start"])
    load_end = ", ".join(f"{x:.2f}" for x in s["load_end"])
    worse = [r[0] for r in rows if r[8] == "worse beyond noise"]
    better = [r[0] for r in rows if r[8] == "better beyond noise"]
    short = [r[0] for r in rows if r[9] != f"{s['rounds']}/{s['rounds']}"]
    reading = (
        "No metric is worse beyond the spread between rounds."
        if not worse
        else "Worse beyond the spread between rounds: " + "; ".join(worse) + "."
    )
    if better:
        reading += " Better beyond it: " + "; ".join(better) + "."
    if short:
        reading += (
            " Fewer rounds than run (*rounds*: before/after) mean a run failed or did not"
            " count (a worker history round counts only if every execution ended COMPLETED;"
            " the script's log and JSON in `var/bench/compare/` say which): "
            + "; ".join(short)
            + "."
        )
    tick_note = (
        "loaded once per side, the due batch put back between rounds: `--tick-load once`"
        if s["tick_load"] == "once"
        else "loaded afresh for every run"
    )
    rounds = f"{s['rounds']} round" + ("s" if s["rounds"] != 1 else "")
    calls_note = []
    if "calls" in s["measurements"]:
        calls_note = [
            "The *Python function calls* rows (and the CPU beside them) come from each side's"
            f" `profile_tick.py` under cProfile: {PROFILE_IDLE_TICKS} idle ticks at"
            f" {PROFILE_IDLE_JOBS:,} jobs, a flood of {s['sizes']['flood_jobs']:,} jobs, and a"
            f" solo-pool worker draining {s['sizes']['worker_tasks']:,} history tasks (its"
            " count includes the worker's start-up). A count hardly depends on how busy the"
            " machine is, so it shows a change in the work done where the timings cannot."
            " cProfile follows only the flood's main thread, not its lanes, so the flood's"
            " count moves with how the batches fell between them; compare it round by round.",
            "",
        ]
    return "\n".join(
        [
            f"## {SECTION}",
            "",
            f"Commit `{s['before']}` (before the restructure) against `{s['after']}`, measured"
            f" in one run by `bench/compare_commits.py`: {rounds}, the side that"
            " goes first alternating each round, each side running its own version of each"
            " benchmark script, Duecourse alone (no peers, no RabbitMQ) at moderate sizes:"
            f" idle tick and 1 % due batch at {s['sizes']['tick_jobs']:,} jobs ({tick_note}),"
            f" a flood of {s['sizes']['flood_jobs']:,} jobs from one process (fast path,"
            f" default lanes), lag at {s['sizes']['lag_rate']:g} due/s for"
            f" {s['sizes']['lag_duration']:g} s, and a prefork `-c 2` worker draining"
            f" {s['sizes']['worker_tasks']:,} history tasks against as many bare ones.",
            "",
            f"The machine ({s['nproc']} cores) was shared with other work during the run: load"
            f" average {load} at the start and {load_end} at the end, {s['started']} to"
            f" {s['finished']}. So each side's *best* and *median* round are shown, the change"
            " is that of the medians, and a difference counts as real only when it exceeds the"
            " *spread* (the larger of the two sides' max - min over rounds) and is at"
            f" least {MATERIAL:g} % of the before median. The *control* rows run the same code"
            " on both sides (raw PostgreSQL and Celery limits inside the flood script) and show"
            " how much the machine itself moved between runs.",
            "",
            markdown_table,
            "",
            *calls_note,
            reading,
            "",
            "Command (from the repository root):",
            "",
            "```",
            s["command"],
            "```",
            "",
        ]
    )


# --- the driver -----------------------------------------------------------------------------


def measure(args: argparse.Namespace, results: Path) -> dict[str, Any]:
    """All rounds of every measurement on both sides; returns what was run and how it went."""
    trees = {
        "before": before_tree(args.before, AFTER_ROOT / "var" / "bench" / "before-tree"),
        "after": AFTER_ROOT,
    }
    base = f"cmp{os.getpid()}"
    run_ids = {side: base + side[0] for side in SIDES}  # bench_tick_cmp123b / ..._cmp123a
    measurements = [m for m in args.only.split(",") if m]
    logs = results / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "before": git("rev-parse", "--short", "HEAD", cwd=trees["before"]),
        "after": git("rev-parse", "--short", "HEAD"),
        "after_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "rounds": args.rounds,
        "measurements": measurements,
        "tick_load": args.tick_load,
        "sizes": {
            k: getattr(args, k)
            for k in (
                "tick_jobs",
                "flood_jobs",
                "lag_rate",
                "lag_duration",
                "worker_tasks",
                "subscriptions",
            )
        },
        "load_start": os.getloadavg(),
        "nproc": os.cpu_count(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([".venv/bin/python", "bench/compare_commits.py", *sys.argv[1:]]),
        "runs": [],
        "imports": {},
    }
    for side in SIDES:
        env = side_env(trees[side], run_ids[side], results, args.redis_db)
        files = check_imports(trees[side], env)
        summary["imports"][side] = {
            "modules": len(files),
            **{name: files[name] for name in ("scheduling.models", "config.settings", "common")},
        }
        print(f"{side}: {summary[side]} in {trees[side]} (run id {run_ids[side]})", flush=True)
    tick_loaded: dict[str, float] = {}
    once = "tick" in measurements and args.tick_load == "once"
    try:
        if once:
            for side in SIDES:
                env = side_env(trees[side], run_ids[side], results / side, args.redis_db)
                ok, out = tick_once(
                    trees[side], env, "load", args.tick_jobs, logs / f"tick-load-{side}.log"
                )
                if not ok:
                    raise SystemExit(f"loading the tick table for {side} failed; see {logs}")
                line = next(x for x in out.splitlines() if x.startswith("LOADED "))
                tick_loaded[side] = json.loads(line[len("LOADED ") :])["load_s"]
                print(f"{side}: {args.tick_jobs:,} jobs loaded in {tick_loaded[side]:.0f} s")
        for k in range(1, args.rounds + 1):
            order = SIDES if k % 2 else SIDES[::-1]
            for measurement in measurements:
                for side in order:
                    out_dir = results / side / f"round{k}"
                    out_dir.mkdir(parents=True, exist_ok=True)
                    env = side_env(trees[side], run_ids[side], out_dir, args.redis_db)
                    log = logs / f"{measurement}-{side}-round{k}.log"
                    started = time.monotonic()
                    if measurement == "calls":
                        ok = run_calls(trees[side], env, out_dir, log, args)
                    elif measurement == "tick" and once:
                        ok, _ = tick_once(
                            trees[side],
                            env,
                            "round",
                            args.tick_jobs,
                            log,
                            [str(tick_loaded[side])],
                        )
                    else:
                        script, argv = script_argv(measurement, args)
                        ok, _ = run_script(trees[side], env, script, argv, log, args.timeout)
                    seconds = time.monotonic() - started
                    summary["runs"].append(
                        {
                            "round": k,
                            "measurement": measurement,
                            "side": side,
                            "ok": ok,
                            "seconds": round(seconds, 1),
                            "load": os.getloadavg(),
                        }
                    )
                    state = "ok" if ok else f"FAILED (log {log})"
                    print(
                        f"round {k} {measurement:6} {side:6} {seconds:6.0f} s  {state}"
                        f"  load {os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
    finally:
        if once:
            for side in SIDES:
                env = side_env(trees[side], run_ids[side], results / side, args.redis_db)
                tick_once(trees[side], env, "drop", args.tick_jobs, logs / f"tick-load-{side}.log")
    summary["load_end"] = os.getloadavg()
    summary["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    summary["tick_load_s"] = tick_loaded
    return summary


def report(results: Path, summary: dict[str, Any], write_docs: bool) -> None:
    """Print the comparison table and write it into the docs (or beside the results)."""
    values = collect(results, summary["rounds"])
    sizes = summary["sizes"]
    labels = {
        "tick": f"{sizes['tick_jobs']:,}",
        "flood": f"{sizes['flood_jobs']:,}",
        "lag": f"{sizes['lag_rate']:g}/s",
        "worker": f"{sizes['worker_tasks']:,}",
        "subs": f"{sizes.get('subscriptions', 0):,}",
    }
    rows = table(values, labels)
    sys.path.insert(0, str(AFTER_ROOT / "bench"))
    import common

    print(f"\nBefore ({summary['before']}) and after ({summary['after']})")
    print(common.render_table(HEADERS, rows, markdown=False))
    failed = [r for r in summary["runs"] if not r["ok"]]
    if failed:
        print(f"failed runs: {failed}", file=sys.stderr)
    if not write_docs:
        return
    body = section(summary, rows, common.render_table(HEADERS, rows, markdown=True))
    if "BENCH_RESULTS_DIR" in os.environ:
        doc = Path(os.environ["BENCH_RESULTS_DIR"]) / "benchmarks-compare.md"
    else:
        doc = AFTER_ROOT / "docs" / "benchmarks.md"
    doc.write_text(replace_section(doc.read_text() if doc.exists() else "", SECTION, body))
    print(f"wrote the section {SECTION!r} of {doc}")


def check_addable(previous: dict[str, Any], args: argparse.Namespace) -> None:
    """Refuse to add to a comparison of other commits, rounds or engine code."""
    before = git("rev-parse", "--short", f"{args.before}^{{commit}}")
    if previous["before"] != before or previous["rounds"] != args.rounds:
        raise SystemExit(
            f"--add: the saved comparison is of {previous['before']} in"
            f" {previous['rounds']} rounds; start afresh (without --add)"
        )
    changed = git("diff", "--name-only", previous["after"], "HEAD", "--", ".", ":!bench", ":!docs")
    if changed:
        raise SystemExit(f"--add: code changed since {previous['after']}: {changed.split()}")


def merge(previous: dict[str, Any], added: dict[str, Any]) -> dict[str, Any]:
    """The saved comparison with the added measurements' runs in place of any earlier ones."""
    merged = dict(previous)
    new = set(added["measurements"])
    merged["measurements"] = [m for m in previous["measurements"] if m not in new] + sorted(new)
    merged["runs"] = [r for r in previous["runs"] if r["measurement"] not in new] + added["runs"]
    merged["load_end"] = added["load_end"]
    merged["finished"] = added["finished"]
    merged["command"] = previous["command"] + "\n" + added["command"]
    return merged


def main() -> None:
    """Measure both commits (unless --render), then print and write the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="df19110", help="the commit to compare against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(MEASUREMENTS), help="comma-separated subset")
    parser.add_argument("--tick-jobs", type=int, default=1_000_000)
    parser.add_argument(
        "--tick-load",
        choices=["each", "once"],
        default="once",
        help="load the tick table for every run, or once per side (default)",
    )
    parser.add_argument("--flood-jobs", type=int, default=20_000)
    parser.add_argument("--lag-rate", type=float, default=500.0)
    parser.add_argument("--lag-duration", type=float, default=20.0)
    parser.add_argument("--worker-tasks", type=int, default=3_000)
    parser.add_argument("--subscriptions", type=int, default=10_000)
    parser.add_argument("--timeout", type=float, default=900.0, help="s for one script run")
    parser.add_argument(
        "--redis-db", default=os.environ.get("BENCH_REDIS_DB", "6"), help="Redis db (≥ 4)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    parser.add_argument("--render", action="store_true", help="only re-render from saved results")
    parser.add_argument("--no-docs", action="store_true", help="print the table only")
    parser.add_argument(
        "--add",
        action="store_true",
        help="add the --only measurements to the saved comparison instead of starting afresh",
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds = min(args.rounds, 2)
        args.tick_jobs, args.flood_jobs, args.worker_tasks = 5_000, 2_000, 300
        args.lag_rate, args.lag_duration = 100.0, 3.0
    base = os.environ.get("BENCH_RESULTS_DIR")
    results = Path(base) / "compare" if base else AFTER_ROOT / "var" / "bench" / "compare"
    summary_path = results / "summary.json"
    if args.render:
        summary = json.loads(summary_path.read_text())
    else:
        previous = None
        if args.add and summary_path.exists():
            previous = json.loads(summary_path.read_text())
            check_addable(previous, args)
        elif results.exists():
            import shutil

            shutil.rmtree(results)
        results.mkdir(parents=True, exist_ok=True)
        summary = measure(args, results)
        if previous is not None:
            summary = merge(previous, summary)
        summary_path.write_text(json.dumps(summary, indent=2, default=str))
    report(results, summary, write_docs=not args.no_docs)


if __name__ == "__main__":
    main()
