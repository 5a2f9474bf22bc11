"""Run every benchmark, print one table per measurement, write docs/benchmarks.{md,png}.

``make bench`` runs this with the full sizes (an hour or more; run it on a quiet machine).
``--quick`` runs each script at tiny sizes to check that everything works end to end.
``--only`` picks scripts; ``--render`` only re-renders the docs from the saved results in
``var/bench/`` (each script saves its own, with the command that produced it), which is how
a single re-measured script updates the report.

Each script runs in its own process, so one script's failure is reported and the others still
run; the report then marks that measurement as missing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common
import dispatch_rate
import lag
import tick_cost
import worker_depth
import worker_throughput

SCRIPTS = ["tick_cost", "dispatch_rate", "lag", "worker_throughput", "worker_depth"]
# The report goes to docs/ unless the results were redirected (BENCH_RESULTS_DIR, for trial
# runs): then it goes beside them, and docs/ keeps the last real run.
_DOCS = common.RESULTS if "BENCH_RESULTS_DIR" in os.environ else common.ROOT / "docs"
DOC = _DOCS / "benchmarks.md"
PLOT = _DOCS / "benchmarks.png"


def run_scripts(names: list[str], quick: bool, extra: dict[str, list[str]]) -> dict[str, str]:
    """Run each script; return the ones that failed with their exit status."""
    failed = {}
    for name in names:
        argv = [common.PYTHON, str(common.BENCH / f"{name}.py")]
        argv += ["--quick"] if quick else []
        argv += extra.get(name, [])
        print(f"\n=== {name}: {' '.join(argv[1:])}", flush=True)
        started = time.monotonic()
        code = subprocess.call(argv, cwd=common.ROOT)
        print(f"=== {name}: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
        if code:
            failed[name] = f"exit status {code}"
    return failed


# --- verdicts -------------------------------------------------------------------------------


def _largest(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The measured row with the most jobs (the one the 1M targets are judged on)."""
    ok = [r for r in rows if "idle" in r]
    return max(ok, key=lambda r: r["n"]) if ok else None


