"""Measurement 1: tick cost and peak memory against the number of jobs defined (1 % due).

For each size N (1k, 10k, 100k, 1M; ``--quick``: 1k and 5k) and each scheduler:

- **Duecourse**: N jobs in ``bench_tick`` (one schedule each), all due in the future. A child
  process builds a ``Dispatcher``, times idle ticks, makes every hundredth job due, times the
  ticks that claim and publish that batch, then times idle ticks again (now with the batch's
  history rows in place). The target is a tick cost that is flat in N: idle < 2 ms at 1M,
  peak RSS < 100 MB at 1M.
- **django-celery-beat** (``DatabaseScheduler``): N ``PeriodicTask`` rows on one
  ``IntervalSchedule`` (every hour) in ``bench_dcb``, 1 % with ``last_run_at`` two hours ago.
  The child times the scheduler's construction (its initial full load), then runs the loop
  ``celery beat`` runs (``tick`` and ``should_sync``) until the due batch is sent or the time
  budget is over, then times idle ticks.
- **RedBeat** (``RedBeatScheduler``): N entries under a private ``redbeat_key_prefix`` in the
  benchmark Redis db, 1 % due; the same loop, with its Redis lock held as ``celery beat``
  holds it.

Every scheduler publishes real messages to the same Redis queue (``duecourse_bench_q`` under
the ``duecourse_bench:`` prefix), which is emptied after each run. Children over their time
or memory budget are killed; the table then says which limit they hit.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import common

SIZES_FULL = [1_000, 10_000, 100_000, 1_000_000]
SIZES_QUICK = [1_000, 5_000]
EVERY = 100  # every hundredth job is due: 1 %


# --- children -------------------------------------------------------------------------------


def _timed_ticks(tick: Any, count: int, gap: float = 0.02) -> dict[str, float]:
    """Wall and CPU milliseconds per call of ``tick``, with a short gap between calls.

    CPU time is reported beside wall time because it is the part that belongs to the
    scheduler process alone; the wall time also holds the database's and broker's share (and,
    on a busy machine, time spent waiting for a core).
    """
    wall, cpu = [], []
    for _ in range(count):
        started, cpu_started = time.perf_counter(), time.process_time()
        tick()
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - cpu_started) * 1000)
        time.sleep(gap)
    return {
        "median_ms": common.median(wall),
        "p95_ms": common.pct(wall, 95),
        "max_ms": max(wall) if wall else float("nan"),
        "cpu_median_ms": common.median(cpu),
    }


def child_ours(p: dict[str, Any]) -> dict[str, Any]:
    """Idle ticks, then the 1 % batch, then idle ticks again, in one scheduler process."""
    common.setup_django()
    from django.db import connection

    from config.celery import app
    from scheduling.scheduler.loop import Dispatcher, freeze_startup_heap

    dispatcher = Dispatcher(app)
    freeze_startup_heap()  # as runscheduler does
    started = time.perf_counter()
    dispatcher.tick()
    cold_ms = (time.perf_counter() - started) * 1000
    idle_before = _timed_ticks(dispatcher.tick, p["idle_ticks"])
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduling_job SET next_due_at = now() - interval '1 second',"
            " next_occurrence_at = now() - interval '1 second',"
            " created_at = now() - interval '1 hour 1 second'"
            " WHERE id %% %s = 0",
            [EVERY],
        )
        due = cursor.rowcount
    ticks = []
    started = time.perf_counter()
    while dispatcher.stats["published"] < due and time.perf_counter() - started < p["budget"]:
        t0 = time.perf_counter()
        dispatcher.tick()
        ticks.append((time.perf_counter() - t0) * 1000)
    batch_s = time.perf_counter() - started
    idle_after = _timed_ticks(dispatcher.tick, p["idle_ticks"])
    dispatcher.close()
    return {
        "due": due,
        "sent": dispatcher.stats["published"],
        "batch_s": batch_s,
        "batch_ticks": len(ticks),
        "busy_tick_ms": common.median(ticks),
        "cold_tick_ms": cold_ms,
        "idle_before": idle_before,
        "idle": idle_after,
    }


def _undo_batch(conn: Any) -> None:
    """Put the 1 % batch back in the future and forget its executions (cheaper than a reload)."""
    conn.execute(
        "UPDATE scheduling_job SET current_execution_id = NULL,"
        " next_due_at = now() + interval '1 day' + id * interval '1 ms',"
        " next_occurrence_at = now() + interval '1 day' + id * interval '1 ms'"
        " WHERE id %% %s = 0",
        [EVERY],
    )
    conn.execute("DELETE FROM scheduling_attempt")
    conn.execute("DELETE FROM scheduling_execution")
    conn.execute("VACUUM ANALYZE scheduling_job")  # not the emptied tables: see reset_jobs


def _count_sends(scheduler: Any) -> list[int]:
    """Wrap the scheduler's own ``apply_async`` so the loop knows how many it sent."""
    sent = [0]
    original = scheduler.apply_async

    def counting(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        sent[0] += 1
        return result

    scheduler.apply_async = counting
    return sent


def _beat_loop(scheduler: Any, sent: list[int], due: int, budget: float) -> tuple[float, int]:
    """The loop of ``celery.beat.Service.start``, minus the sleeps it would take while busy."""
    started = time.perf_counter()
    ticks = idle_streak = 0
    while sent[0] < due and time.perf_counter() - started < budget:
        before = sent[0]
        interval = scheduler.tick()
        ticks += 1
        if scheduler.should_sync():
            scheduler._do_sync()
        if sent[0] == before and interval > 0:
            idle_streak += 1
            if idle_streak > 50:  # nothing left that it considers due
                break
            time.sleep(min(interval, 0.01))
        else:
            idle_streak = 0
    return time.perf_counter() - started, ticks


def child_dcb(p: dict[str, Any]) -> dict[str, Any]:
    """django-celery-beat's DatabaseScheduler over N PeriodicTask rows."""
    common.setup_django()
    from django_celery_beat.schedulers import DatabaseScheduler

    from config.celery import app

    started = time.perf_counter()
    scheduler = DatabaseScheduler(app=app)
    startup_s = time.perf_counter() - started
    common.progress(startup_s=startup_s, peak_rss_mb=common.peak_rss_mb())
    sent = _count_sends(scheduler)
    batch_s, ticks = _beat_loop(scheduler, sent, p["due"], p["budget"])
    complete = sent[0] >= p["due"]
    if not complete:
        # Budget over: mark what is still due as just run, in memory only, so the idle ticks
        # below measure an idle tick (a database query plus the O(N) schedule comparison)
        # rather than more dispatching. The first tick after this rebuilds the heap.
        now = datetime.now(UTC)
        for entry in scheduler.schedule.values():
            entry.last_run_at = now
            entry.model.last_run_at = now
        scheduler._heap = None
        scheduler.tick()
    idle = _timed_ticks(scheduler.tick, p["idle_ticks"])
    return {
        "due": p["due"],
        "sent": sent[0],
        "complete": complete,
        "startup_s": startup_s,
        "batch_s": batch_s,
        "batch_ticks": ticks,
        "idle": idle,
    }


def child_redbeat(p: dict[str, Any]) -> dict[str, Any]:
    """RedBeat's RedBeatScheduler over N entries in Redis, holding its lock like beat does."""
    common.setup_django()
    from types import SimpleNamespace

    from redbeat.schedulers import RedBeatScheduler, acquire_distributed_beat_lock

    from config.celery import app

    app.conf.redbeat_redis_url = common.redis_url()
    app.conf.redbeat_key_prefix = p["prefix"]
    # RedBeat's lock lives max_interval * 5 unless set; with the project's 1 s beat interval
    # that is 5 s, shorter than one busy tick at 100k entries (the lock is lost and the next
    # tick raises LockNotOwnedError). 1,500 s is RedBeat's default under beat's default 300 s.
    app.conf.redbeat_lock_timeout = 1500
    started = time.perf_counter()
    scheduler = RedBeatScheduler(app=app)
    acquire_distributed_beat_lock(sender=SimpleNamespace(scheduler=scheduler))
    startup_s = time.perf_counter() - started
    sent = _count_sends(scheduler)
    batch_s, ticks = _beat_loop(scheduler, sent, p["due"], p["budget"])
    complete = sent[0] >= p["due"]
    idle = _timed_ticks(scheduler.tick, p["idle_ticks"] if complete else 0)
    scheduler.close()
    return {
        "due": p["due"],
        "sent": sent[0],
        "complete": complete,
        "startup_s": startup_s,
        "batch_s": batch_s,
        "batch_ticks": ticks,
        "idle": idle,
    }


# --- loading the peers ----------------------------------------------------------------------


def load_dcb(conn: Any, count: int) -> float:
    """N PeriodicTask rows on one hourly IntervalSchedule; every hundredth last ran 2 h ago."""
    started = time.perf_counter()
    common.load_dcb(
        conn,
        count,
        last_run_sql="CASE WHEN g %% %(every)s = 0 THEN now() - interval '2 hours' ELSE now() END",
        params={"every": EVERY},
    )
    return time.perf_counter() - started


# --- the driver -----------------------------------------------------------------------------


def measure(args: Any) -> dict[str, Any]:
    """Every scheduler at every size, each size loaded fresh; peers watched for time and memory."""
    sizes = SIZES_QUICK if args.quick else (args.sizes or SIZES_FULL)
    peers = args.peers.split(",")
    idle_ticks = 10 if args.quick else 30
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in peers}
    tick_db, dcb_db = common.db_name("tick"), common.db_name("dcb")
    common.redis_cleanup()
    try:
        # Duecourse as configured, and optionally the same code under other settings.
        ours = {"ours": "config.settings"} if "ours" in peers else {}
        if ours and args.what_if:
            ours["ours_whatif"] = args.what_if
            rows["ours_whatif"] = []
        if ours:
            with common.bench_db(tick_db, keep=args.keep):
                for n in sizes:
                    with common.pg_connect(tick_db) as conn:
                        load_s = common.load_jobs(
                            conn, n, due_sql="now() + interval '1 day' + g * interval '1 ms'"
                        )
                    for index, (variant, settings) in enumerate(ours.items()):
                        if index:
                            with common.pg_connect(tick_db) as conn:
                                _undo_batch(conn)
                        result = common.run_child(
                            common.child_argv(
                                "tick_cost.py",
                                "ours",
                                {"idle_ticks": idle_ticks, "budget": args.peer_budget},
                            ),
                            common.child_env(tick_db, settings=settings),
                            timeout=args.peer_timeout + args.peer_budget,
                            label=f"{variant}-{n}",
                        )
                        rows[variant].append(_row(n, load_s, result))
                        common.redis_cleanup()
        if "dcb" in peers:
            with common.bench_db(dcb_db, settings="settings_peers", keep=args.keep):
                for n in sizes:
                    if n > args.dcb_max:
                        skipped = f"not run (--dcb-max {args.dcb_max})"
                        rows["dcb"].append({"n": n, "skipped": skipped})
                        continue
                    with common.pg_connect(dcb_db) as conn:
                        load_s = load_dcb(conn, n)
                    result = common.run_child(
                        common.child_argv(
                            "tick_cost.py",
                            "dcb",
                            {
                                "due": n // EVERY,
                                "idle_ticks": min(idle_ticks, 10),
                                "budget": args.peer_budget,
                            },
                        ),
                        common.child_env(dcb_db, settings="settings_peers"),
                        timeout=args.peer_timeout + args.peer_budget,
                        rss_cap_mb=args.peer_rss_cap,
                        label=f"dcb-{n}",
                    )
                    rows["dcb"].append(_row(n, load_s, result))
                    common.redis_cleanup()
        if "redbeat" in peers:
            prefix = common.KEY_PREFIX + "rb:"
            for n in sizes:
                common.redis_cleanup()
                now = datetime.now(UTC)
                load_s = common.load_redbeat(
                    n,
                    prefix,
                    lambda g, now=now: now - timedelta(hours=2) if g % EVERY == 0 else now,
                )
                result = common.run_child(
                    common.child_argv(
                        "tick_cost.py",
                        "redbeat",
                        {
                            "due": n // EVERY,
                            "idle_ticks": idle_ticks,
                            "budget": args.peer_budget,
                            "prefix": prefix,
                        },
                    ),
                    common.child_env(None),
                    timeout=args.peer_timeout + args.peer_budget,
                    rss_cap_mb=args.peer_rss_cap,
                    label=f"redbeat-{n}",
                )
                rows["redbeat"].append(_row(n, load_s, result))
    finally:
        common.redis_cleanup()
    labels = dict(NAMES)
    if args.what_if:
        labels["ours_whatif"] = f"Duecourse, {args.what_if} (what-if)"
    return {"sizes": sizes, "rows": rows, "due_fraction": 1 / EVERY, "labels": labels}


