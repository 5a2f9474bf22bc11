"""Measurement 3: lag from due time to publish at a steady rate of due occurrences.

R due per second for D seconds (500/s for 60 s = 30,000 occurrences; ``--quick``: 100/s for
5 s), spread evenly: occurrence ``g`` is due at ``T0 + g / R``. Every scheduler runs its own
real loop, sleeps included:

- **Duecourse**: ``manage.py runscheduler`` (the shipped command) over jobs in ``bench_lag``;
  lag = ``queued_at - scheduled_for`` of each execution row (``queued_at`` is set after the
  message reached the broker);
- **django-celery-beat** and **RedBeat**: the loop ``celery beat`` runs (``tick``, sleep the
  interval it returns, ``should_sync``), with ``beat_max_loop_interval`` = 1 s as in the
  project's settings; lag = the time the scheduler's ``apply_async`` returned minus the entry's
  due time.

An occurrence still unsent when the run stops (3 s after the last one was due) counts with
the lag it had at that moment, so percentiles that depend on it are lower bounds (shown ≥).
The target is p99 < 1.5 s.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import common

TAIL = 3.0  # seconds the schedulers keep running after the last occurrence is due


def _lags(values: list[float], unsent: list[float]) -> dict[str, Any]:
    """Percentiles over sent and (censored) unsent occurrences."""
    allv = values + unsent
    out: dict[str, Any] = {"sent": len(values), "unsent": len(unsent)}
    for p in (50, 95, 99):
        value = common.pct(allv, p)
        out[f"p{p}"] = value
        # Censored if the p-th value is not a sent one (all unsent lags are at the top only
        # if they exceed every sent lag; be conservative and flag any overlap).
        out[f"p{p}_lower_bound"] = bool(unsent) and value >= min(unsent)
    out["max"] = max(allv) if allv else float("nan")
    return out


def child_peer(p: dict[str, Any]) -> dict[str, Any]:
    """Run django-celery-beat or RedBeat in beat's own loop; record each send's lag."""
    common.setup_django()
    from config.celery import app

    if p["kind"] == "dcb":
        from django_celery_beat.schedulers import DatabaseScheduler

        scheduler: Any = DatabaseScheduler(app=app)
    else:
        from types import SimpleNamespace

        from redbeat.schedulers import RedBeatScheduler, acquire_distributed_beat_lock

        app.conf.redbeat_redis_url = common.redis_url()
        app.conf.redbeat_key_prefix = p["prefix"]
        app.conf.redbeat_lock_timeout = 1500  # as in tick_cost.py: a busy tick outlives 5 s
        scheduler = RedBeatScheduler(app=app)
        acquire_distributed_beat_lock(sender=SimpleNamespace(scheduler=scheduler))
    lags: list[float] = []
    hour = timedelta(hours=1)
    original = scheduler.apply_async

    def recording(entry: Any, *args: Any, **kwargs: Any) -> Any:
        due = entry.last_run_at + hour
        result = original(entry, *args, **kwargs)
        lags.append((datetime.now(UTC) - due).total_seconds())
        return result

    scheduler.apply_async = recording
    slack = p["t0"] - time.time()  # < 0: the harness started this scheduler too late
    stop = p["stop_at"]
    while time.time() < stop:
        interval = scheduler.tick()
        if scheduler.should_sync():
            scheduler._do_sync()
        if interval:
            time.sleep(max(0.0, min(interval, stop - time.time())))
    stopped = datetime.now(UTC)
    t0 = datetime.fromtimestamp(p["t0"], UTC)
    total = p["count"]
    # Due times of the unsent: the latest ``total - sent`` occurrences (sent ones go in order).
    unsent = [
        (stopped - (t0 + timedelta(seconds=g / p["rate"]))).total_seconds()
        for g in range(len(lags), total)
    ]
    if hasattr(scheduler, "close"):
        scheduler.close()
    return {"lag": _lags(lags, unsent), "ready_slack_s": slack}


def load_dcb(conn: Any, count: int, t0: float, rate: float) -> None:
    """PeriodicTask rows due at t0 + g/rate: hourly, last run one hour before that."""
    common.load_dcb(
        conn,
        count,
        last_run_sql="to_timestamp(%(t0)s + (g - 1) / %(rate)s) - interval '1 hour'",
        params={"t0": t0, "rate": float(rate)},
    )


def run_ours(count: int, rate: float, duration: float, lead: float) -> dict[str, Any]:
    """``manage.py runscheduler`` over jobs due at a steady rate; lag from the ledger."""
    import psutil

    db = common.db_name("lag")
    with common.pg_connect(db) as conn:
        t0 = time.time() + lead
        common.load_jobs(conn, count, due_sql=f"to_timestamp({t0} + (g - 1) / {float(rate)})")
    stop_at = t0 + duration + TAIL
    argv = [common.PYTHON, "manage.py", "runscheduler"]
    import subprocess

    log = open(common.RESULTS / "lag-scheduler.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        argv,
        cwd=common.ROOT,
        env=common.child_env(db),
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    watched = psutil.Process(proc.pid)
    peak = 0.0
    cpu_start = None
    try:
        while time.time() < stop_at:
            time.sleep(0.2)
            peak = max(peak, watched.memory_info().rss / 2**20)
            if cpu_start is None and time.time() >= t0:
                times = watched.cpu_times()
                cpu_start = times.user + times.system
        times = watched.cpu_times()
        cpu = times.user + times.system - (cpu_start or 0.0)
    finally:
        common.kill_group(proc)
        log.close()
    stopped = time.time()
    with common.pg_connect(db) as conn:
        sent = [
            float(v)
            for (v,) in conn.execute(
                "SELECT extract(epoch FROM queued_at - scheduled_for) FROM scheduling_execution"
                " WHERE status = 'queued'"
            )
        ]
        # Claimed but not yet published, and never claimed: lags that were still growing.
        unsent = [
            stopped - float(v)
            for (v,) in conn.execute(
                "SELECT extract(epoch FROM scheduled_for) FROM scheduling_execution"
                " WHERE status = 'pending' UNION ALL"
                " SELECT extract(epoch FROM next_due_at) FROM scheduling_job"
                " WHERE next_due_at <= to_timestamp(%s)",
                [stopped],
            )
        ]
    return {"lag": _lags(sent, unsent), "cpu_share": cpu / (duration + TAIL), "rss_mb": peak}


def run_peer(kind: str, count: int, rate: float, duration: float, lead: float) -> dict[str, Any]:
    """Load a peer's entries due at the steady rate, run its beat loop in a child, read its lags."""
    prefix = common.KEY_PREFIX + "rb:"
    t0 = time.time() + lead + count / 5_000
    if kind == "dcb":
        with common.pg_connect(common.db_name("dcb")) as conn:
            load_dcb(conn, count, t0, rate)
        env = common.child_env(common.db_name("dcb"), settings="settings_peers")
    else:
        common.redis_cleanup()
        common.load_redbeat(
            count,
            prefix,
            lambda g: datetime.fromtimestamp(t0 + (g - 1) / rate - 3600, UTC),
        )
        env = common.child_env(None)
    slack = t0 - time.time()
    if slack < 2:
        print(f"warning: {kind} loaded late: {slack:.1f} s before the first due", file=sys.stderr)
    params = {
        "kind": kind,
        "prefix": prefix,
        "t0": t0,
        "rate": rate,
        "count": count,
        "stop_at": t0 + duration + TAIL,
    }
    result = common.run_child(
        common.child_argv("lag.py", "peer", params),
        env,
        timeout=duration + TAIL + lead + 120,
        label=f"lag-{kind}",
    )
    common.redis_cleanup()
    if not result.ok:
        print(result.error, file=sys.stderr)
        return {"error": result.error}
    if result.data.get("ready_slack_s", 0) < 0:
        print(f"warning: {kind} was ready only after the first due time", file=sys.stderr)
    return {**result.data, "rss_mb": result.data.get("peak_rss_mb")}