def verdicts(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) for each stated target; 'not measured' when absent."""
    out: list[tuple[str, str, str]] = []
    tick = results.get("tick_cost")
    ours = (tick or {}).get("rows", {}).get("ours", [])
    big = _largest(ours)
    million = big is not None and big["n"] >= 1_000_000
    small = min((r for r in ours if "idle" in r), key=lambda r: r["n"], default=None)
    if big and small:
        idle = big["idle"]["median_ms"]
        where = f"{big['n']:,} jobs"
        out.append(
            (
                "idle tick < 2 ms at 1M jobs",
                f"{idle:.2f} ms at {where}",
                _verdict(idle < 2, million),
            )
        )
        rss = big["peak_rss_mb"]
        out.append(
            (
                "peak RSS < 100 MB at 1M jobs",
                f"{rss:.0f} MB at {where}",
                _verdict(rss < 100, million),
            )
        )
        growth = big["idle"]["median_ms"] / small["idle"]["median_ms"]
        out.append(
            (
                "tick cost flat in the number of jobs",
                f"idle tick x{growth:.2f} from {small['n']:,} to {big['n']:,} jobs",
                _verdict(growth < 2, million),
            )
        )
    else:
        out.append(("idle tick < 2 ms at 1M jobs", "—", "not measured"))
    flood = results.get("dispatch_rate")
    runs = [r for r in (flood or {}).get("runs", []) if "rate" in r]
    if runs:
        fast = runs[0]
        full = flood["n"] >= 100_000
        out.append(
            (
                "≥ 20,000 occurrences/s from one process",
                f"{fast['rate']:,.0f}/s ({fast['label']}, {flood['n']:,} jobs)",
                _verdict(fast["rate"] >= 20_000, full),
            )
        )
        by_label = {r["label"]: r for r in runs}
        one = by_label.get("fast path, 1 process, 1 lane")
        two = by_label.get("fast path, 2 processes of 1 lane")
        if one and two:
            out.append(
                (
                    "two schedulers together faster than one",
                    f"{two['rate']:,.0f}/s against {one['rate']:,.0f}/s (one lane each)",
                    _verdict(two["rate"] > one["rate"], full),
                )
            )
        check = flood.get("worker_check")
        if check:
            good = check.get("completed") == check["count"]
            out.append(
                (
                    "a stock worker runs fast-path messages to COMPLETED",
                    f"{check.get('completed', 0):,} of {check['count']:,} COMPLETED",
                    "met" if good else "NOT met",
                )
            )
    else:
        out.append(("≥ 20,000 occurrences/s from one process", "—", "not measured"))
    lagged = (results.get("lag") or {}).get("rows", {}).get("ours")
    if lagged and "lag" in lagged:
        p99 = lagged["lag"]["p99"]
        full = results["lag"]["rate"] >= 500 and results["lag"]["duration"] >= 60
        out.append(
            (
                "lag p99 < 1.5 s at 500 due/s",
                f"p99 {p99:.3f} s at {results['lag']['rate']:g}/s",
                _verdict(p99 < 1.5, full),
            )
        )
    else:
        out.append(("lag p99 < 1.5 s at 500 due/s", "—", "not measured"))
    worker = results.get("worker_throughput")
    if worker and worker.get("ratio") is not None:
        ratio = worker["ratio"]
        out.append(
            (
                "worker with history ≥ 70 % of bare",
                f"{ratio:.0%} ({worker['best']['history']:,.0f} vs {worker['best']['bare']:,.0f}"
                " tasks/s)",
                _verdict(ratio >= 0.7, worker["count"] >= 5_000),
            )
        )
    elif worker:
        out.append(
            ("worker with history ≥ 70 % of bare", "history rounds did not all complete", "failed")
        )
    else:
        out.append(("worker with history ≥ 70 % of bare", "—", "not measured"))
    out += _against_procrastinate(results.get("worker_depth"))
    return out


#: The queue depth the worker's target against procrastinate is judged at.
DEPTH = 800


def _against_procrastinate(depth: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    """The worker with history against procrastinate's, by the medians of the same run.

    Judged at ``DEPTH`` tasks waiting, the other depths of the run shown beside it:
    procrastinate's rate depends on its backlog, a Celery worker's does not
    (``worker_depth.py``).
    """
    name = f"worker with history ≥ 1.1 x procrastinate at {DEPTH:,} tasks (medians)"
    if depth is None:
        return [(name, "—", "not measured")]
    sizes = depth.get("sizes") or []
    judged = [n for n in sizes if worker_depth.ratio(depth, n)]
    if DEPTH in sizes and DEPTH not in judged:
        return [(name, f"no valid rounds at {DEPTH:,} tasks", "failed")]
    if not judged:
        return [(name, "—", "not measured")]
    at = DEPTH if DEPTH in judged else min(judged)
    medians = depth["median"][str(at)]
    ratio = worker_depth.ratio(depth, at) or 0.0
    others = "; ".join(
        f"{worker_depth.ratio(depth, n) or 0.0:.2f}x at {n:,}" for n in judged if n != at
    )
    on_rabbit = " on RabbitMQ" if depth.get("broker") == "amqp" else ""
    measured = (
        f"{ratio:.2f}x at {at:,}{on_rabbit} ({medians['history']:,.0f} vs"
        f" {medians['procrastinate']:,.0f} tasks/s, {worker_depth.valid_rounds(depth, at)}"
        " rounds)" + (f"; {others}" if others else "")
    )
    verdict = "met" if ratio >= 1.1 else "NOT met"
    if at != DEPTH:
        verdict += f" (judged at {at:,}, not {DEPTH:,})"
    return [(name, measured, verdict)]


def _verdict(ok: bool, full_size: bool) -> str:
    """met / NOT met, marked when it was judged at a smaller size than the target's."""
    verdict = "met" if ok else "NOT met"
    return verdict if full_size else f"{verdict} (at reduced size only)"


# --- the plot -------------------------------------------------------------------------------