def _row(n: int, load_s: float, result: common.ChildResult) -> dict[str, Any]:
    """A table row from a child's report, or from how far it got before it was stopped."""
    row: dict[str, Any] = {"n": n, "load_s": load_s, "watched_rss_mb": result.peak_rss_mb}
    if result.ok:
        row.update(result.data)
        due, sent = row.get("due", 0), row.get("sent", 0)
        row["rate"] = sent / row["batch_s"] if row.get("batch_s") else float("nan")
        if sent < due:
            row["note"] = f"sent {sent:,} of {due:,} in the {row['batch_s']:.0f} s budget"
    else:
        row["error"] = result.error
        row.update(result.data)  # what the child reported before it was stopped
        print(result.error, file=sys.stderr)
    return row


NAMES = {
    "ours": "Duecourse",
    "dcb": "django-celery-beat",
    "redbeat": "RedBeat",
}
HEADERS = [
    "scheduler",
    "jobs",
    "due",
    "due batch (s)",
    "dispatch (tasks/s)",
    "idle tick median (ms)",
    "idle tick p95 (ms)",
    "idle tick CPU (ms)",
    "startup (s)",
    "peak RSS (MB)",
    "note",
]


def table_rows(data: dict[str, Any]) -> list[list[Any]]:
    """One row per scheduler and size; a killed or skipped run says why in the note."""
    out = []
    names = {**NAMES, **data.get("labels", {})}
    for key, rows in data["rows"].items():
        for row in rows:
            note = row.get("note", "")
            if "skipped" in row:
                out.append([names.get(key, key), row["n"], *[None] * 8, row["skipped"]])
                continue
            if "error" in row:
                first = row["error"].split(";")[0].split(": ", 1)[-1]
                rss = row.get("watched_rss_mb")
                note = ("killed: " if first.startswith("over the") else "failed: ") + first
                if "startup_s" in row:
                    note += f" (startup took {row['startup_s']:.0f} s)"
                startup = row.get("startup_s")
                out.append(
                    [
                        names.get(key, key),
                        row["n"],
                        row["n"] // EVERY,
                        *[None] * 5,
                        startup,
                        rss,
                        note,
                    ]
                )
                continue
            idle = row.get("idle", {})
            startup = row.get("startup_s", row.get("cold_tick_ms", 0) / 1000)
            out.append(
                [
                    names.get(key, key),
                    row["n"],
                    row["due"],
                    row["batch_s"],
                    row["rate"],
                    idle.get("median_ms"),
                    idle.get("p95_ms"),
                    idle.get("cpu_median_ms"),
                    startup,
                    row.get("peak_rss_mb"),
                    note,
                ]
            )
    return out


def main() -> None:
    """Measure, save the results for run_all.py and print the table."""
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--peers", default="ours,dcb,redbeat", help="comma-separated subset")
    parser.add_argument(
        "--what-if", metavar="SETTINGS", help="also run Duecourse under this settings module"
    )
    parser.add_argument("--dcb-max", type=int, default=1_000_000, help="largest N for dcb")
    parser.add_argument("--peer-budget", type=float, default=240.0, help="s to send a batch")
    parser.add_argument("--peer-timeout", type=float, default=300.0, help="s for the rest")
    parser.add_argument("--peer-rss-cap", type=float, default=6000.0, help="MB before a kill")
    args = parser.parse_args()
    if args.quick:
        args.peer_budget, args.peer_timeout = 20.0, 60.0
    data = measure(args)
    common.save_result("tick_cost", data)
    print("\nTick cost and peak memory, 1 % of jobs due")
    print(common.render_table(HEADERS, table_rows(data), markdown=False))


if __name__ == "__main__":
    if not common.child_main({"ours": child_ours, "dcb": child_dcb, "redbeat": child_redbeat}):
        main()
