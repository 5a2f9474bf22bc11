"""Subscription renewals: child orders per second when N subscriptions renew at one moment.

N subscriptions (10,000 by default) are created through ``subscriptions.services`` with the
same start, so their first CreateChildOrder jobs are all due at the same instant, in
N / ``SUBSCRIPTIONS_BATCH_SIZE`` due batches. Then one stock ``celery worker`` (prefork,
concurrency 2) and the scheduler (``manage.py runscheduler``) are started, and every renewal
runs all its steps: the engine's start of its batch's run, price and create the order, charge
the test gateway, record the charge, confirm the order, place the next CreateChildOrder (a new
subscription job in its next batch, and that batch's engine job), the engine's completion.

The rate is N over the time from the first renewal's start to the last order's confirmation
(database timestamps); the wall time from the scheduler's start is printed beside it. A round
counts only if every subscription was renewed exactly once: one confirmed child order for
period 0, one accepted charge, its job completed, one next job placed. Rounds alternate
between the sides (``--sides``) on fresh subscriptions in the same database; best and median
are reported. ``pg_stat_database`` gives the transactions each round committed; the commits
per renewal are counted from the code path in docs/subscriptions.md.

The ``gateway_floor`` side is the raw limit in the same run: N charges through the test
gateway alone (one statement and one flushed commit each, the part of a renewal no batching
removes), from two processes side by side, as the worker's two processes would make them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common

DB = common.db_name("subs")
DOC = common.ROOT / "docs" / "benchmarks.md"
SECTION = "subscriptions_renewal"
TARGET = 500.0
LOADERS = 3  # set-up children creating a round's subscriptions side by side
SIDES = {
    "renewal": {},
    # A what-if: the project's settings with commits that do not wait for the disk; an upper
    # bound for the same code on a disk with a faster flush (the project never ships it).
    "renewal_async_commit": {"DATABASE_OPTIONS_SYNC": "off"},
    # The raw limit: the test gateway's charges alone, two processes, no engine, no renewal.
    "gateway_floor": {},
}
FLOOR_PROCESSES = 2


def child_load(p: dict[str, Any]) -> dict[str, Any]:
    """Create subscriptions ``first``..``last`` of round ``tag``, all starting at ``start``."""
    common.setup_django()
    from decimal import Decimal

    from django.db import transaction

    from subscriptions import pricing, services

    start = dt.datetime.fromisoformat(p["start"])
    began = time.perf_counter()
    items = [pricing.ItemSpec("COFFEE", 2, Decimal("9.90"))]
    for chunk in range(p["first"], p["last"], 500):
        with transaction.atomic():
            for i in range(chunk, min(p["last"], chunk + 500)):
                services.create_subscription(
                    customer=f"{p['tag']}-{i}",
                    items=items,
                    interval="P1M",
                    start=start,
                    end=None,
                    now=start,
                )
    return {"seconds": time.perf_counter() - began}


def child_charge(p: dict[str, Any]) -> dict[str, Any]:
    """Charge keys ``first``..``last`` of round ``tag`` through the configured gateway."""
    common.setup_django()
    from decimal import Decimal

    from subscriptions import payments

    gateway = payments.gateway()
    amount = Decimal("19.80000")
    began = time.time()
    for i in range(p["first"], p["last"]):
        gateway.charge(customer=f"{p['tag']}-{i}", amount=amount, idempotency_key=f"{p['tag']}:{i}")
    return {"began": began, "ended": time.time()}


def _children(name: str, env: dict[str, str], params: list[dict[str, Any]], tag: str) -> Any:
    """Run handler ``name`` once per params, side by side; their results, or an error."""
    procs = [
        subprocess.Popen(
            common.child_argv("subscriptions_renewal.py", name, p),
            cwd=common.ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=(common.RESULTS / f"{name}-{tag}-{n}.log").open("wb"),
            text=True,
        )
        for n, p in enumerate(params)
    ]
    outputs = [proc.communicate(timeout=3600)[0] for proc in procs]
    codes = [proc.returncode for proc in procs]
    if any(codes):
        return {
            "error": f"a {name} child failed (exit codes {codes}); see var/bench/{name}-{tag}-*.log"
        }
    return [
        json.loads(line[len("RESULT ") :])
        for out in outputs
        for line in out.splitlines()
        if line.startswith("RESULT ")
    ]


def run_floor(tag: str, count: int) -> dict[str, Any]:
    """N test-gateway charges from two processes: the renewal's per-renewal floor."""
    env = _env("gateway_floor")
    shares = [
        {"first": count * n // FLOOR_PROCESSES, "last": count * (n + 1) // FLOOR_PROCESSES}
        for n in range(FLOOR_PROCESSES)
    ]
    results = _children("charge", env, [{**p, "tag": tag} for p in shares], tag)
    if isinstance(results, dict):
        return {"count": count, **results}
    seconds = max(r["ended"] for r in results) - min(r["began"] for r in results)
    with common.pg_connect(DB) as conn:
        charges = conn.execute(
            "SELECT count(*), count(DISTINCT idempotency_key) FROM subscriptions_gatewaycharge"
            " WHERE customer LIKE %s",
            [f"{tag}-%"],
        ).fetchone()
    ok = tuple(charges) == (count, count)
    return {
        "count": count,
        "side": "gateway_floor",
        "seconds": seconds,
        "rate": count / seconds,
        "wall": seconds,
        "transactions_per_renewal": None,
        "renewed_once": int(charges[0]),
        "more_than_once": 0,
        "charges": int(charges[0]),
        "exactly_once": ok,
    }


def _load(env: dict[str, str], *, tag: str, count: int, start: dt.datetime) -> dict[str, Any]:
    """Create the round's subscriptions in ``LOADERS`` children side by side (set-up only)."""
    began = time.perf_counter()
    shares = [(n, count * n // LOADERS, count * (n + 1) // LOADERS) for n in range(LOADERS)]
    procs = [
        subprocess.Popen(
            common.child_argv(
                "subscriptions_renewal.py",
                "load",
                {"first": first, "last": last, "tag": tag, "start": start.isoformat()},
            ),
            cwd=common.ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(common.RESULTS / f"load-{tag}-{n}.log").open("wb"),
        )
        for n, first, last in shares
    ]
    codes = [proc.wait(timeout=3600) for proc in procs]
    if any(codes):
        return {"error": f"a loader failed (exit codes {codes}); see var/bench/load-{tag}-*.log"}
    return {"seconds": time.perf_counter() - began}


def _env(side: str) -> dict[str, str]:
    extra = {"SUBSCRIPTIONS_TIMEOUT": "120"}
    url = common.db_url(DB)
    if SIDES[side].get("DATABASE_OPTIONS_SYNC") == "off":
        url += "?options=-c%20synchronous_commit%3Doff"
    env = common.child_env(DB, extra=extra)
    env["DATABASE_URL"] = url
    return env


def _worker_argv() -> list[str]:
    return [
        common.PYTHON, "-m", "celery", "-A", "config", "worker", "-P", "prefork", "-c", "2",
        "-Q", "celery", "-n", f"subs-bench-{common.RUN_ID}@%h", "--without-mingle",
        "--without-gossip", "-l", "WARNING",
    ]  # fmt: skip


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("ab")
    return subprocess.Popen(
        argv, cwd=common.ROOT, env=env, stdout=handle, stderr=handle, start_new_session=True
    )


def _commits(conn: Any) -> int:
    row = conn.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    return int(row[0])


def _check(conn: Any, tag: str, count: int) -> dict[str, Any]:
    """Every subscription of the round renewed exactly once, with one charge and a next job."""
    like = f"{tag}-%"
    one = conn.execute(
        """
        SELECT count(*) FILTER (WHERE orders = 1 AND confirmed = 1),
               count(*) FILTER (WHERE orders > 1)
          FROM (SELECT s.id,
                       count(o.id) AS orders,
                       count(o.id) FILTER (WHERE o.status = 'confirmed') AS confirmed
                  FROM subscriptions_subscription s
                  LEFT JOIN subscriptions_order o
                         ON o.subscription_id = s.id AND o.parent_id IS NOT NULL
                 WHERE s.customer LIKE %s GROUP BY s.id) per
        """,
        [like],
    ).fetchone()
    charges = conn.execute(
        "SELECT count(*), count(DISTINCT idempotency_key) FROM subscriptions_gatewaycharge"
        " WHERE customer LIKE %s",
        [like],
    ).fetchone()
    jobs = conn.execute(
        """
        SELECT count(*) FILTER (WHERE j.custom_integer = 0 AND j.status = 3
                                  AND j.parameter = 'confirm' AND j.retry_count = 0),
               count(*) FILTER (WHERE j.custom_integer = 1 AND j.status = 0)
          FROM subscriptions_subscriptionjob j
          JOIN subscriptions_subscription s ON s.id = j.subscription_id
         WHERE s.customer LIKE %s
        """,
        [like],
    ).fetchone()
    renewed = int(one[0])
    ok = (
        renewed == count
        and int(one[1]) == 0
        and tuple(charges) == (count, count)
        and tuple(jobs) == (count, count)
    )
    return {
        "renewed_once": renewed,
        "more_than_once": int(one[1]),
        "charges": int(charges[0]),
        "distinct_keys": int(charges[1]),
        "jobs_completed": int(jobs[0]),
        "next_jobs": int(jobs[1]),
        "exactly_once": ok,
    }


def run_round(side: str, tag: str, count: int, timeout: float) -> dict[str, Any]:
    """Load ``count`` subscriptions due now, run one worker and the scheduler, time it."""
    common.redis_cleanup()
    env = _env(side)
    start = dt.datetime.now(dt.UTC).replace(microsecond=0)
    loaded = _load(env, tag=tag, count=count, start=start)
    if "error" in loaded:
        return {"count": count, "error": loaded["error"]}
    log = common.RESULTS / f"subscriptions-{tag}.log"
    with common.pg_connect(DB) as conn:
        conn.execute("VACUUM ANALYZE")
        commits_before = _commits(conn)
        worker = _start(_worker_argv(), env, log)
        try:
            deadline = time.monotonic() + 120
            while "worker.ready" not in log.read_text(errors="replace"):
                if time.monotonic() > deadline or worker.poll() is not None:
                    return {"count": count, "error": f"worker did not start; see {log}"}
                time.sleep(0.1)
            begun = time.monotonic()
            scheduler = _start([common.PYTHON, "manage.py", "runscheduler"], env, log)
            try:
                query = (
                    "SELECT count(*) FROM subscriptions_order o JOIN subscriptions_subscription s"
                    " ON s.id = o.subscription_id WHERE o.status = 'confirmed'"
                    " AND s.customer LIKE %s"
                )
                deadline = time.monotonic() + timeout
                while conn.execute(query, [f"{tag}-%"]).fetchone()[0] < count:
                    if time.monotonic() > deadline:
                        return {"count": count, "error": f"not done within {timeout:.0f} s"}
                    time.sleep(0.5)
                wall = time.monotonic() - begun
            finally:
                common.kill_group(scheduler)
        finally:
            common.kill_group(worker)
        commits = _commits(conn) - commits_before
        span = conn.execute(
            """
            SELECT extract(epoch FROM max(o.confirmed_at) - min(o.created_at))
              FROM subscriptions_order o JOIN subscriptions_subscription s
                ON s.id = o.subscription_id
             WHERE o.parent_id IS NOT NULL AND s.customer LIKE %s
            """,
            [f"{tag}-%"],
        ).fetchone()[0]
        checked = _check(conn, tag, count)
    common.redis_cleanup()
    seconds = float(span)
    return {
        "count": count,
        "side": side,
        "load_seconds": loaded.get("seconds"),
        "seconds": seconds,
        "rate": count / seconds,
        "wall": wall,
        "wall_rate": count / wall,
        "transactions_per_renewal": commits / count,
        **checked,
    }


def measure(args: Any) -> dict[str, Any]:
    count = 300 if args.quick else args.subscriptions
    rounds = 1 if args.quick else args.repeat
    sides = [s for s in args.sides.split(",") if s]
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"count": count, "sides": sides, "rounds": {s: [] for s in sides}}
    out["facts"] = {
        "loadavg": __import__("os").getloadavg(),
        "nproc": common._run(["nproc"]),
        "commit": common._run(["git", "-C", str(common.ROOT), "rev-parse", "--short", "HEAD"]),
    }
    try:
        with common.bench_db(DB, keep=args.keep):
            for number in range(1, rounds + 1):
                for side in sides:
                    tag = f"r{number}{side[:1]}{len(out['rounds'][side])}{side[-1]}"
                    if side == "gateway_floor":
                        result = run_floor(tag, count)
                    else:
                        result = run_round(side, tag, count, timeout=120 + count / 20)
                    result["round"] = number
                    out["rounds"][side].append(result)
                    _summarise(out)
                    common.save_result(SECTION, out)  # a run stopped early keeps its rounds
                    common.progress(side=side, round=number, rate=result.get("rate"))
                    print(f"{side} round {number}: {_line(result)}", flush=True)
    finally:
        common.redis_cleanup()
    _summarise(out)
    return out


def _summarise(out: dict[str, Any]) -> None:
    for side in out["sides"]:
        valid = [r["rate"] for r in out["rounds"][side] if r.get("exactly_once")]
        out.setdefault("best", {})[side] = max(valid, default=0.0)
        out.setdefault("median", {})[side] = statistics.median(valid) if valid else 0.0


def _line(r: dict[str, Any]) -> str:
    if "error" in r:
        return r["error"].splitlines()[0]
    return (
        f"{r['rate']:.0f} renewals/s ({r['seconds']:.1f} s; wall {r['wall']:.1f} s), "
        f"exactly once: {r['exactly_once']}, "
        + (
            "-"
            if r["transactions_per_renewal"] is None
            else f"{r['transactions_per_renewal']:.2f} tx/renewal"
        )
    )


HEADERS = [
    "side",
    "subscriptions",
    "round",
    "seconds",
    "child orders/s",
    "wall s (from scheduler start)",
    "transactions/renewal",
    "renewed exactly once",
]
NAMES = {
    "renewal": "renewal, all steps (shipped settings)",
    "renewal_async_commit": "same, what-if synchronous_commit=off",
    "gateway_floor": "floor: the test gateway's charges alone, 2 processes",
}


def table_rows(data: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for side in data["sides"]:
        for r in data["rounds"][side]:
            if "error" in r:
                rows.append(
                    [
                        NAMES[side],
                        r["count"],
                        r["round"],
                        None,
                        None,
                        None,
                        None,
                        r["error"].splitlines()[0],
                    ]
                )
                continue
            verdict = (
                "yes"
                if r["exactly_once"]
                else f"NO: {r['renewed_once']:,} once, {r['more_than_once']} more, "
                f"{r['charges']:,} charges"
            )
            rows.append(
                [
                    NAMES[side],
                    r["count"],
                    r["round"],
                    r["seconds"],
                    r["rate"],
                    r["wall"],
                    r["transactions_per_renewal"],
                    verdict,
                ]
            )
    for side in data["sides"]:
        rows.append(
            [
                f"{NAMES[side]}: best / median",
                None,
                None,
                None,
                f"{data['best'][side]:,.0f} / {data['median'][side]:,.0f}",
                None,
                None,
                None,
            ]
        )
    return rows


def render_section(data: dict[str, Any], command: str) -> str:
    best = data["best"].get("renewal", 0.0)
    verdict = "met" if best >= TARGET else "NOT met"
    lines = [
        "## Subscription renewals: child orders per second",
        "",
        f"Target: ≥ {TARGET:,.0f} child orders/s when {data['count']:,} subscriptions renew at"
        f" the same moment, all steps included, one worker (prefork, concurrency 2), every"
        f" subscription renewed exactly once. Best round: **{best:,.0f}/s** (median"
        f" {data['median'].get('renewal', 0.0):,.0f}/s): {verdict}.",
        "",
        common.render_table(HEADERS, table_rows(data), markdown=True),
        "",
        "*Child orders/s* is the number of subscriptions over the time from the first child"
        " order's creation to the last one's confirmation (database timestamps); the wall"
        " column runs from the scheduler's start, process start-up included. *Transactions/"
        "renewal* is `pg_stat_database.xact_commit` over the round divided by the renewals:"
        " every committed transaction of the worker, the scheduler and this script's progress"
        " query, read-only ones included.",
        "",
        "Commits per renewal: about **2** on the worker, of which **1** waits for the disk's"
        " flush, and that one is the payment provider's. Renewals run in due batches of up to"
        " 200 (one block of subscriptions due at one instant, `SUBSCRIPTIONS_BATCH_SIZE`), so"
        " 10,000 at once are 50 engine executions. A batch of 200 commits about 403 times"
        " besides the engine's two: (1) lock the subscriptions, price them, insert the orders"
        " and begin, one transaction; (2) one gateway commit per charge (flushed: it is the"
        " provider's record, and cannot share a transaction with ours); (3) right after each"
        " charge, one conditional UPDATE records its step, so a dead worker leaves at most one"
        " charge unrecorded (the retry's replay of the key covers it); (4) confirm the orders,"
        " complete the jobs and place the next ones, one transaction; (5) close the batch. (1),"
        " (3) and (4) do not wait for the flush: the engine's completion of the batch, committed"
        " after them, flushes the log up to it, and a crash before that loses only steps the"
        " retry redoes (the order by its unique period, the charge by its idempotency key)."
        " The scheduler's claim and publish are shared by the 50 batches.",
        "",
        "Reading the number: the *floor* side is the test gateway's charges alone from two"
        " processes, in the same run, with no engine and no renewal around them; the renewal's"
        " rate over the floor's is what everything else costs. Before due batches (commit"
        " `7e50c5f`), every renewal was an engine execution of its own. Run round by round"
        " against due batches as first built (`a4fe0ee`, a batch's charges recorded in one"
        " statement) on this machine (`bench/compare_commits.py --before 7e50c5f --only"
        " subscriptions --rounds 3 --no-docs`, 10,000 subscriptions), it renewed 100/s by the"
        " median (best 102) against 1,272/s (best 1,302): one engine execution cost more than"
        " a whole renewal does now. Recording each charge the moment it is made, so that a"
        " dead worker leaves at most one charge unrecorded, brought the shipped code to the"
        " rate in the table. docs/architecture.md (*Subscriptions*) has the design and its"
        " trade.",
        "",
        *(
            [
                f"**Measured on a shared machine** (load average {data['facts']['loadavg'][0]:.1f}"
                f" on {data['facts']['nproc']} cores at the start): the worker's two processes got"
                " a fraction of a core each, while section 4's figures come from a quiet"
                " machine. Rerun on a quiet machine for the number that counts.",
                "",
            ]
            if data["facts"]["loadavg"][0] > 2
            else []
        ),
        "Command (from the repository root, with `DATABASE_URL` pointing at the PostgreSQL"
        " server):",
        "",
        "```",
        command,
        "```",
        f"Finished {data['finished_at']}; load average before: "
        + ", ".join(f"{x:.2f}" for x in data["facts"]["loadavg"])
        + "; after: "
        + ", ".join(f"{x:.2f}" for x in data["load_after"])
        + f"; commit `{data['facts']['commit']}`.",
    ]
    return "\n".join(lines)


def write_section(text: str) -> None:
    """Replace this script's section of docs/benchmarks.md, or append it.

    The section is its heading, ``<!-- section:NAME -->``, the body and the closing marker:
    the shape ``run_all.py`` carries over when it renders the rest of the page again.
    """
    heading, _, body = text.partition("\n")
    start, end = f"<!-- section:{SECTION} -->", f"<!-- /section:{SECTION} -->"
    block = f"{heading}\n{start}\n{body.strip()}\n{end}"
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    pattern = re.compile(r"(?:## [^\n]*\n)?" + re.escape(start) + r".*?" + re.escape(end), re.S)
    if pattern.search(doc):
        doc = pattern.sub(lambda _: block, doc)
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(doc)


def main() -> None:
    # A stopped run still drops its database and Redis keys (the finally blocks run).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    parser = common.make_parser(__doc__.splitlines()[0])
    parser.add_argument("--subscriptions", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--sides",
        default="renewal",
        help="comma-separated: " + ", ".join(SIDES),
    )
    parser.add_argument("--no-doc", action="store_true", help="do not touch docs/benchmarks.md")
    parser.add_argument(
        "--render", action="store_true", help="only write the docs section from saved results"
    )
    args = parser.parse_args()
    if args.render:
        saved = common.load_result(SECTION)
        if saved is None:
            raise SystemExit(f"no saved results in {common.RESULTS}")
        write_section(render_section(saved, saved["command"]))
        print(f"wrote the section of {DOC}")
        return
    data = measure(args)
    path = common.save_result(SECTION, data)
    data = common.load_result(SECTION) or data
    print("\nSubscription renewals, one worker (prefork -c 2)")
    print(common.render_table(HEADERS, table_rows(data), markdown=False))
    if not args.no_doc and not args.quick:
        write_section(render_section(data, data["command"]))
        print(f"wrote the section of {DOC}")
    print(f"results in {path}")
    sys.stdout.flush()


if __name__ == "__main__":
    if not common.child_main({"load": child_load, "charge": child_charge}):
        main()