def plot(tick: dict[str, Any], path: Path) -> bool:
    """Idle tick, dispatch rate of the 1 % batch and peak RSS against jobs defined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    styles = {
        "ours": ("Duecourse", "tab:green", "o"),
        "ours_whatif": ("Duecourse, what-if settings", "tab:olive", "s"),
        "dcb": ("django-celery-beat", "tab:red", "^"),
        "redbeat": ("RedBeat", "tab:blue", "D"),
    }
    panels = [
        ("idle tick, median (ms)", lambda r: r["idle"]["median_ms"]),
        ("dispatch rate of the 1 % batch (tasks/s)", lambda r: r["rate"]),
        ("scheduler peak RSS (MB)", lambda r: r["peak_rss_mb"]),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    drawn = False
    for ax, (title, value) in zip(axes, panels, strict=True):
        for key, rows in tick.get("rows", {}).items():
            label, color, marker = styles.get(key, (key, None, "x"))
            points = [(r["n"], value(r)) for r in rows if "idle" in r and r.get("idle")]
            points = [(n, v) for n, v in points if v == v and v > 0]
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker=marker, color=color, label=label)
            drawn = True
            for r in rows:
                if "error" in r or r.get("note"):
                    text = "stopped" if "error" in r else "partial: time budget"
                    ax.annotate(text, (r["n"], ys[-1]), fontsize=7, color=color)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel("jobs defined (1 % due)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    if not drawn:
        plt.close(fig)
        return False
    axes[0].axhline(2, color="grey", linestyle="--", linewidth=1)
    axes[0].annotate("target 2 ms", (axes[0].get_xlim()[0], 2), fontsize=8, color="grey")
    axes[2].axhline(100, color="grey", linestyle="--", linewidth=1)
    axes[0].legend(fontsize=8)
    fig.suptitle("Scheduler cost against jobs defined (PostgreSQL / Redis, same machine, same run)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --- the report -----------------------------------------------------------------------------


def _section(title: str, body: list[str]) -> list[str]:
    """A report section: heading, body, blank line."""
    return [f"## {title}", "", *body, ""]


def _conn_max_age() -> str:
    """The CONN_MAX_AGE the project's settings give a PostgreSQL database, for the notes."""
    from config.env import parse_database_url

    return str(parse_database_url(common.db_url(common.db_name("x"))).get("CONN_MAX_AGE"))