def measure(args: Any) -> dict[str, Any]:
    """Measurement 3 for each scheduler, one after another, each on fresh data."""
    rate, duration = (100.0, 3.0) if args.quick else (args.rate, args.duration)
    count = int(rate * duration)
    lead = 6.0 if args.quick else 10.0  # time for a child to import and load before t0
    out: dict[str, Any] = {"rate": rate, "duration": duration, "count": count, "rows": {}}
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    peers = args.peers.split(",")
    common.redis_cleanup()
    try:
        if "ours" in peers:
            with common.bench_db(common.db_name("lag"), keep=args.keep):
                out["rows"]["ours"] = run_ours(count, rate, duration, lead)
            common.redis_cleanup()
        if "dcb" in peers:
            dcb_db = common.db_name("dcb")
            with common.bench_db(dcb_db, settings="settings_peers", keep=args.keep):
                out["rows"]["dcb"] = run_peer("dcb", count, rate, duration, lead)
        if "redbeat" in peers:
            out["rows"]["redbeat"] = run_peer("redbeat", count, rate, duration, lead)
    finally:
        common.redis_cleanup()
    return out


NAMES = {"ours": "Duecourse", "dcb": "django-celery-beat", "redbeat": "RedBeat"}
HEADERS = ["scheduler", "due/s", "occurrences", "sent", "p50 (s)", "p95 (s)", "p99 (s)", "max (s)"]


def table_rows(data: dict[str, Any]) -> list[list[Any]]:
    """One row per scheduler; a percentile that depends on unsent occurrences shows as ≥."""
    rows = []
    for key, row in data["rows"].items():
        if "error" in row:
            rows.append([NAMES[key], data["rate"], data["count"], None, None, None, None, "failed"])
            continue
        lag = row["lag"]

        def show(p: int, lag: dict[str, Any] = lag) -> str:
            return ("≥ " if lag[f"p{p}_lower_bound"] else "") + common.fmt(lag[f"p{p}"], 3)

        rows.append(
            [
                NAMES[key],
                data["rate"],
                data["count"],
                lag["sent"],
                show(50),
                show(95),
                show(99),
                lag["max"],
            ]
        )
    return rows


def main() -> None:
    """Measure, save the results for run_all.py and print the table."""
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=500.0, help="due occurrences per second")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of steady load")
    parser.add_argument("--peers", default="ours,dcb,redbeat", help="comma-separated subset")
    args = parser.parse_args()
    data = measure(args)
    common.save_result("lag", data)
    print(f"\nLag from due to publish at {data['rate']:g} due/s for {data['duration']:g} s")
    print(common.render_table(HEADERS, table_rows(data), markdown=False))


if __name__ == "__main__":
    if not common.child_main({"peer": child_peer}):
        main()