def _reuse_max() -> str:
    """The CELERY_DB_REUSE_MAX of the project's settings, for the notes."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.conf import settings

    return str(getattr(settings, "CELERY_DB_REUSE_MAX", None))


def render(results: dict[str, Any], facts: dict[str, Any], plotted: bool, old: str = "") -> str:
    """The whole of docs/benchmarks.md from the saved results and the machine facts.

    A measurement with no saved result (a run with ``--only``) keeps what ``old``, the page as
    it was, says: its section is left out here and carried over by ``with_other_sections``, and
    its rows of the targets table are taken from the old table.
    """
    md = common.render_table
    lines = [
        "# Benchmarks",
        "",
        "Produced by `make bench` (which runs `bench/run_all.py`); the numbers below are"
        " rewritten every time it runs. Every measurement runs Duecourse beside"
        " django-celery-beat and RedBeat and beside the raw limits of the same machine, in the"
        " same run, so the comparison holds even where the absolute numbers depend on the"
        " machine. The final numbers are made on a quiet machine; numbers from a machine"
        " shared with other work are marked by its load average. A run of some scripts only"
        " (`--only`) rewrites their sections and this *Machine* block; every other section"
        " keeps its own *Finished* line, and may come from another machine.",
        "",
        "## Machine",
        "",
        f"- date: {facts['date']} (commit `{facts['commit']}`)",
        f"- `nproc`: {facts['nproc']}; CPU: {facts['cpu']}; kernel {facts['kernel']}",
        "- load average at start: " + ", ".join(f"{x:.2f}" for x in facts["loadavg"]),
        f"- PostgreSQL {facts['postgresql']}, Redis {facts['redis_server']}, on the same machine",
        f"- Python {facts['python']}; "
        + ", ".join(f"{k} {v}" for k, v in facts["versions"].items()),
        "",
        "`free -m`:",
        "",
        "```",
        facts["free_m"],
        "```",
        "",
        "## Targets",
        "",
        md(
            ["target", "measured", "verdict"],
            kept_targets(verdicts(results), results, old),
            markdown=True,
        ),
        "",
    ]
    tick = results.get("tick_cost")
    body = [
        "Jobs defined: N, of which 1 % are due. *Due batch*: the time to claim and publish"
        " those 1 % (Duecourse: `Dispatcher.tick` until all are published, history rows"
        " included; peers: the loop `celery beat` runs, without sleeping while busy). *Idle"
        " tick*: one tick with nothing due. *Startup*: the peers' constructor (their initial"
        " load); for Duecourse, its first tick. *Peak RSS*: the scheduler process's `VmHWM`.",
        "django-celery-beat runs `DatabaseScheduler` over N `PeriodicTask` rows on one hourly"
        " `IntervalSchedule`; RedBeat runs `RedBeatScheduler` over N entries under a private"
        " key prefix, holding its lock as beat does. A peer over its time budget or memory cap"
        " is stopped, and the row says so: a measured limit, not a gap.",
        "",
    ]
    if tick:
        body += [md(tick_cost.HEADERS, tick_cost.table_rows(tick), markdown=True), ""]
        if plotted:
            body += ["![tick cost, dispatch rate and RSS against jobs defined](benchmarks.png)", ""]
    body += common.command_block(tick)
    body += [
        "",
        "Orientation from published reports (other machines): django-celery-beat with 100k"
        " tasks, 1k due: about 10 tasks/s, 93 ms idle tick, 568 MB peak RSS; RedBeat about"
        " 1,200 tasks/s.",
    ]
    if tick:
        lines += _section("1. Tick cost and peak memory against jobs defined", body)
    flood = results.get("dispatch_rate")
    body = [
        "Target: ≥ 20,000 occurrences/s from one process, claim and history rows included."
        " The wall clock runs from the first tick until every execution is QUEUED. *Where the"
        " time went* splits the schedulers' own time by step (summed over processes and their"
        " flood lanes, which work at the same time).",
        "",
    ]
    if flood:
        body += [
            md(dispatch_rate.HEADERS, dispatch_rate.table_rows(flood), markdown=True),
            "",
        ]
        check = flood.get("worker_check")
        if check:
            body += [
                f"Stock `celery worker` check: {check.get('completed', 0):,} of"
                f" {check['count']:,} fast-path executions COMPLETED"
                f" (statuses: {check.get('statuses')}).",
                "",
            ]
    body += common.command_block(flood)
    body += [
        "",
        "Orientation (other machines): Celery `apply_async` loop to Redis about 2,600/s, Redis"
        " `LPUSH` pipelined about 180,000/s, PostgreSQL batched claim about 68,000 rows/s.",
    ]
    if flood:
        lines += _section("2. Dispatch rate for a flood due at the same instant", body)
    lagged = results.get("lag")
    body = [
        "Target: p99 < 1.5 s at 500 due/s. Lag is the time from an occurrence's due time to"
        " its message being published. Each scheduler runs its real loop, sleeps included"
        " (Duecourse: `manage.py runscheduler`).",
        "",
    ]
    if lagged:
        body += [md(lag.HEADERS, lag.table_rows(lagged), markdown=True), ""]
    body += common.command_block(lagged)
    if lagged:
        lines += _section("3. Lag from due time to publish at a steady rate", body)
    worker = results.get("worker_throughput")
    if worker:
        body = worker_throughput.section_body(worker, common.command_block(worker))
        lines += _section("4. Worker throughput with execution history", body)
    depth = results.get("worker_depth")
    if depth:
        body = worker_depth.section_body(depth, common.command_block(depth))
        lines += _section(worker_depth.SECTION.removeprefix("## "), body)
    lines += [
        "## Notes on the setup",
        "",
        "- Databases `bench_*` and Redis keys under `duecourse_bench:` (db 6 unless"
        " `BENCH_REDIS_DB`) are created for the run and removed after it.",
        "- Duecourse jobs are loaded with one schedule per job (what `create_job` does), so the"
        " claim's per-schedule cache gets no free hits.",
        f"- Database connections as the project's settings make them (`CONN_MAX_AGE`"
        f" {_conn_max_age()}, `CELERY_DB_REUSE_MAX` {_reuse_max()}), for Duecourse and"
        " django-celery-beat alike.",
        "- Each measurement starts from freshly loaded tables. Whether autovacuum runs during"
        " a measurement is the server's setting (see *Machine*); with it off, the tables' own"
        " autovacuum settings do not act.",
        "- The scheduler's log level is the shipped default (INFO), written to a file.",
        "",
    ]
    return "\n".join(lines) + "\n"


#: The targets each measurement judges, by the start of their names (the old page's rows of a
#: measurement a run left out are kept, under whatever name the page gave them).
TARGET_GROUPS = {
    "tick_cost": ("idle tick", "peak RSS", "tick cost flat"),
    "dispatch_rate": (
        "≥ 10,000 occurrences",
        "≥ 20,000 occurrences",
        "two schedulers",
        "a stock worker",
    ),
    "lag": ("lag p99",),
    "worker_throughput": ("worker with history ≥ 70 %",),
    "worker_depth": ("worker with history ≥ 1.1 x procrastinate",),
}


def kept_targets(
    rows: list[tuple[str, str, str]], results: dict[str, Any], old: str
) -> list[tuple[str, ...]]:
    """The targets table: the targets of a measurement this run did not make keep their old rows."""
    before: list[tuple[str, ...]] = []
    section = dict(_sections(old)).get("## Targets", "")
    for line in section.splitlines():
        cells = tuple(cell.strip() for cell in line.strip().strip("|").split(" | "))
        if line.startswith("| ") and len(cells) == 3 and cells[0] != "target":
            before.append(cells)
    kept: list[tuple[str, ...]] = []
    for script, prefixes in TARGET_GROUPS.items():
        mine = [row for row in rows if row[0].startswith(prefixes)]
        if results.get(script) is None:
            mine = [row for row in before if row[0].startswith(prefixes)] or mine
        kept += mine
    return kept


def _sections(text: str) -> list[tuple[str, str]]:
    """``text`` cut at its ``## `` headings: (heading, section) pairs, the head first."""
    parts: list[tuple[str, str]] = []
    for line in text.splitlines(keepends=True):
        if line.startswith("## ") or not parts:
            parts.append((line.strip() if line.startswith("## ") else "", ""))
        heading, body = parts[-1]
        parts[-1] = (heading, body + line)
    return parts


def with_other_sections(old: str, new: str) -> str:
    """``new``'s sections, with every section of ``old`` that ``new`` does not write itself.

    The measurements that run on their own (cron_next.py, dashboard.py, compare_commits.py,
    the emailer's and the subscriptions' benchmarks) each write one section of the page; a
    full run rewrites its own sections and carries theirs over unchanged.
    Each section keeps its place: a rewritten one replaces its old text where it stood, and a
    section the page did not have yet goes at the end.
    """
    mine = _sections(new)
    written = dict(mine)
    before = [heading for heading, _ in _sections(old) if heading]
    order = before + [h for h, _ in mine if h and h not in before]
    olds = dict(_sections(old))
    bodies = [written.get(h, olds.get(h, "")) for h in order]
    head = mine[0][1] if mine and not mine[0][0] else ""
    return (
        head.rstrip("\n")
        + "\n"
        + "".join("\n" + body.strip("\n") + "\n" for body in bodies if body)
    )


def main() -> None:
    """Run the scripts (unless --render), print every table, write the report and plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check the scripts")
    parser.add_argument("--only", default=",".join(SCRIPTS), help="comma-separated scripts")
    parser.add_argument("--render", action="store_true", help="only re-render the docs")
    parser.add_argument("--tick-args", default="", help="extra arguments for tick_cost.py (quoted)")
    parser.add_argument(
        "--worker-args", default="", help="extra arguments for worker_throughput.py (quoted)"
    )
    parser.add_argument(
        "--depth-args", default="", help="extra arguments for worker_depth.py (quoted)"
    )
    args = parser.parse_args()
    if str(common.ROOT) not in sys.path:
        sys.path.insert(0, str(common.ROOT))  # the notes read the project's settings
    names = [n for n in args.only.split(",") if n]
    facts = common.machine_facts()
    failed: dict[str, str] = {}
    if not args.render:
        extra = {
            "tick_cost": args.tick_args.split(),
            "worker_throughput": args.worker_args.split(),
            "worker_depth": args.depth_args.split(),
        }
        failed = run_scripts(names, args.quick, extra)
    results = {name: common.load_result(name) for name in SCRIPTS}
    for name in SCRIPTS:
        data = results[name]
        if data is None:
            continue
        module = sys.modules[name]
        print(f"\n{name}  ({data['command']})")
        print(common.render_table(module.HEADERS, module.table_rows(data), markdown=False))
    plotted = bool(results["tick_cost"]) and plot(results["tick_cost"], PLOT)
    DOC.parent.mkdir(parents=True, exist_ok=True)
    old = DOC.read_text() if DOC.exists() else ""
    DOC.write_text(with_other_sections(old, render(results, facts, plotted, old)))
    print("\nTargets")
    print(common.render_table(["target", "measured", "verdict"], verdicts(results), markdown=False))
    print(f"\nwrote {DOC}" + (f" and {PLOT.name}" if plotted else ""))
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
